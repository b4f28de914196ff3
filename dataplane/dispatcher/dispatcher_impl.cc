#include "dataplane/dispatcher/dispatcher_impl.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/log.h"
#include "dataplane/dispatcher/dataset_registration.h"
#include "dataplane/dispatcher/drain.h"
#include "dataplane/dispatcher/job_creation.h"
#include "dataplane/dispatcher/split_service.h"
#include "dataplane/dispatcher/task_placement.h"
#include "dataplane/pipeline/spec_parser.h"

namespace sluice::dispatcher {

using service::Update;

namespace {

int64_t ToMillis(absl::Duration d) { return absl::ToInt64Milliseconds(d); }

}  // namespace

DispatcherService::DispatcherService(DispatcherOptions options, const Clock* clock, Journal* journal,
                                     DispatcherMetrics* metrics)
    : options_(std::move(options)), clock_(clock), metrics_(metrics), js_(journal) {}

// ---------------------------------------------------------------- state, journal, gauges

absl::Status DispatcherService::Recover(const JournalContents& contents) {
  absl::MutexLock lock(&js_.mu);
  if (absl::Status s = js_.Recover(contents); !s.ok()) return s;
  // Everyone gets a full timeout to reconnect.
  const absl::Time now = clock_->Now();
  for (const auto& [address, w] : js_.state().workers()) worker_seen_[address] = now;
  for (const auto& [id, c] : js_.state().job_clients()) client_seen_[id] = now;
  UpdateGaugesLocked();
  return absl::OkStatus();
}

void DispatcherService::UpdateGaugesLocked() {
  if (metrics_ == nullptr) return;
  const DispatcherState& state = js_.state();
  int64_t active = 0;
  for (const auto& [id, job] : state.jobs()) active += job.finished ? 0 : 1;
  int64_t local = 0;
  int64_t remote = 0;
  for (const auto& [address, w] : state.workers()) {
    (w.placement == service::PLACEMENT_LOCAL ? local : remote)++;
  }
  metrics_->SetJobs(active);
  metrics_->SetWorkers(local, remote);
  std::map<std::string, std::pair<int64_t, int64_t>> per_job;
  for (const auto& [id, job] : state.jobs()) {
    if (job.finished) continue;
    auto& counts = per_job[JobLabel(job)];
    for (int64_t t : job.tasks) {
      const DispatcherState::Worker* w = state.FindWorker(state.FindTask(t)->worker_address);
      if (w == nullptr) continue;
      (w->placement == service::PLACEMENT_LOCAL ? counts.first : counts.second)++;
    }
  }
  metrics_->SetJobWorkers(per_job);
  if (js_.journal() != nullptr) metrics_->SetJournalBytes(js_.journal()->bytes());
}

absl::Status DispatcherService::MaybeCompact(bool force) {
  absl::StatusOr<bool> written = js_.MaybeCompact(force, options_.snapshot_every);
  if (!written.ok()) return written.status();
  if (!*written) return absl::OkStatus();
  {
    absl::MutexLock lock(&js_.mu);
    UpdateGaugesLocked();
  }
  if (metrics_ != nullptr) metrics_->AddSnapshot();
  return absl::OkStatus();
}

std::string DispatcherService::StateDebugString() const {
  absl::MutexLock lock(&js_.mu);
  return js_.state().DebugString();
}

int64_t DispatcherService::updates_since_snapshot() const {
  absl::MutexLock lock(&js_.mu);
  return js_.updates_since_snapshot();
}

// ---------------------------------------------------------------- datasets and jobs

absl::Status DispatcherService::RegisterDataset(const service::RegisterDatasetRequest& request,
                                                service::RegisterDatasetResponse* response) {
  absl::StatusOr<pipeline::PipelineDef> def = CanonicalPipeline(request, options_.plugin_dirs);
  if (!def.ok()) return def.status();
  const std::string id = pipeline::Fingerprint(*def);
  {
    int64_t sequence = -1;
    {
      absl::MutexLock lock(&js_.mu);
      if (js_.state().FindDataset(id) != nullptr) {
        RespondRegisteredLocked(id, response);
        sequence = js_.LastSequence();
      }
    }
    if (sequence >= 0) return js_.Durable(sequence);  // known already
  }
  // Before anything enumerates the splits (AutoOrder's sample, ListSplits): refuse too many.
  if (absl::Status s = CheckSplitLimit(*def, options_.max_dataset_splits); !s.ok()) return s;
  // AutoOrder and listing splits read the data files: outside the lock.
  absl::StatusOr<Update> registration = PrepareDataset(*std::move(def), id, options_.auto_order, metrics_);
  if (!registration.ok()) return registration.status();
  int64_t sequence = 0;
  {
    absl::MutexLock lock(&js_.mu);
    if (js_.state().FindDataset(id) == nullptr) {  // another request may have registered it meanwhile
      if (absl::Status s = js_.Commit(*registration); !s.ok()) return s;
      SLUICE_LOG(Info, "dataset registered")
          .With("dataset_id", id)
          .With("splits", static_cast<int64_t>(registration->register_dataset().splits_size()));
    }
    RespondRegisteredLocked(id, response);
    sequence = js_.LastSequence();
  }
  return js_.Durable(sequence);
}

void DispatcherService::RespondRegisteredLocked(const std::string& dataset_id,
                                                service::RegisterDatasetResponse* response) {
  response->set_dataset_id(dataset_id);
  response->set_num_splits(static_cast<int64_t>(js_.state().FindDataset(dataset_id)->splits.size()));
  dataset_retention_.Touch(dataset_id, clock_->Now());  // a job for it is probably on its way
}

absl::StatusOr<std::string> DispatcherService::SetDefaultPipeline(const pipeline::PipelineDef& def) {
  service::RegisterDatasetRequest request;
  *request.mutable_pipeline() = def;
  service::RegisterDatasetResponse response;
  if (absl::Status s = RegisterDataset(request, &response); !s.ok()) return s;
  absl::MutexLock lock(&js_.mu);
  default_dataset_id_ = response.dataset_id();
  return default_dataset_id_;
}

absl::Status DispatcherService::GetOrCreateJob(const service::GetOrCreateJobRequest& request,
                                               service::GetOrCreateJobResponse* response) {
  if (absl::Status s = CheckJobRequest(request); !s.ok()) return s;
  service::JobSpec spec = NormalizedJobSpec(request.spec(), options_.default_cross_job_sharing);
  int64_t sequence = 0;
  {
    absl::MutexLock lock(&js_.mu);
    if (absl::Status s = GetOrCreateJobLocked(request, std::move(spec), response); !s.ok()) return s;
    sequence = js_.LastSequence();
  }
  return js_.Durable(sequence);
}

absl::Status DispatcherService::GetOrCreateJobLocked(const service::GetOrCreateJobRequest& request,
                                                     service::JobSpec spec, service::GetOrCreateJobResponse* response) {
  if (spec.dataset_id().empty()) {
    if (default_dataset_id_.empty()) {
      return absl::FailedPreconditionError(
          "dataset_id is empty and this dispatcher serves no default pipeline (start it with --pipeline)");
    }
    spec.set_dataset_id(default_dataset_id_);
  }
  if (js_.state().FindDataset(spec.dataset_id()) == nullptr) {
    return absl::NotFoundError(
        absl::StrCat("spec.dataset_id '", spec.dataset_id(), "' is not known (register the dataset first)"));
  }
  const JobLookup found = FindJobFor(js_.state(), spec, request.iteration());
  if (found.over) {
    response->set_job_id(found.job != nullptr ? found.job->id : 0);
    response->set_iteration(request.iteration());
    response->set_dataset_id(found.job != nullptr ? found.job->spec.dataset_id() : spec.dataset_id());
    response->set_job_finished(true);
    return absl::OkStatus();
  }
  int64_t job_id = 0;
  const bool created = found.job == nullptr;
  if (!created) {
    if (absl::Status s = CheckSameJob(found.job->spec, spec); !s.ok()) return s;
    job_id = found.job->id;
  } else {
    absl::StatusOr<Update> create = CreateJobUpdate(js_.state(), spec, request);
    if (!create.ok()) return create.status();
    if (absl::Status s = js_.Commit(*create); !s.ok()) return s;
    job_id = create->create_job().job_id();
  }
  const int64_t client_id = js_.state().next_job_client_id();
  const int32_t consumer_index = spec.num_consumers() > 0 ? request.consumer_index() : 0;
  if (spec.num_consumers() > 0) {
    if (absl::Status s = ReplaceConsumerLocked(job_id, consumer_index, client_id, request.client_host()); !s.ok()) return s;
  }
  Update acquire;
  auto* a = acquire.mutable_acquire_job_client();
  a->set_job_client_id(client_id);
  a->set_job_id(job_id);
  a->set_client_host(request.client_host());
  a->set_target_workers(spec.target_workers());
  a->set_consumer_index(consumer_index);
  if (absl::Status s = js_.Commit(acquire); !s.ok()) return s;
  client_seen_[client_id] = clock_->Now();
  client_metrics_.StartClient(client_id);
  // Tasks follow readers: a new job gets tasks on the workers its client reads; a client from a
  // new host adds tasks on its host's workers.
  if (absl::Status s = created ? PlaceNewJobTasks(js_, job_id) : AddWantedTasks(js_, job_id); !s.ok()) return s;
  const DispatcherState::Job& job = *js_.state().FindJob(job_id);
  if (created) {
    SLUICE_LOG(Info, "job created")
        .With("job_id", job_id)
        .With("job_name", spec.job_name())
        .With("iteration", job.iteration)
        .With("dataset_id", spec.dataset_id())
        .With("sharding", service::ShardingPolicy_Name(spec.sharding()))
        .With("target_workers", service::TargetWorkers_Name(spec.target_workers()))
        .With("client_host", request.client_host())
        .With("cross_job_sharing", spec.cross_job_sharing())
        .With("tasks", static_cast<int64_t>(job.tasks.size()));
  }
  response->set_job_id(job_id);
  response->set_job_client_id(client_id);
  response->set_iteration(job.iteration);
  response->set_dataset_id(job.spec.dataset_id());
  return absl::OkStatus();
}

absl::Status DispatcherService::ReplaceConsumerLocked(int64_t job_id, int32_t consumer_index, int64_t new_client_id,
                                                      const std::string& client_host) {
  // One client per consumer index: a new one replaces the holder (a restarted trainer; a
  // misconfigured second one makes the first fail loudly instead of both reading half rounds).
  std::vector<int64_t> holders;
  for (int64_t other : js_.state().FindJob(job_id)->clients) {
    if (js_.state().FindJobClient(other)->consumer_index == consumer_index) holders.push_back(other);
  }
  for (int64_t holder : holders) {
    const std::string holder_host = js_.state().FindJobClient(holder)->client_host;
    if (absl::Status s = ReleaseClientLocked(holder); !s.ok()) return s;
    joins_.ClientReplaced(holder, absl::StrCat("job_client_id ", holder, " (consumer_index ", consumer_index, " of job ",
                                               job_id, ", host '", holder_host, "') was replaced by job client ",
                                               new_client_id, " from host '", client_host,
                                               "'; each consumer needs its own index"));
    SLUICE_LOG(Warning, "a new client takes over a consumer index")
        .With("job_id", job_id)
        .With("consumer_index", static_cast<int64_t>(consumer_index))
        .With("replaced_job_client_id", holder)
        .With("job_client_id", new_client_id);
  }
  return absl::OkStatus();
}

// ---------------------------------------------------------------- clients

absl::Status DispatcherService::ClientHeartbeat(const service::ClientHeartbeatRequest& request,
                                                service::ClientHeartbeatResponse* response) {
  if (request.current_round() < 0) {
    return absl::InvalidArgumentError(absl::StrCat("current_round is ", request.current_round(), "; must be >= 0"));
  }
  if (absl::Status s = CheckClientMetrics(request.metrics()); !s.ok()) return s;
  if (absl::Status s = CheckReceivedReport(request); !s.ok()) return s;
  int64_t sequence = 0;
  {
    absl::MutexLock lock(&js_.mu);
    const DispatcherState::JobClient* client = js_.state().FindJobClient(request.job_client_id());
    if (client == nullptr) {
      if (const std::string* why = joins_.ReplacedReason(request.job_client_id())) {
        return absl::FailedPreconditionError(*why);
      }
      return absl::NotFoundError(absl::StrCat("job_client_id ", request.job_client_id(), " is not known"));
    }
    client_seen_[client->id] = clock_->Now();
    const DispatcherState::Job& job = *js_.state().FindJob(client->job_id);
    const service::ClientMetrics delta = client_metrics_.Report(client->id, job.id, request.metrics());
    if (metrics_ != nullptr) metrics_->AddClientMetrics(JobLabel(job), delta);
    if (job.spec.num_consumers() > 0) {
      std::optional<int64_t> block_round;
      if (absl::Status s = joins_.OnClientHeartbeat(js_, job, client->id, request.current_round(),
                                                    request.acked_block_round(), &block_round);
          !s.ok()) {
        return s;
      }
      if (block_round.has_value()) response->set_block_round(*block_round);
    }
    response->set_job_id(job.id);
    response->set_job_finished(job.finished);
    for (const service::TaskElementsReceived& r : request.received()) {  // only the job's own tasks count
      if (const DispatcherState::Task* t = js_.state().FindTask(r.task_id()); t != nullptr && t->job_id == job.id) {
        delivery_.ClientReported(client->id, t->id, r.elements());
      }
    }
    response->set_elements_lost_estimate(delivery_.JobLost(job.id));
    // The same selection the client applies (dataplane/client/task_selection.h), so that a client
    // never waits for a task it would not read.
    for (const DispatcherState::Task* task : TasksReadBy(js_.state(), job, *client)) {
      const DispatcherState::Worker* worker = js_.state().FindWorker(task->worker_address);
      service::TaskInfo* info = response->add_tasks();
      info->set_task_id(task->id);
      info->set_job_id(task->job_id);
      info->set_worker_address(task->worker_address);
      info->set_worker_host(worker->host);
      info->set_placement(worker->placement);
      info->set_starting_round(task->starting_round);
      info->set_draining(worker->draining);
    }
    sequence = js_.LastSequence();
  }
  return js_.Durable(sequence);
}

absl::Status DispatcherService::ReleaseClientLocked(int64_t job_client_id) {
  Update u;
  u.mutable_release_job_client()->set_job_client_id(job_client_id);
  u.mutable_release_job_client()->set_time_ms(absl::ToUnixMillis(clock_->Now()));
  const int64_t job_id = js_.state().FindJobClient(job_client_id)->job_id;
  if (absl::Status s = js_.Commit(u); !s.ok()) return s;
  client_seen_.erase(job_client_id);
  client_metrics_.ForgetClient(job_client_id);  // its increments stay in the job's sum
  if (absl::Status s = joins_.ClientReleased(js_, job_id, job_client_id); !s.ok()) return s;
  // The tasks the clients read changed: a dynamic task nobody reads any more gives its splits
  // back, and a job whose read tasks are all done finishes.
  if (absl::Status s = FinishUnreadTasks(js_, job_id); !s.ok()) return s;
  return FinishJobIfDone(js_, job_id);
}

absl::Status DispatcherService::ReleaseJobClient(const service::ReleaseJobClientRequest& request,
                                                 service::ReleaseJobClientResponse*) {
  int64_t sequence = 0;
  {
    absl::MutexLock lock(&js_.mu);
    const DispatcherState::JobClient* client = js_.state().FindJobClient(request.job_client_id());
    if (client == nullptr) {
      return absl::NotFoundError(absl::StrCat("job_client_id ", request.job_client_id(), " is not known"));
    }
    const int64_t job_id = client->job_id;
    if (absl::Status s = ReleaseClientLocked(request.job_client_id()); !s.ok()) return s;
    SLUICE_LOG(Info, "job client released")
        .With("job_client_id", request.job_client_id())
        .With("job_id", job_id)
        .With("clients_left", static_cast<int64_t>(js_.state().FindJob(job_id)->clients.size()));
    sequence = js_.LastSequence();
  }
  return js_.Durable(sequence);
}

// ---------------------------------------------------------------- workers

absl::Status DispatcherService::RemoveWorkerLocked(const std::string& address, const std::string& reason) {
  const DispatcherState& state = js_.state();
  const DispatcherState::Worker* worker = state.FindWorker(address);
  std::set<int64_t> jobs;
  for (int64_t t : worker->tasks) jobs.insert(state.FindTask(t)->job_id);
  const int64_t num_tasks = static_cast<int64_t>(worker->tasks.size());
  // The splits it reads under a lease come back as remainders (counted per job).
  std::map<int64_t, int64_t> remainders;
  for (int64_t t : worker->tasks) {
    const DispatcherState::Job* job = state.FindJob(state.FindTask(t)->job_id);
    if (job->splits) {
      for (const auto& [index, r] : job->splits->reading) {
        if (r.task == t && r.lease_end >= 0) ++remainders[job->id];
      }
    }
  }
  // What died with it: produced but never received (not for a clean deregistration, which serves
  // what it buffered first).
  std::map<int64_t, int64_t> lost;
  if (reason != "deregistered") {
    for (int64_t t : worker->tasks) lost[js_.state().FindTask(t)->job_id] += delivery_.TaskLost(js_.state().FindTask(t)->job_id, t);
  }
  Update u;
  u.mutable_remove_worker()->set_worker_address(address);
  u.mutable_remove_worker()->set_reason(reason);
  if (absl::Status s = js_.Commit(u); !s.ok()) return s;
  worker_seen_.erase(address);
  worker_listed_tasks_.erase(address);
  worker_stats_.erase(address);
  heartbeats_since_split_report_.erase(address);
  joins_.WorkerRemoved(address);
  if (metrics_ != nullptr) metrics_->AddWorkerRemoval(reason);
  int64_t num_remainders = 0;
  for (const auto& [job_id, n] : remainders) {
    num_remainders += n;
    if (metrics_ != nullptr) metrics_->AddSplitRemainders(JobLabel(*state.FindJob(job_id)), n);
  }
  int64_t num_lost = 0;
  for (const auto& [job_id, n] : lost) {
    num_lost += n;
    if (metrics_ != nullptr && n > 0) metrics_->AddElementsLostEstimate(JobLabel(*js_.state().FindJob(job_id)), n);
  }
  SLUICE_LOG(Warning, "worker removed")
      .With("worker_address", address)
      .With("reason", reason)
      .With("tasks", num_tasks)
      .With("split_remainders", num_remainders)
      .With("elements_lost_estimate", num_lost);
  for (int64_t job_id : jobs) {
    if (absl::Status s = FinishJobIfDone(js_, job_id); !s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status DispatcherService::RegisterWorkerLocked(const service::WorkerHeartbeatRequest& request,
                                                     const std::set<int64_t>& listed) {
  const std::string& address = request.worker_address();
  if (const DispatcherState::Worker* worker = js_.state().FindWorker(address)) {
    // A worker that stops listing a live task it listed before lost it: the process restarted
    // under the same address. Start over, so its unstarted splits return to the queue.
    bool restarted = false;
    for (int64_t t : worker_listed_tasks_[address]) restarted |= worker->tasks.count(t) && !listed.count(t);
    if (!restarted) return absl::OkStatus();
    if (absl::Status s = RemoveWorkerLocked(address, "restarted"); !s.ok()) return s;
  }
  Update u;
  auto* r = u.mutable_register_worker();
  r->set_worker_address(address);
  r->set_worker_host(request.worker_host().empty() ? HostOf(address) : request.worker_host());
  r->set_placement(request.placement());
  if (absl::Status s = js_.Commit(u); !s.ok()) return s;
  SLUICE_LOG(Info, "worker registered")
      .With("worker_address", address)
      .With("worker_host", r->worker_host())
      .With("placement", service::Placement_Name(request.placement()))
      .With("draining", request.draining());
  if (request.draining()) return absl::OkStatus();
  return CreateTasksForWorker(js_, joins_, address);
}

absl::Status DispatcherService::WorkerHeartbeat(const service::WorkerHeartbeatRequest& request,
                                                service::WorkerHeartbeatResponse* response) {
  const std::string& address = request.worker_address();
  if (address.empty()) return absl::InvalidArgumentError("worker_address is empty (expected host:port)");
  if (!service::Placement_IsValid(request.placement())) {
    return absl::InvalidArgumentError(absl::StrCat("placement ", request.placement(), " is not a Placement"));
  }
  std::set<int64_t> listed;
  for (int i = 0; i < request.tasks_size(); ++i) {
    if (!listed.insert(request.tasks(i).task_id()).second) {
      return absl::InvalidArgumentError(absl::StrCat("tasks[", i, "].task_id ", request.tasks(i).task_id(), " is listed twice"));
    }
  }
  int64_t sequence = 0;
  {
    absl::MutexLock lock(&js_.mu);
    const absl::Time now = clock_->Now();
    if (absl::Status s = RegisterWorkerLocked(request, listed); !s.ok()) return s;
    if (request.draining()) {
      if (absl::Status s = MarkDraining(js_, address, /*requested=*/false); !s.ok()) return s;
    }
    for (const service::TaskProgress& progress : request.tasks()) {  // what it produced, for the loss estimate
      const DispatcherState::Task* task = js_.state().FindTask(progress.task_id());
      if (task != nullptr && task->worker_address == address) delivery_.WorkerReported(task->id, progress.elements_produced());
    }
    if (absl::Status s = ApplyTaskReports(js_, address, request.tasks(), response); !s.ok()) return s;
    // Tasks the worker does not hold yet.
    std::set<int64_t>& known = worker_listed_tasks_[address];
    known.clear();
    for (int64_t t : js_.state().FindWorker(address)->tasks) {
      if (listed.count(t)) {
        known.insert(t);
        auto* received = response->add_received();  // what the job's clients got of it
        received->set_task_id(t);
        received->set_elements(delivery_.Received(t));
      } else {
        FillTaskDef(js_.state(), *js_.state().FindTask(t), response->add_new_tasks());
      }
    }
    worker_seen_[address] = now;
    worker_stats_[address] = request.stats();
    ++heartbeats_since_split_report_[address];
    response->set_draining(js_.state().FindWorker(address)->draining);  // its tasks hand their input back
    response->set_heartbeat_interval_ms(ToMillis(options_.heartbeat_interval));
    sequence = js_.LastSequence();
  }
  return js_.Durable(sequence);
}

absl::Status DispatcherService::GetSplits(const service::GetSplitsRequest& request, service::GetSplitsResponse* response) {
  if (absl::Status s = CheckSplitsArguments(request); !s.ok()) return s;
  const int max_splits = std::min(request.max_splits(), options_.max_splits_per_request);
  int64_t sequence = 0;
  {
    absl::MutexLock lock(&js_.mu);
    absl::StatusOr<SplitsCall> call = CheckSplitsRequest(js_.state(), request);
    if (!call.ok()) return call.status();
    worker_seen_[call->worker_address] = clock_->Now();  // a GetSplits proves the worker alive too
    if (request.started_split_indices_size() > 0 || request.progress_size() > 0 ||
        request.returned_split_indices_size() > 0) {
      heartbeats_since_split_report_[call->worker_address] = 0;
    }
    if (absl::Status s = ServeSplits(js_, *call, request, max_splits, metrics_, response); !s.ok()) return s;
    sequence = js_.LastSequence();
  }
  return js_.Durable(sequence);
}

absl::Status DispatcherService::WorkerDeregister(const service::WorkerDeregisterRequest& request,
                                                 service::WorkerDeregisterResponse*) {
  int64_t sequence = 0;
  {
    absl::MutexLock lock(&js_.mu);
    if (js_.state().FindWorker(request.worker_address()) == nullptr) {
      return absl::NotFoundError(absl::StrCat("worker_address '", request.worker_address(), "' is not known"));
    }
    if (absl::Status s = RemoveWorkerLocked(request.worker_address(), "deregistered"); !s.ok()) return s;
    sequence = js_.LastSequence();
  }
  return js_.Durable(sequence);
}

absl::Status DispatcherService::DrainWorkers(const service::DrainWorkersRequest& request,
                                             service::DrainWorkersResponse* response) {
  if (absl::Status s = CheckDrainRequest(request); !s.ok()) return s;
  int64_t sequence = 0;
  {
    absl::MutexLock lock(&js_.mu);
    if (absl::Status s = dispatcher::DrainWorkers(js_, request, response); !s.ok()) return s;
    sequence = js_.LastSequence();
  }
  return js_.Durable(sequence);
}

absl::Status DispatcherService::GetState(const service::GetStateRequest&, service::GetStateResponse* response) {
  int64_t sequence = 0;
  {
    absl::MutexLock lock(&js_.mu);
    const DispatcherState& state = js_.state();
    const absl::Time now = clock_->Now();
    for (const auto& [address, w] : state.workers()) {
      service::WorkerInfo* info = response->add_workers();
      info->set_address(address);
      info->set_host(w.host);
      info->set_placement(w.placement);
      auto seen = worker_seen_.find(address);
      info->set_last_heartbeat_ms_ago(seen == worker_seen_.end() ? -1 : ToMillis(now - seen->second));
      for (int64_t t : w.tasks) info->add_task_ids(t);
      info->set_draining(w.draining);
      if (w.draining) {
        auto hb = heartbeats_since_split_report_.find(address);
        const DrainVerdict v =
            EvaluateDrained(state, w, delivery_, hb == heartbeats_since_split_report_.end() ? 0 : hb->second);
        info->set_drained(v.drained);
        info->set_undelivered_elements(v.undelivered_elements);
        info->set_splits_held(v.splits_held);
        info->set_drain_blocker(v.blocker);
      }
    }
    for (const auto& [id, job] : state.jobs()) {
      service::JobInfo* info = response->add_jobs();
      info->set_job_id(id);
      *info->mutable_spec() = job.spec;
      info->set_finished(job.finished);
      info->set_num_clients(static_cast<int64_t>(job.clients.size()));
      info->set_splits_served(job.splits_served);
      info->set_iteration(job.iteration);
      info->set_splits_total(static_cast<int64_t>(state.FindDataset(job.spec.dataset_id())->splits.size()));
      // Always present (zeros before the first client heartbeat), so answers compare alike.
      info->mutable_metrics();
      if (const service::ClientMetrics* m = client_metrics_.JobTotals(id)) *info->mutable_metrics() = *m;
    }
    response->set_default_dataset_id(default_dataset_id_);
    for (const auto& [id, dataset] : state.datasets()) {
      if (dataset.auto_order.has_value()) (*response->mutable_auto_order())[id] = *dataset.auto_order;
    }
    sequence = js_.LastSequence();
  }
  return js_.Durable(sequence);
}

// ---------------------------------------------------------------- periodic work

void DispatcherService::Tick() {
  int64_t sequence = 0;
  {
    absl::MutexLock lock(&js_.mu);
    const absl::Time now = clock_->Now();
    RemoveSilentLocked(now);
    const DispatcherState& state = js_.state();
    delivery_.Prune([&](int64_t t) { return state.FindTask(t) != nullptr; },
                    [&](int64_t j) { return state.FindJob(j) != nullptr; });
    for (int64_t job_id : joins_.PendingJobs()) {
      if (absl::Status s = joins_.CompleteIfAgreed(js_, job_id); !s.ok()) {
        SLUICE_LOG(Error, "cannot add a worker to a coordinated job").With("job_id", job_id).With("error", s.ToString());
      }
    }
    FinishAbandonedJobsLocked(now);
    ForgetOldJobsLocked(now);
    ForgetUnusedDatasetsLocked(now);
    UpdateGaugesLocked();
    sequence = js_.LastSequence();
  }
  if (absl::Status s = js_.Durable(sequence); !s.ok()) SLUICE_LOG(Error, "journal").With("error", s.ToString());
  if (absl::Status s = MaybeCompact(); !s.ok()) SLUICE_LOG(Error, "journal compaction failed").With("error", s.ToString());
}

void DispatcherService::RemoveSilentLocked(absl::Time now) {
  for (const std::string& address : TimedOut(worker_seen_, now, options_.worker_timeout)) {
    if (js_.state().FindWorker(address) == nullptr) {
      worker_seen_.erase(address);
      continue;
    }
    if (absl::Status s = RemoveWorkerLocked(address, "heartbeat timeout"); !s.ok()) {
      SLUICE_LOG(Error, "cannot remove worker").With("worker_address", address).With("error", s.ToString());
    }
  }
  for (int64_t id : TimedOut(client_seen_, now, options_.client_timeout)) {
    if (js_.state().FindJobClient(id) == nullptr) {
      client_seen_.erase(id);
      continue;
    }
    SLUICE_LOG(Warning, "job client timed out; releasing it").With("job_client_id", id);
    if (absl::Status s = ReleaseClientLocked(id); !s.ok()) {
      SLUICE_LOG(Error, "cannot release client").With("job_client_id", id).With("error", s.ToString());
    }
  }
}

void DispatcherService::FinishAbandonedJobsLocked(absl::Time now) {
  for (int64_t id : AbandonedJobs(js_.state(), now, options_.job_gc_grace)) {
    Update u;
    u.mutable_finish_job()->set_job_id(id);
    u.mutable_finish_job()->set_reason("no clients");
    if (absl::Status s = js_.Commit(u); !s.ok()) {
      SLUICE_LOG(Error, "cannot finish job").With("job_id", id).With("error", s.ToString());
      continue;
    }
    SLUICE_LOG(Info, "job finished").With("job_id", id).With("reason", "no clients");
  }
}

void DispatcherService::ForgetOldJobsLocked(absl::Time now) {
  for (int64_t id : FinishedJobsToForget(js_.state(), options_.finished_jobs_retained)) {
    const std::string label = JobLabel(*js_.state().FindJob(id));
    const std::string dataset_id = js_.state().FindJob(id)->spec.dataset_id();
    Update u;
    u.mutable_remove_job()->set_job_id(id);
    if (absl::Status s = js_.Commit(u); !s.ok()) {
      SLUICE_LOG(Error, "cannot remove finished job").With("job_id", id).With("error", s.ToString());
      break;
    }
    dataset_retention_.Touch(dataset_id, now);
    client_metrics_.ForgetJob(id);
    joins_.JobForgotten(id);
    bool label_in_use = false;
    for (const auto& [other, job] : js_.state().jobs()) label_in_use |= JobLabel(job) == label;
    if (metrics_ != nullptr && !label_in_use) metrics_->RemoveJobSeries(label);
    SLUICE_LOG(Info, "finished job forgotten (retention)").With("job_id", id);
  }
}

void DispatcherService::ForgetUnusedDatasetsLocked(absl::Time now) {
  for (const std::string& id :
       dataset_retention_.Unused(js_.state(), default_dataset_id_, now, options_.unused_dataset_retention)) {
    Update u;
    u.mutable_remove_dataset()->set_dataset_id(id);
    if (absl::Status s = js_.Commit(u); !s.ok()) {
      SLUICE_LOG(Error, "cannot remove unused dataset").With("dataset_id", id).With("error", s.ToString());
      continue;
    }
    dataset_retention_.Forget(id);
    SLUICE_LOG(Info, "unused dataset forgotten (retention)").With("dataset_id", id);
  }
}

}  // namespace sluice::dispatcher
