#include "dataplane/dispatcher/dispatcher_impl.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/log.h"
#include "dataplane/pipeline/pipeline.h"
#include "dataplane/pipeline/plugin.h"
#include "dataplane/pipeline/spec_parser.h"

namespace sluice::dispatcher {

using service::Update;

namespace {

bool IsStaticSharding(service::ShardingPolicy policy) {
  return policy == service::SHARDING_FILE || policy == service::SHARDING_DATA;
}

std::string ShortName(const std::string& enum_name, absl::string_view prefix) {
  return std::string(absl::StripPrefix(enum_name, prefix));
}

// The host part of "host:port" ("[v6]:port" too).
std::string HostOf(const std::string& address) {
  auto colon = address.rfind(':');
  std::string host = colon == std::string::npos ? address : address.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  return host;
}

int64_t ToMillis(absl::Duration d) { return absl::ToInt64Milliseconds(d); }

absl::Status CheckClientMetrics(const service::ClientMetrics& m) {
  auto bad_double = [](double v) { return !std::isfinite(v) || v < 0; };
  if (bad_double(m.wait_seconds_total())) {
    return absl::InvalidArgumentError(
        absl::StrCat("metrics.wait_seconds_total is ", m.wait_seconds_total(), "; must be a finite number >= 0"));
  }
  if (bad_double(m.step_seconds_total())) {
    return absl::InvalidArgumentError(
        absl::StrCat("metrics.step_seconds_total is ", m.step_seconds_total(), "; must be a finite number >= 0"));
  }
  if (m.elements_total() < 0) {
    return absl::InvalidArgumentError(absl::StrCat("metrics.elements_total is ", m.elements_total(), "; must be >= 0"));
  }
  if (m.bytes_total() < 0) {
    return absl::InvalidArgumentError(absl::StrCat("metrics.bytes_total is ", m.bytes_total(), "; must be >= 0"));
  }
  return absl::OkStatus();
}

}  // namespace

bool SameHost(const std::string& client_host, const std::string& worker_host) {
  return !client_host.empty() && client_host == worker_host;
}

DispatcherService::DispatcherService(DispatcherOptions options, const Clock* clock, Journal* journal,
                                     DispatcherMetrics* metrics)
    : options_(std::move(options)), clock_(clock), journal_(journal), metrics_(metrics) {}

// ---------------------------------------------------------------- plumbing

absl::Status DispatcherService::Commit(const Update& update) {
  if (auto s = state_.Check(update); !s.ok()) {
    SLUICE_LOG(Error, "dispatcher built an invalid update").With("update", update.ShortDebugString()).With("error", s.ToString());
    return absl::InternalError(absl::StrCat("dispatcher bug: ", s.message()));
  }
  if (journal_ != nullptr) {
    if (absl::Status health = journal_->health(); !health.ok()) {
      return absl::UnavailableError(
          absl::StrCat("the dispatcher's journal failed (", health.message(), "); it accepts no changes until restarted"));
    }
    journal_->Append(update);
  }
  absl::Status applied = state_.Apply(update);  // cannot fail after Check
  ++updates_since_snapshot_;
  return applied;
}

int64_t DispatcherService::LastSequenceLocked() const { return journal_ == nullptr ? 0 : journal_->last_appended(); }

absl::Status DispatcherService::Durable(int64_t sequence) {
  if (journal_ == nullptr || sequence == 0) return absl::OkStatus();
  absl::Status s = journal_->Sync(sequence);
  if (!s.ok()) return absl::UnavailableError(absl::StrCat("journal write failed: ", s.message()));
  return absl::OkStatus();
}

std::string DispatcherService::JobLabel(const DispatcherState::Job& job) const {
  return job.spec.job_name().empty() ? absl::StrCat(job.id) : job.spec.job_name();
}

absl::Status DispatcherService::Recover(const JournalContents& contents) {
  absl::MutexLock lock(&mu_);
  int64_t applied = 0;
  if (contents.snapshot.has_value()) {
    for (int i = 0; i < contents.snapshot->updates_size(); ++i) {
      if (auto s = state_.Apply(contents.snapshot->updates(i)); !s.ok()) {
        return absl::DataLossError(absl::StrCat("'", contents.snapshot_file, "': snapshot update ", i,
                                                " does not apply: ", s.message()));
      }
    }
  }
  for (size_t i = 0; i < contents.updates.size(); ++i) {
    if (auto s = state_.Apply(contents.updates[i]); !s.ok()) {
      return absl::DataLossError(absl::StrCat("journal update ", contents.first_sequence + static_cast<int64_t>(i),
                                              " does not apply: ", s.message()));
    }
    ++applied;
  }
  updates_since_snapshot_ = applied;
  // Everyone gets a full timeout to reconnect.
  const absl::Time now = clock_->Now();
  for (const auto& [address, w] : state_.workers()) worker_seen_[address] = now;
  for (const auto& [id, c] : state_.job_clients()) client_seen_[id] = now;
  UpdateGaugesLocked();
  return absl::OkStatus();
}

void DispatcherService::UpdateGaugesLocked() {
  if (metrics_ == nullptr) return;
  int64_t active = 0;
  for (const auto& [id, job] : state_.jobs()) active += job.finished ? 0 : 1;
  int64_t local = 0;
  int64_t remote = 0;
  for (const auto& [address, w] : state_.workers()) {
    (w.placement == service::PLACEMENT_LOCAL ? local : remote)++;
  }
  metrics_->SetJobs(active);
  metrics_->SetWorkers(local, remote);
  std::map<std::string, std::pair<int64_t, int64_t>> per_job;
  for (const auto& [id, job] : state_.jobs()) {
    if (job.finished) continue;
    auto& counts = per_job[JobLabel(job)];
    for (int64_t t : job.tasks) {
      const DispatcherState::Worker* w = state_.FindWorker(state_.FindTask(t)->worker_address);
      if (w == nullptr) continue;
      (w->placement == service::PLACEMENT_LOCAL ? counts.first : counts.second)++;
    }
  }
  metrics_->SetJobWorkers(per_job);
  if (journal_ != nullptr) metrics_->SetJournalBytes(journal_->bytes());
}

// ---------------------------------------------------------------- datasets and jobs

absl::Status DispatcherService::RegisterDataset(const service::RegisterDatasetRequest& request,
                                                service::RegisterDatasetResponse* response) {
  if (!request.has_pipeline() || request.pipeline().ByteSizeLong() == 0) {
    return absl::InvalidArgumentError("pipeline is empty: RegisterDatasetRequest.pipeline needs at least a source");
  }
  pipeline::PipelineDef def = request.pipeline();
  if (def.plugins_size() > 0) {
    // Before anything loads them: a client must not make the dispatcher (or the workers) dlopen
    // a library outside the directories the operator allowed.
    auto dirs = pipeline::ResolvePluginDirs(options_.plugin_dirs, "--plugin_dir");
    if (!dirs.ok()) return absl::FailedPreconditionError(absl::StrCat("pipeline: ", dirs.status().message()));
    if (absl::Status s = pipeline::CheckPipelinePlugins(def, *dirs, "--plugin_dir"); !s.ok()) {
      return absl::FailedPreconditionError(absl::StrCat("pipeline.", s.message()));
    }
  }
  if (absl::Status s = pipeline::Canonicalize(def); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("pipeline: ", s.message()));
  }
  const std::string id = pipeline::Fingerprint(def);
  {
    int64_t sequence = -1;
    {
      absl::MutexLock lock(&mu_);
      if (const auto* d = state_.FindDataset(id)) {
        response->set_dataset_id(id);
        response->set_num_splits(static_cast<int64_t>(d->splits.size()));
        dataset_last_used_[id] = clock_->Now();  // a job for it is probably on its way
        sequence = LastSequenceLocked();
      }
    }
    if (sequence >= 0) return Durable(sequence);  // known already
  }
  // Before anything enumerates the splits (AutoOrder's sample, ListSplits): refuse too many.
  if (absl::Status s = CheckSplitLimit(def, options_.max_dataset_splits); !s.ok()) return s;
  // AutoOrder and listing splits read the data files: outside the lock.
  std::optional<pipeline::AutoOrderReport> auto_order;
  if (options_.auto_order.mode != pipeline::AutoOrderMode::kOff) {
    auto planned = pipeline::PlanAutoOrder(def, options_.auto_order);
    if (planned.ok()) {
      def = std::move(planned->def);
      auto_order = std::move(planned->report);
      SLUICE_LOG(Info, "autoorder")
          .With("dataset_id", id)
          .With("mode", auto_order->mode())
          .With("outcome", auto_order->outcome())
          .With("summary", pipeline::SummarizeAutoOrderReport(*auto_order));
      if (metrics_ != nullptr) metrics_->AddAutoOrderPlan(*auto_order);
    } else {
      SLUICE_LOG(Warning, "autoorder").With("dataset_id", id).With("error", planned.status().ToString());
    }
  }
  auto compiled = pipeline::Pipeline::Create(def);
  if (!compiled.ok()) return absl::InvalidArgumentError(absl::StrCat("pipeline: ", compiled.status().message()));
  auto splits = (*compiled)->ListSplits();
  if (!splits.ok()) {
    return absl::FailedPreconditionError(absl::StrCat("pipeline: cannot list its splits (the dispatcher must see the data files): ",
                                                      splits.status().message()));
  }
  int64_t sequence = 0;
  {
    absl::MutexLock lock(&mu_);
    if (state_.FindDataset(id) == nullptr) {  // another request may have registered it meanwhile
      Update u;
      auto* r = u.mutable_register_dataset();
      r->set_dataset_id(id);
      *r->mutable_pipeline() = def;
      if (auto_order.has_value()) *r->mutable_auto_order() = *auto_order;
      for (const auto& split : *splits) {
        auto* s = r->add_splits();
        s->set_index(split.index);
        s->set_path(split.path);
        s->set_begin(split.begin);
        s->set_end(split.end);
      }
      if (absl::Status s = Commit(u); !s.ok()) return s;
      SLUICE_LOG(Info, "dataset registered").With("dataset_id", id).With("splits", static_cast<int64_t>(splits->size()));
    }
    response->set_dataset_id(id);
    response->set_num_splits(static_cast<int64_t>(state_.FindDataset(id)->splits.size()));
    dataset_last_used_[id] = clock_->Now();
    sequence = LastSequenceLocked();
  }
  return Durable(sequence);
}

absl::StatusOr<std::string> DispatcherService::SetDefaultPipeline(const pipeline::PipelineDef& def) {
  service::RegisterDatasetRequest request;
  *request.mutable_pipeline() = def;
  service::RegisterDatasetResponse response;
  if (absl::Status s = RegisterDataset(request, &response); !s.ok()) return s;
  absl::MutexLock lock(&mu_);
  default_dataset_id_ = response.dataset_id();
  return default_dataset_id_;
}

absl::Status DispatcherService::GetOrCreateJob(const service::GetOrCreateJobRequest& request,
                                               service::GetOrCreateJobResponse* response) {
  service::JobSpec spec = request.spec();
  if (!service::ShardingPolicy_IsValid(spec.sharding())) {
    return absl::InvalidArgumentError(absl::StrCat("spec.sharding ", spec.sharding(), " is not a ShardingPolicy"));
  }
  if (!service::TargetWorkers_IsValid(spec.target_workers())) {
    return absl::InvalidArgumentError(absl::StrCat("spec.target_workers ", spec.target_workers(), " is not a TargetWorkers value"));
  }
  if (!service::Compression_IsValid(spec.compression())) {
    return absl::InvalidArgumentError(absl::StrCat("spec.compression ", spec.compression(), " is not a Compression"));
  }
  if (spec.num_epochs() < -1) {
    return absl::InvalidArgumentError(
        absl::StrCat("spec.num_epochs is ", spec.num_epochs(), "; use -1 (forever) or a positive count"));
  }
  if (spec.num_consumers() < 0 || spec.num_consumers() > 65536) {
    return absl::InvalidArgumentError(absl::StrCat("spec.num_consumers is ", spec.num_consumers(), "; must be in [0, 65536]"));
  }
  if (spec.has_cross_job_sharing() && spec.cross_job_sharing() && spec.sharding() != service::SHARDING_OFF) {
    return absl::InvalidArgumentError("spec.cross_job_sharing needs sharding SHARDING_OFF (every job must see every element)");
  }
  if (spec.num_consumers() > 0 && spec.sharding() != service::SHARDING_OFF) {
    return absl::InvalidArgumentError("spec.num_consumers > 0 (coordinated reads) needs sharding SHARDING_OFF");
  }
  if (request.iteration() < 0 || (request.iteration() > 0 && spec.job_name().empty())) {
    return absl::InvalidArgumentError(absl::StrCat("iteration is ", request.iteration(),
                                                   "; must be 0, or > 0 with a spec.job_name (an iteration is a run "
                                                   "of a named job)"));
  }
  if (spec.num_consumers() > 0 && (request.consumer_index() < 0 || request.consumer_index() >= spec.num_consumers())) {
    return absl::InvalidArgumentError(absl::StrCat("consumer_index is ", request.consumer_index(), "; must be in [0, ",
                                                   spec.num_consumers(), ") (spec.num_consumers)"));
  }
  spec.set_num_epochs(NormalizedNumEpochs(spec.num_epochs()));
  if (!spec.has_cross_job_sharing()) {
    // --sharing: plain SHARDING_OFF jobs share the workers' pipeline runs unless they say otherwise.
    spec.set_cross_job_sharing(options_.default_cross_job_sharing && spec.sharding() == service::SHARDING_OFF &&
                               spec.num_consumers() == 0);
  }
  int64_t sequence = 0;
  {
    absl::MutexLock lock(&mu_);
    if (spec.dataset_id().empty()) {
      if (default_dataset_id_.empty()) {
        return absl::FailedPreconditionError(
            "dataset_id is empty and this dispatcher serves no default pipeline (start it with --pipeline)");
      }
      spec.set_dataset_id(default_dataset_id_);
    }
    if (state_.FindDataset(spec.dataset_id()) == nullptr) {
      return absl::NotFoundError(
          absl::StrCat("spec.dataset_id '", spec.dataset_id(), "' is not known (register the dataset first)"));
    }
    const DispatcherState::Job* job = nullptr;
    bool created = false;
    if (!spec.job_name().empty() && request.iteration() > 0) {
      // A reader's k-th pass reads the name's iteration k: joined while it runs, created if the
      // name has not reached it, over (an empty pass) once it finished or later ones started.
      const DispatcherState::Job* latest = state_.FindJobByName(spec.job_name());
      for (const auto& [id, j] : state_.jobs()) {
        if (j.spec.job_name() == spec.job_name() && j.iteration == request.iteration()) job = &j;
      }
      if ((job != nullptr && job->finished) ||
          (job == nullptr && latest != nullptr && latest->iteration > request.iteration())) {
        response->set_job_id(job != nullptr ? job->id : 0);
        response->set_iteration(request.iteration());
        response->set_dataset_id(job != nullptr ? job->spec.dataset_id() : spec.dataset_id());
        response->set_job_finished(true);
        return absl::OkStatus();
      }
    } else if (!spec.job_name().empty()) {
      job = state_.FindJobByName(spec.job_name());
      if (job != nullptr && job->finished) job = nullptr;  // a finished job's name can be reused
    }
    if (job != nullptr) {
      const service::JobSpec& have = job->spec;
      auto mismatch = [&](absl::string_view field, const std::string& existing, const std::string& requested) {
        return absl::FailedPreconditionError(absl::StrCat("job '", spec.job_name(), "' exists with ", field, " ", existing,
                                                          ", request has ", requested));
      };
      if (have.dataset_id() != spec.dataset_id()) return mismatch("dataset_id", have.dataset_id(), spec.dataset_id());
      if (have.sharding() != spec.sharding()) {
        return mismatch("sharding", ShortName(service::ShardingPolicy_Name(have.sharding()), "SHARDING_"),
                        ShortName(service::ShardingPolicy_Name(spec.sharding()), "SHARDING_"));
      }
      if (have.num_consumers() != spec.num_consumers()) {
        return mismatch("num_consumers", absl::StrCat(have.num_consumers()), absl::StrCat(spec.num_consumers()));
      }
      if (have.cross_job_sharing() != spec.cross_job_sharing()) {
        return mismatch("cross_job_sharing", have.cross_job_sharing() ? "true" : "false",
                        spec.cross_job_sharing() ? "true" : "false");
      }
      if (have.num_epochs() != spec.num_epochs()) {
        return mismatch("num_epochs", absl::StrCat(have.num_epochs()), absl::StrCat(spec.num_epochs()));
      }
      if (have.compression() != spec.compression()) {
        return mismatch("compression", ShortName(service::Compression_Name(have.compression()), "COMPRESSION_"),
                        ShortName(service::Compression_Name(spec.compression()), "COMPRESSION_"));
      }
    } else {
      const int64_t job_id = state_.next_job_id();
      Update create;
      create.mutable_create_job()->set_job_id(job_id);
      // Another run of a name whose previous job finished: its next iteration.
      const DispatcherState::Job* previous = spec.job_name().empty() ? nullptr : state_.FindJobByName(spec.job_name());
      create.mutable_create_job()->set_iteration(previous != nullptr ? previous->iteration + 1 : 1);
      *create.mutable_create_job()->mutable_spec() = spec;
      if (IsStaticSharding(spec.sharding())) {
        // The shards are fixed now, over the workers this client reads (every one unless it
        // reads LOCAL: then those on its host, which together hold the whole dataset).
        for (const auto& [address, w] : state_.workers()) {
          if (!w.draining && ClientWantsWorkerLocked(spec.sharding(), spec.target_workers(), request.client_host(), w)) {
            create.mutable_create_job()->add_static_workers(address);
          }
        }
        if (create.create_job().static_workers_size() == 0) {
          const std::string which =
              spec.target_workers() == service::TARGET_WORKERS_LOCAL
                  ? absl::StrCat("no worker on the client's host '", request.client_host(),
                                 "' is registered yet (target_workers LOCAL)")
                  : std::string("no workers are registered yet");
          return absl::UnavailableError(absl::StrCat(
              which, "; static sharding (", ShortName(service::ShardingPolicy_Name(spec.sharding()), "SHARDING_"),
              ") fixes the job's workers when it is created: retry once workers are up"));
        }
      }
      if (request.iteration() > 0) create.mutable_create_job()->set_iteration(request.iteration());
      if (absl::Status s = Commit(create); !s.ok()) return s;
      job = state_.FindJob(job_id);
      created = true;
    }
    const int64_t new_client_id = state_.next_job_client_id();
    const int32_t consumer_index = spec.num_consumers() > 0 ? request.consumer_index() : 0;
    if (spec.num_consumers() > 0) {
      // One client per consumer index: a new one replaces the holder (a restarted trainer; a
      // misconfigured second one makes the first fail loudly instead of both reading half rounds).
      std::vector<int64_t> holders;
      for (int64_t other : job->clients) {
        if (state_.FindJobClient(other)->consumer_index == consumer_index) holders.push_back(other);
      }
      const int64_t job_id = job->id;
      for (int64_t holder : holders) {
        const std::string holder_host = state_.FindJobClient(holder)->client_host;
        if (absl::Status s = ReleaseClientLocked(holder); !s.ok()) return s;
        replaced_clients_[holder] = absl::StrCat("job_client_id ", holder, " (consumer_index ", consumer_index,
                                                 " of job ", job_id, ", host '", holder_host,
                                                 "') was replaced by job client ", new_client_id, " from host '",
                                                 request.client_host(), "'; each consumer needs its own index");
        SLUICE_LOG(Warning, "a new client takes over a consumer index")
            .With("job_id", job_id)
            .With("consumer_index", static_cast<int64_t>(consumer_index))
            .With("replaced_job_client_id", holder)
            .With("job_client_id", new_client_id);
      }
      job = state_.FindJob(job_id);
    }
    Update acquire;
    auto* a = acquire.mutable_acquire_job_client();
    a->set_job_client_id(new_client_id);
    a->set_job_id(job->id);
    a->set_client_host(request.client_host());
    a->set_target_workers(spec.target_workers());
    a->set_consumer_index(consumer_index);
    if (absl::Status s = Commit(acquire); !s.ok()) return s;
    client_seen_[a->job_client_id()] = clock_->Now();
    client_metrics_[a->job_client_id()] = service::ClientMetrics();  // a new client counts from zero
    const int64_t job_id = job->id;
    // Tasks follow readers: a new job gets tasks on the workers its client reads (static jobs on
    // the workers fixed above, coordinated jobs on every worker); a client from a new host adds
    // tasks on its host's workers.
    if (created && IsStaticSharding(spec.sharding())) {
      const std::vector<std::string> fixed = job->static_workers;
      for (size_t i = 0; i < fixed.size(); ++i) {
        if (absl::Status s = CreateTaskLocked(*state_.FindJob(job_id), fixed[i], static_cast<int32_t>(i),
                                              static_cast<int32_t>(fixed.size()), /*starting_round=*/0);
            !s.ok()) {
          return s;
        }
      }
    } else if (created && spec.num_consumers() > 0) {
      std::vector<std::string> workers;
      for (const auto& [address, w] : state_.workers()) {
        if (!w.draining) workers.push_back(address);
      }
      for (const std::string& address : workers) {
        if (absl::Status s = CreateTaskLocked(*state_.FindJob(job_id), address, 0, 0, /*starting_round=*/0); !s.ok()) {
          return s;
        }
      }
    } else if (absl::Status s = AddWantedTasksLocked(job_id); !s.ok()) {
      return s;
    }
    job = state_.FindJob(job_id);
    if (created) {
      SLUICE_LOG(Info, "job created")
          .With("job_id", job_id)
          .With("job_name", spec.job_name())
          .With("iteration", job->iteration)
          .With("dataset_id", spec.dataset_id())
          .With("sharding", service::ShardingPolicy_Name(spec.sharding()))
          .With("target_workers", service::TargetWorkers_Name(spec.target_workers()))
          .With("client_host", request.client_host())
          .With("cross_job_sharing", spec.cross_job_sharing())
          .With("tasks", static_cast<int64_t>(job->tasks.size()));
    }
    response->set_job_id(job->id);
    response->set_job_client_id(a->job_client_id());
    response->set_iteration(job->iteration);
    response->set_dataset_id(job->spec.dataset_id());
    sequence = LastSequenceLocked();
  }
  return Durable(sequence);
}

absl::Status DispatcherService::CreateTaskLocked(const DispatcherState::Job& job, const std::string& address,
                                                 int32_t worker_index, int32_t num_workers, int64_t starting_round) {
  Update u;
  auto* t = u.mutable_create_task();
  t->set_task_id(state_.next_task_id());
  t->set_job_id(job.id);
  t->set_worker_address(address);
  t->set_worker_index(worker_index);
  t->set_num_workers(num_workers);
  t->set_starting_round(starting_round);
  return Commit(u);
}

bool DispatcherService::ClientWantsWorkerLocked(service::ShardingPolicy sharding, service::TargetWorkers target_workers,
                                                const std::string& client_host,
                                                const DispatcherState::Worker& worker) const {
  switch (target_workers) {
    case service::TARGET_WORKERS_ANY:
      return true;
    case service::TARGET_WORKERS_LOCAL:
      return SameHost(client_host, worker.host);
    default:  // AUTO
      if (sharding != service::SHARDING_OFF || SameHost(client_host, worker.host)) return true;
      // Under SHARDING_OFF the client reads only local tasks when its host has workers.
      for (const auto& [address, w] : state_.workers()) {
        if (!w.draining && SameHost(client_host, w.host)) return false;
      }
      return true;
  }
}

bool DispatcherService::JobWantsWorkerLocked(const DispatcherState::Job& job, const DispatcherState::Worker& worker) const {
  if (job.spec.num_consumers() > 0) return true;
  for (int64_t c : job.clients) {
    const DispatcherState::JobClient* client = state_.FindJobClient(c);
    if (client != nullptr &&
        ClientWantsWorkerLocked(job.spec.sharding(), client->target_workers, client->client_host, worker)) {
      return true;
    }
  }
  return false;
}

absl::Status DispatcherService::AddWantedTasksLocked(int64_t job_id) {
  const DispatcherState::Job* job = state_.FindJob(job_id);
  if (job == nullptr || job->finished || IsStaticSharding(job->spec.sharding()) || job->spec.num_consumers() > 0) {
    return absl::OkStatus();
  }
  std::vector<std::string> wanted;
  for (const auto& [address, w] : state_.workers()) {
    if (w.draining || !JobWantsWorkerLocked(*job, w)) continue;
    bool has_task = false;
    for (int64_t t : job->tasks) has_task |= state_.FindTask(t)->worker_address == address;
    if (!has_task) wanted.push_back(address);
  }
  for (const std::string& address : wanted) {
    if (absl::Status s = CreateTaskLocked(*state_.FindJob(job_id), address, 0, 0, /*starting_round=*/0); !s.ok()) {
      return s;
    }
  }
  return absl::OkStatus();
}

std::vector<const DispatcherState::Task*> DispatcherService::TasksReadByLocked(
    const DispatcherState::Job& job, const DispatcherState::JobClient& client) const {
  std::vector<const DispatcherState::Task*> all, local;
  for (int64_t t : job.tasks) {
    const DispatcherState::Task* task = state_.FindTask(t);
    all.push_back(task);
    if (SameHost(client.client_host, state_.FindWorker(task->worker_address)->host)) local.push_back(task);
  }
  if (job.spec.num_consumers() > 0) return all;  // coordinated: every consumer reads every task
  if (client.target_workers == service::TARGET_WORKERS_LOCAL) return local;
  if (client.target_workers == service::TARGET_WORKERS_AUTO && job.spec.sharding() == service::SHARDING_OFF &&
      !local.empty()) {
    return local;
  }
  return all;
}

absl::Status DispatcherService::FinishUnreadTasksLocked(int64_t job_id) {
  const DispatcherState::Job* job = state_.FindJob(job_id);
  if (job == nullptr || job->finished || job->clients.empty() || job->spec.sharding() != service::SHARDING_DYNAMIC) {
    return absl::OkStatus();
  }
  std::set<int64_t> read;
  for (int64_t c : job->clients) {
    for (const DispatcherState::Task* t : TasksReadByLocked(*job, *state_.FindJobClient(c))) read.insert(t->id);
  }
  std::vector<int64_t> unread;
  for (int64_t t : job->tasks) {
    if (!read.count(t) && !state_.FindTask(t)->finished) unread.push_back(t);
  }
  for (int64_t t : unread) {
    Update u;
    u.mutable_finish_task()->set_task_id(t);
    if (absl::Status s = Commit(u); !s.ok()) return s;
    SLUICE_LOG(Info, "task finished: no client reads it any more (its splits go to the other tasks)")
        .With("job_id", job_id)
        .With("task_id", t);
  }
  return FinishJobIfDoneLocked(job_id);
}

int64_t DispatcherService::StartingRoundLocked(const DispatcherState::Job& job) const {
  if (job.spec.num_consumers() == 0) return 0;
  auto it = max_round_seen_.find(job.id);
  if (job.tasks.empty()) {
    // Nobody serves rounds, so the clients wait where they are: start right there.
    if (it != max_round_seen_.end()) return it->second;
    return std::max<int64_t>(0, job.round_watermark - kRoundWatermarkLookahead);
  }
  // Before any client reported a round since this process started (a restart), the journaled
  // watermark bounds the rounds clients may have reached.
  const int64_t reached = it != max_round_seen_.end() ? it->second : job.round_watermark;
  return reached + kStartingRoundMargin;
}

absl::Status DispatcherService::CreateTasksForWorkerLocked(const std::string& address) {
  std::vector<int64_t> joins;
  for (const auto& [job_id, job] : state_.jobs()) {
    if (job.finished) continue;
    bool has_task = false;
    for (int64_t t : job.tasks) has_task |= state_.FindTask(t)->worker_address == address;
    if (has_task) continue;
    // Tasks follow readers: a job gets a task on this worker only if one of its clients reads it.
    if (!IsStaticSharding(job.spec.sharding()) && !JobWantsWorkerLocked(job, *state_.FindWorker(address))) continue;
    int32_t worker_index = 0;
    int32_t num_workers = 0;
    if (IsStaticSharding(job.spec.sharding())) {
      // Only the workers fixed at job creation; one that comes back gets its shard again.
      auto it = std::find(job.static_workers.begin(), job.static_workers.end(), address);
      if (it == job.static_workers.end()) continue;
      worker_index = static_cast<int32_t>(it - job.static_workers.begin());
      num_workers = static_cast<int32_t>(job.static_workers.size());
    }
    if (job.spec.num_consumers() > 0 && !job.tasks.empty() && !job.clients.empty()) {
      // Coordinated reads of a running job: the consumers must agree on the round the new task
      // starts at before any of them reaches it (see PendingJoin).
      auto [it, created] = pending_joins_.try_emplace(job_id);
      if (created) it->second.round = StartingRoundLocked(job);
      if (it->second.workers.emplace(address, std::make_pair(worker_index, num_workers)).second) {
        SLUICE_LOG(Info, "worker joins a coordinated job once its consumers agree on a round")
            .With("job_id", job_id)
            .With("worker_address", address)
            .With("proposed_round", it->second.round);
      }
      joins.push_back(job_id);
      continue;
    }
    if (absl::Status s = CreateTaskLocked(job, address, worker_index, num_workers, StartingRoundLocked(job)); !s.ok()) {
      return s;
    }
  }
  for (int64_t job_id : joins) {
    if (absl::Status s = CompleteJoinIfAgreedLocked(job_id); !s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status DispatcherService::CompleteJoinIfAgreedLocked(int64_t job_id) {
  auto it = pending_joins_.find(job_id);
  if (it == pending_joins_.end()) return absl::OkStatus();
  const DispatcherState::Job* job = state_.FindJob(job_id);
  if (job == nullptr || job->finished) {
    pending_joins_.erase(it);
    return absl::OkStatus();
  }
  PendingJoin& join = it->second;
  if (join.workers.empty()) {
    pending_joins_.erase(it);
    return absl::OkStatus();
  }
  bool agreed = true;
  for (int64_t c : job->clients) agreed &= join.acked.count(c) > 0;
  if (!agreed && !job->tasks.empty()) return absl::OkStatus();
  const PendingJoin done = std::move(join);
  pending_joins_.erase(it);
  for (const auto& [address, slot] : done.workers) {
    if (state_.FindWorker(address) == nullptr) continue;
    bool has_task = false;
    for (int64_t t : job->tasks) has_task |= state_.FindTask(t)->worker_address == address;
    if (has_task) continue;
    if (absl::Status s = CreateTaskLocked(*job, address, slot.first, slot.second, done.round); !s.ok()) return s;
    SLUICE_LOG(Info, "worker joined a coordinated job")
        .With("job_id", job_id)
        .With("worker_address", address)
        .With("starting_round", done.round);
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
    absl::MutexLock lock(&mu_);
    const DispatcherState::JobClient* client = state_.FindJobClient(request.job_client_id());
    if (client == nullptr) {
      if (auto it = replaced_clients_.find(request.job_client_id()); it != replaced_clients_.end()) {
        return absl::FailedPreconditionError(it->second);
      }
      return absl::NotFoundError(absl::StrCat("job_client_id ", request.job_client_id(), " is not known"));
    }
    client_seen_[client->id] = clock_->Now();
    const DispatcherState::Job& job = *state_.FindJob(client->job_id);
    // Metrics: the client reports totals; the job accumulates increments. A client without a
    // baseline was created before this process started (recovered from the journal): the previous
    // process counted its totals so far, so they become the baseline — otherwise the counters,
    // restarting at zero, would jump by the clients' whole lifetime (a spike in rate()).
    auto known = client_metrics_.find(client->id);
    if (known == client_metrics_.end()) known = client_metrics_.emplace(client->id, request.metrics()).first;
    service::ClientMetrics& last = known->second;
    service::ClientMetrics delta;
    delta.set_wait_seconds_total(std::max(0.0, request.metrics().wait_seconds_total() - last.wait_seconds_total()));
    delta.set_step_seconds_total(std::max(0.0, request.metrics().step_seconds_total() - last.step_seconds_total()));
    delta.set_elements_total(std::max<int64_t>(0, request.metrics().elements_total() - last.elements_total()));
    delta.set_bytes_total(std::max<int64_t>(0, request.metrics().bytes_total() - last.bytes_total()));
    last = request.metrics();
    service::ClientMetrics& sum = job_metrics_[job.id];
    sum.set_wait_seconds_total(sum.wait_seconds_total() + delta.wait_seconds_total());
    sum.set_step_seconds_total(sum.step_seconds_total() + delta.step_seconds_total());
    sum.set_elements_total(sum.elements_total() + delta.elements_total());
    sum.set_bytes_total(sum.bytes_total() + delta.bytes_total());
    if (metrics_ != nullptr) metrics_->AddClientMetrics(JobLabel(job), delta);

    const bool coordinated = job.spec.num_consumers() > 0;
    if (coordinated && !job.finished) {
      int64_t& seen = max_round_seen_[job.id];
      seen = std::max(seen, request.current_round());
      if (seen + kStartingRoundMargin >= job.round_watermark) {
        Update u;
        u.mutable_round_watermark()->set_job_id(job.id);
        u.mutable_round_watermark()->set_round(seen + kRoundWatermarkLookahead);
        if (absl::Status s = Commit(u); !s.ok()) return s;
      }
    }
    if (auto p = pending_joins_.find(job.id); coordinated && p != pending_joins_.end()) {
      PendingJoin& join = p->second;
      if (request.current_round() >= join.round) {
        // This client got there first: propose a later round, further ahead.
        join.margin = std::min(join.margin * 2, kMaxStartingRoundMargin);
        join.round = max_round_seen_[job.id] + join.margin;
        join.acked.clear();
      } else if (request.acked_block_round() == join.round) {
        join.acked.insert(client->id);
      }
      const int64_t proposed = join.round;
      if (absl::Status s = CompleteJoinIfAgreedLocked(job.id); !s.ok()) return s;
      if (pending_joins_.count(job.id)) response->set_block_round(proposed);
    }
    response->set_job_id(job.id);
    response->set_job_finished(job.finished);
    for (const service::TaskElementsReceived& r : request.received()) {  // only the job's own tasks count
      if (const DispatcherState::Task* t = state_.FindTask(r.task_id()); t != nullptr && t->job_id == job.id) {
        delivery_.ClientReported(client->id, t->id, r.elements());
      }
    }
    response->set_elements_lost_estimate(delivery_.JobLost(job.id));
    // The same selection the client applies (dataplane/client/task_selection.h), so that a client
    // never waits for a task it would not read.
    for (const DispatcherState::Task* task : TasksReadByLocked(job, *client)) {
      const DispatcherState::Worker* worker = state_.FindWorker(task->worker_address);
      service::TaskInfo* info = response->add_tasks();
      info->set_task_id(task->id);
      info->set_job_id(task->job_id);
      info->set_worker_address(task->worker_address);
      info->set_worker_host(worker->host);
      info->set_placement(worker->placement);
      info->set_starting_round(task->starting_round);
    }
    sequence = LastSequenceLocked();
  }
  return Durable(sequence);
}

absl::Status DispatcherService::ReleaseClientLocked(int64_t job_client_id) {
  Update u;
  u.mutable_release_job_client()->set_job_client_id(job_client_id);
  u.mutable_release_job_client()->set_time_ms(absl::ToUnixMillis(clock_->Now()));
  const int64_t job_id = state_.FindJobClient(job_client_id)->job_id;
  if (absl::Status s = Commit(u); !s.ok()) return s;
  client_seen_.erase(job_client_id);
  client_metrics_.erase(job_client_id);  // its increments stay in the job's sum
  if (auto it = pending_joins_.find(job_id); it != pending_joins_.end()) {
    it->second.acked.erase(job_client_id);
    // The others may all hold the round already.
    if (absl::Status s = CompleteJoinIfAgreedLocked(job_id); !s.ok()) return s;
  }
  // The tasks the clients read changed: a dynamic task nobody reads any more gives its splits
  // back, and a job whose read tasks are all done finishes.
  if (absl::Status s = FinishUnreadTasksLocked(job_id); !s.ok()) return s;
  return FinishJobIfDoneLocked(job_id);
}

absl::Status DispatcherService::ReleaseJobClient(const service::ReleaseJobClientRequest& request,
                                                 service::ReleaseJobClientResponse*) {
  int64_t sequence = 0;
  {
    absl::MutexLock lock(&mu_);
    const DispatcherState::JobClient* client = state_.FindJobClient(request.job_client_id());
    if (client == nullptr) {
      return absl::NotFoundError(absl::StrCat("job_client_id ", request.job_client_id(), " is not known"));
    }
    const int64_t job_id = client->job_id;
    if (absl::Status s = ReleaseClientLocked(request.job_client_id()); !s.ok()) return s;
    SLUICE_LOG(Info, "job client released")
        .With("job_client_id", request.job_client_id())
        .With("job_id", job_id)
        .With("clients_left", static_cast<int64_t>(state_.FindJob(job_id)->clients.size()));
    sequence = LastSequenceLocked();
  }
  return Durable(sequence);
}

// ---------------------------------------------------------------- workers

absl::Status DispatcherService::RemoveWorkerLocked(const std::string& address, const std::string& reason) {
  const DispatcherState::Worker* worker = state_.FindWorker(address);
  std::set<int64_t> jobs;
  for (int64_t t : worker->tasks) jobs.insert(state_.FindTask(t)->job_id);
  const int64_t num_tasks = static_cast<int64_t>(worker->tasks.size());
  // The splits it reads under a lease come back as remainders (counted per job).
  std::map<int64_t, int64_t> remainders;
  for (int64_t t : worker->tasks) {
    const DispatcherState::Job* job = state_.FindJob(state_.FindTask(t)->job_id);
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
    for (int64_t t : worker->tasks) lost[state_.FindTask(t)->job_id] += delivery_.TaskLost(state_.FindTask(t)->job_id, t);
  }
  Update u;
  u.mutable_remove_worker()->set_worker_address(address);
  u.mutable_remove_worker()->set_reason(reason);
  if (absl::Status s = Commit(u); !s.ok()) return s;
  worker_seen_.erase(address);
  worker_listed_tasks_.erase(address);
  worker_stats_.erase(address);
  for (auto it = pending_joins_.begin(); it != pending_joins_.end();) {
    it->second.workers.erase(address);
    it = it->second.workers.empty() ? pending_joins_.erase(it) : std::next(it);
  }
  if (metrics_ != nullptr) metrics_->AddWorkerRemoval(reason);
  int64_t num_remainders = 0;
  for (const auto& [job_id, n] : remainders) {
    num_remainders += n;
    if (metrics_ != nullptr) metrics_->AddSplitRemainders(JobLabel(*state_.FindJob(job_id)), n);
  }
  int64_t num_lost = 0;
  for (const auto& [job_id, n] : lost) {
    num_lost += n;
    if (metrics_ != nullptr && n > 0) metrics_->AddElementsLostEstimate(JobLabel(*state_.FindJob(job_id)), n);
  }
  SLUICE_LOG(Warning, "worker removed")
      .With("worker_address", address)
      .With("reason", reason)
      .With("tasks", num_tasks)
      .With("split_remainders", num_remainders)
      .With("elements_lost_estimate", num_lost);
  for (int64_t job_id : jobs) {
    if (absl::Status s = FinishJobIfDoneLocked(job_id); !s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status DispatcherService::FinishJobIfDoneLocked(int64_t job_id) {
  const DispatcherState::Job* job = state_.FindJob(job_id);
  if (job == nullptr || job->finished || job->tasks.empty()) return absl::OkStatus();
  std::set<int64_t> considered = job->tasks;
  if (job->spec.sharding() == service::SHARDING_OFF && job->spec.num_consumers() == 0 && !job->clients.empty()) {
    // Under SHARDING_OFF every task produces the whole dataset: the job is done when the tasks
    // its clients read are (AUTO reads only the local ones when there are some; the others may
    // never be read to their end).
    std::set<int64_t> read;
    for (int64_t c : job->clients) {
      for (const DispatcherState::Task* t : TasksReadByLocked(*job, *state_.FindJobClient(c))) read.insert(t->id);
    }
    if (read.empty()) return absl::OkStatus();
    considered = std::move(read);
  }
  for (int64_t t : considered) {
    if (!state_.FindTask(t)->finished) return absl::OkStatus();
  }
  Update u;
  u.mutable_finish_job()->set_job_id(job_id);
  u.mutable_finish_job()->set_reason("all tasks finished");
  if (absl::Status s = Commit(u); !s.ok()) return s;
  SLUICE_LOG(Info, "job finished").With("job_id", job_id).With("reason", "all tasks finished");
  return absl::OkStatus();
}

void DispatcherService::FillTaskDefLocked(const DispatcherState::Task& task, service::TaskDef* def) const {
  const DispatcherState::Job& job = *state_.FindJob(task.job_id);
  const DispatcherState::Dataset& dataset = *state_.FindDataset(job.spec.dataset_id());
  def->set_task_id(task.id);
  def->set_job_id(job.id);
  def->set_dataset_id(dataset.id);
  *def->mutable_pipeline() = dataset.pipeline;
  def->set_sharding(job.spec.sharding());
  def->set_worker_index(task.worker_index);
  def->set_num_workers(task.num_workers);
  def->set_num_consumers(job.spec.num_consumers());
  def->set_cross_job_sharing(job.spec.cross_job_sharing());
  def->set_num_epochs(job.spec.num_epochs());
  def->set_starting_round(task.starting_round);
  def->set_compression(job.spec.compression());
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
    absl::MutexLock lock(&mu_);
    const absl::Time now = clock_->Now();
    const DispatcherState::Worker* worker = state_.FindWorker(address);
    if (worker != nullptr) {
      // A worker that stops listing a live task it listed before lost it: the process restarted
      // under the same address. Start over, so its unstarted splits return to the queue.
      for (int64_t t : worker_listed_tasks_[address]) {
        if (worker->tasks.count(t) && !listed.count(t)) {
          if (absl::Status s = RemoveWorkerLocked(address, "restarted"); !s.ok()) return s;
          worker = nullptr;
          break;
        }
      }
    }
    if (worker == nullptr) {
      Update u;
      auto* r = u.mutable_register_worker();
      r->set_worker_address(address);
      r->set_worker_host(request.worker_host().empty() ? HostOf(address) : request.worker_host());
      r->set_placement(request.placement());
      if (absl::Status s = Commit(u); !s.ok()) return s;
      SLUICE_LOG(Info, "worker registered")
          .With("worker_address", address)
          .With("worker_host", r->worker_host())
          .With("placement", service::Placement_Name(request.placement()))
          .With("draining", request.draining());
      if (!request.draining()) {
        if (absl::Status s = CreateTasksForWorkerLocked(address); !s.ok()) return s;
      }
      worker = state_.FindWorker(address);
    }
    if (request.draining() && !worker->draining) {
      Update u;
      u.mutable_drain_worker()->set_worker_address(address);
      if (absl::Status s = Commit(u); !s.ok()) return s;
      SLUICE_LOG(Info, "worker draining").With("worker_address", address);
    }
    // Progress of the tasks the worker holds.
    std::set<int64_t> finished_jobs_to_check;
    for (const service::TaskProgress& progress : request.tasks()) {
      const DispatcherState::Task* task = state_.FindTask(progress.task_id());
      if (task == nullptr || task->worker_address != address) {
        response->add_tasks_to_delete(progress.task_id());  // finished job, removed task, or not this worker's
        continue;
      }
      const DispatcherState::Job& job = *state_.FindJob(task->job_id);
      delivery_.WorkerReported(task->id, progress.elements_produced());
      if (progress.started_split_indices_size() > 0 && job.splits && !task->finished) {
        std::vector<uint64_t> unstarted = state_.UnstartedSplitsOf(job, task->id);
        Update u;
        auto* s = u.mutable_start_splits();
        s->set_job_id(job.id);
        s->set_task_id(task->id);
        s->set_epoch(job.splits->epoch);
        std::set<uint64_t> seen;
        for (uint64_t index : progress.started_split_indices()) {
          if (std::binary_search(unstarted.begin(), unstarted.end(), index) && seen.insert(index).second) {
            s->add_split_indices(index);
          }
        }
        if (s->split_indices_size() > 0) {
          if (absl::Status st = Commit(u); !st.ok()) return st;
        }
      }
      if (progress.finished() && !task->finished) {
        Update u;
        u.mutable_finish_task()->set_task_id(task->id);
        if (absl::Status s = Commit(u); !s.ok()) return s;
        finished_jobs_to_check.insert(job.id);
      }
    }
    for (int64_t job_id : finished_jobs_to_check) {
      if (absl::Status s = FinishJobIfDoneLocked(job_id); !s.ok()) return s;
    }
    // Tasks the worker does not hold yet.
    worker = state_.FindWorker(address);
    std::set<int64_t>& known = worker_listed_tasks_[address];
    known.clear();
    for (int64_t t : worker->tasks) {
      if (listed.count(t)) {
        known.insert(t);
        auto* received = response->add_received();  // what the job's clients got of it
        received->set_task_id(t);
        received->set_elements(delivery_.Received(t));
      } else {
        FillTaskDefLocked(*state_.FindTask(t), response->add_new_tasks());
      }
    }
    worker_seen_[address] = now;
    worker_stats_[address] = request.stats();
    response->set_heartbeat_interval_ms(ToMillis(options_.heartbeat_interval));
    sequence = LastSequenceLocked();
  }
  return Durable(sequence);
}

absl::Status DispatcherService::GetSplits(const service::GetSplitsRequest& request, service::GetSplitsResponse* response) {
  if (request.max_splits() < 0) {
    return absl::InvalidArgumentError(absl::StrCat("max_splits is ", request.max_splits(), "; must be >= 0"));
  }
  if (request.epoch() < 0) return absl::InvalidArgumentError(absl::StrCat("epoch is ", request.epoch(), "; must be >= 0"));
  const int max_splits = std::min(request.max_splits(), options_.max_splits_per_request);
  int64_t sequence = 0;
  {
    absl::MutexLock lock(&mu_);
    if (absl::Status s = GetSplitsLocked(request, max_splits, response); !s.ok()) return s;
    sequence = LastSequenceLocked();
  }
  return Durable(sequence);
}

absl::Status DispatcherService::GetSplitsLocked(const service::GetSplitsRequest& request, int max_splits,
                                                service::GetSplitsResponse* response) {
  {
    const DispatcherState::Task* task = state_.FindTask(request.task_id());
    if (task == nullptr) return absl::NotFoundError(absl::StrCat("task_id ", request.task_id(), " is not known"));
    if (!request.worker_address().empty() && request.worker_address() != task->worker_address) {
      return absl::FailedPreconditionError(absl::StrCat("task_id ", task->id, " belongs to worker '", task->worker_address,
                                                        "', not '", request.worker_address(), "'"));
    }
    const DispatcherState::Job* job = state_.FindJob(task->job_id);
    if (job->spec.sharding() != service::SHARDING_DYNAMIC) {
      return absl::FailedPreconditionError(absl::StrCat(
          "job ", job->id, " uses sharding ", ShortName(service::ShardingPolicy_Name(job->spec.sharding()), "SHARDING_"),
          "; GetSplits serves SHARDING_DYNAMIC jobs only"));
    }
    const DispatcherState::Dataset& dataset = *state_.FindDataset(job->spec.dataset_id());
    for (int i = 0; i < request.started_split_indices_size(); ++i) {
      if (request.started_split_indices(i) >= dataset.splits.size()) {
        return absl::InvalidArgumentError(absl::StrCat("started_split_indices[", i, "] is ", request.started_split_indices(i),
                                                       "; dataset ", dataset.id, " has ", dataset.splits.size(), " splits"));
      }
    }
    for (int i = 0; i < request.progress_size(); ++i) {
      const service::SplitProgress& p = request.progress(i);
      if (p.index() >= dataset.splits.size() || p.lease_end() < -1 || p.epoch() < 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "progress[", i, "] has index ", p.index(), ", epoch ", p.epoch(), ", lease_end ", p.lease_end(),
            "; dataset ", dataset.id, " has ", dataset.splits.size(), " splits, epochs are >= 0, lease_end >= -1"));
      }
    }
    worker_seen_[task->worker_address] = clock_->Now();  // a GetSplits proves the worker alive too
    const int64_t task_id = task->id;
    const int64_t job_id = job->id;
    const int64_t requested_epoch = request.epoch();
    response->set_epoch(requested_epoch);
    auto splits_state = [&]() -> const DispatcherState::SplitState* {
      const DispatcherState::Job* j = state_.FindJob(job_id);
      return j->finished ? nullptr : (j->splits ? &*j->splits : nullptr);
    };
    auto task_done = [&]() { return state_.FindTask(task_id) == nullptr || state_.FindTask(task_id)->finished; };
    const DispatcherState::SplitState* s = splits_state();
    if (s == nullptr || task_done()) {
      response->set_end_of_splits(true);
      return absl::OkStatus();
    }
    if (requested_epoch > s->epoch + 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("epoch ", requested_epoch, " is ahead of job ", job_id, "'s epoch ", s->epoch));
    }
    // Acknowledgements: splits of the current epoch assigned to this task. A worker that already
    // moved to the next epoch may still acknowledge splits of this one.
    if (requested_epoch >= s->epoch && request.started_split_indices_size() > 0) {
      std::vector<uint64_t> unstarted = state_.UnstartedSplitsOf(*state_.FindJob(job_id), task_id);
      Update u;
      auto* start = u.mutable_start_splits();
      start->set_job_id(job_id);
      start->set_task_id(task_id);
      start->set_epoch(s->epoch);
      std::set<uint64_t> seen;
      for (uint64_t index : request.started_split_indices()) {
        if (std::binary_search(unstarted.begin(), unstarted.end(), index) && seen.insert(index).second) {
          start->add_split_indices(index);
        }
      }
      if (start->split_indices_size() > 0) {
        if (absl::Status st = Commit(u); !st.ok()) return st;
      }
    }
    // Position leases and finished splits of the current epoch (after the starts: a start and
    // its first lease travel together). Reports for an epoch that is over, or for splits this
    // task no longer reads (a restarted dispatcher, a retried call), change nothing.
    if (request.progress_size() > 0) {
      const DispatcherState::SplitState* now = splits_state();
      Update u;
      auto* progress = u.mutable_split_progress();
      progress->set_job_id(job_id);
      progress->set_task_id(task_id);
      progress->set_epoch(now->epoch);
      std::set<uint64_t> seen;
      for (const service::SplitProgress& p : request.progress()) {
        auto it = now->reading.find(p.index());
        if (p.epoch() != now->epoch || it == now->reading.end() || it->second.task != task_id ||
            !seen.insert(p.index()).second) {
          continue;
        }
        service::SplitProgress* entry = progress->add_progress();
        *entry = p;
        if (entry->lease_end() < it->second.lease_end) entry->set_lease_end(-1);
      }
      if (progress->progress_size() > 0) {
        if (absl::Status st = Commit(u); !st.ok()) return st;
      }
      s = splits_state();  // finishing the last leased split may end the epoch
      if (s == nullptr) {
        response->set_end_of_splits(true);
        return absl::OkStatus();
      }
    }
    // Every split of the epoch is started, and no other task reads one under a lease (if that
    // task is lost, the remainder comes back to the queue for the tasks still asking).
    auto all_started = [&]() {
      return s->queue.empty() && s->assigned.empty() &&
             !DispatcherState::OtherTaskHoldsLease(*state_.FindJob(job_id), task_id);
    };
    auto reach_end = [&]() -> absl::Status {
      if (s->tasks_at_epoch_end.count(task_id)) return absl::OkStatus();
      Update u;
      u.mutable_task_epoch_end()->set_job_id(job_id);
      u.mutable_task_epoch_end()->set_task_id(task_id);
      u.mutable_task_epoch_end()->set_epoch(s->epoch);
      return Commit(u);
    };
    const bool draining = state_.FindWorker(state_.FindTask(task_id)->worker_address)->draining;
    // Hands out the front of the current epoch's queue.
    auto assign = [&]() -> absl::Status {
      if (max_splits == 0 || draining || s->queue.empty()) return absl::OkStatus();
      Update u;
      auto* a = u.mutable_assign_splits();
      a->set_job_id(job_id);
      a->set_task_id(task_id);
      a->set_epoch(s->epoch);
      const size_t n = std::min(static_cast<size_t>(max_splits), s->queue.size());
      for (size_t i = 0; i < n; ++i) {
        a->add_split_indices(s->queue[i]);
        service::Split* split = response->add_splits();
        *split = dataset.splits[s->queue[i]];
        split->set_skip(DispatcherState::SkipOf(*state_.FindJob(job_id), s->queue[i]));
      }
      if (absl::Status st = Commit(u); !st.ok()) return st;
      if (metrics_ != nullptr) metrics_->AddSplitsServed(JobLabel(*state_.FindJob(job_id)), static_cast<int64_t>(n));
      return absl::OkStatus();
    };
    if (!s->exhausted && requested_epoch == s->epoch + 1) {
      if (all_started()) {
        // The worker finished the current epoch and moved on: it reached the end.
        if (absl::Status st = reach_end(); !st.ok()) return st;
        s = splits_state();  // may have moved to the next epoch
      } else if (!s->queue.empty()) {
        // The worker left the epoch early (e.g. `take` before `repeat`) while splits of it are
        // still queued. Nobody else may come back for them, so this task reads them: the response
        // says which epoch they belong to.
        response->set_epoch(s->epoch);
        return assign();
      }
      // else: other tasks still hold unstarted splits of the epoch; ask again.
    }
    if (s->exhausted || requested_epoch < s->epoch) {
      response->set_end_of_splits(true);  // that epoch is over
    } else if (requested_epoch == s->epoch) {
      if (!s->queue.empty()) {
        if (absl::Status st = assign(); !st.ok()) return st;  // draining or max_splits 0: nothing now
      } else if (all_started()) {
        response->set_end_of_splits(true);
        if (absl::Status st = reach_end(); !st.ok()) return st;
      }
      // else: other tasks hold unstarted splits that may come back; the worker asks again.
    }
    // else (requested == epoch + 1, the epoch has not moved yet): wait for the other tasks.
  }
  return absl::OkStatus();
}

absl::Status DispatcherService::WorkerDeregister(const service::WorkerDeregisterRequest& request,
                                                 service::WorkerDeregisterResponse*) {
  int64_t sequence = 0;
  {
    absl::MutexLock lock(&mu_);
    if (state_.FindWorker(request.worker_address()) == nullptr) {
      return absl::NotFoundError(absl::StrCat("worker_address '", request.worker_address(), "' is not known"));
    }
    if (absl::Status s = RemoveWorkerLocked(request.worker_address(), "deregistered"); !s.ok()) return s;
    sequence = LastSequenceLocked();
  }
  return Durable(sequence);
}

absl::Status DispatcherService::DrainWorkers(const service::DrainWorkersRequest& request,
                                             service::DrainWorkersResponse* response) {
  if (request.all_workers() && request.worker_addresses_size() > 0) {
    return absl::InvalidArgumentError(
        "worker_addresses lists workers and all_workers is set: name the workers or set all_workers, not both");
  }
  if (!request.all_workers() && request.worker_addresses_size() == 0) {
    return absl::InvalidArgumentError(
        "worker_addresses is empty: name the workers to drain (or set all_workers to drain every worker)");
  }
  for (int i = 0; i < request.worker_addresses_size(); ++i) {
    if (request.worker_addresses(i).empty()) {
      return absl::InvalidArgumentError(absl::StrCat("worker_addresses[", i, "] is empty"));
    }
  }
  int64_t sequence = 0;
  {
    absl::MutexLock lock(&mu_);
    std::vector<std::string> targets(request.worker_addresses().begin(), request.worker_addresses().end());
    if (request.all_workers()) {
      for (const auto& [address, w] : state_.workers()) targets.push_back(address);
    }
    std::set<std::string> done;
    for (const auto& address : targets) {
      const DispatcherState::Worker* worker = state_.FindWorker(address);
      if (worker == nullptr || done.count(address)) continue;  // already gone: nothing to drain
      if (!worker->draining) {
        Update u;
        u.mutable_drain_worker()->set_worker_address(address);
        if (absl::Status s = Commit(u); !s.ok()) return s;
        SLUICE_LOG(Info, "worker draining (requested)").With("worker_address", address);
      }
      done.insert(address);
      response->add_drained(address);
    }
    sequence = LastSequenceLocked();
  }
  return Durable(sequence);
}

absl::Status DispatcherService::GetState(const service::GetStateRequest&, service::GetStateResponse* response) {
  int64_t sequence = 0;
  {
    absl::MutexLock lock(&mu_);
    const absl::Time now = clock_->Now();
    for (const auto& [address, w] : state_.workers()) {
      service::WorkerInfo* info = response->add_workers();
      info->set_address(address);
      info->set_host(w.host);
      info->set_placement(w.placement);
      auto seen = worker_seen_.find(address);
      info->set_last_heartbeat_ms_ago(seen == worker_seen_.end() ? -1 : ToMillis(now - seen->second));
      for (int64_t t : w.tasks) info->add_task_ids(t);
      info->set_draining(w.draining);
    }
    for (const auto& [id, job] : state_.jobs()) {
      service::JobInfo* info = response->add_jobs();
      info->set_job_id(id);
      *info->mutable_spec() = job.spec;
      info->set_finished(job.finished);
      info->set_num_clients(static_cast<int64_t>(job.clients.size()));
      info->set_splits_served(job.splits_served);
      info->set_iteration(job.iteration);
      info->set_splits_total(static_cast<int64_t>(state_.FindDataset(job.spec.dataset_id())->splits.size()));
      // Always present (zeros before the first client heartbeat), so answers compare alike.
      info->mutable_metrics();
      if (auto m = job_metrics_.find(id); m != job_metrics_.end()) *info->mutable_metrics() = m->second;
    }
    response->set_default_dataset_id(default_dataset_id_);
    for (const auto& [id, dataset] : state_.datasets()) {
      if (dataset.auto_order.has_value()) (*response->mutable_auto_order())[id] = *dataset.auto_order;
    }
    sequence = LastSequenceLocked();
  }
  return Durable(sequence);
}

// ---------------------------------------------------------------- periodic work

void DispatcherService::Tick() {
  int64_t sequence = 0;
  {
    absl::MutexLock lock(&mu_);
    const absl::Time now = clock_->Now();
    std::vector<std::string> dead;
    for (const auto& [address, seen] : worker_seen_) {
      if (now - seen > options_.worker_timeout) dead.push_back(address);
    }
    for (const auto& address : dead) {
      if (state_.FindWorker(address) == nullptr) {
        worker_seen_.erase(address);
        continue;
      }
      if (absl::Status s = RemoveWorkerLocked(address, "heartbeat timeout"); !s.ok()) {
        SLUICE_LOG(Error, "cannot remove worker").With("worker_address", address).With("error", s.ToString());
      }
    }
    std::vector<int64_t> silent;
    for (const auto& [id, seen] : client_seen_) {
      if (now - seen > options_.client_timeout) silent.push_back(id);
    }
    for (int64_t id : silent) {
      if (state_.FindJobClient(id) == nullptr) {
        client_seen_.erase(id);
        continue;
      }
      SLUICE_LOG(Warning, "job client timed out; releasing it").With("job_client_id", id);
      if (absl::Status s = ReleaseClientLocked(id); !s.ok()) {
        SLUICE_LOG(Error, "cannot release client").With("job_client_id", id).With("error", s.ToString());
      }
    }
    delivery_.Prune([&](int64_t t) { return state_.FindTask(t) != nullptr; },
                    [&](int64_t j) { return state_.FindJob(j) != nullptr; });
    std::vector<int64_t> joins;
    for (const auto& [job_id, join] : pending_joins_) joins.push_back(job_id);
    for (int64_t job_id : joins) {
      if (absl::Status s = CompleteJoinIfAgreedLocked(job_id); !s.ok()) {
        SLUICE_LOG(Error, "cannot add a worker to a coordinated job").With("job_id", job_id).With("error", s.ToString());
      }
    }
    const int64_t now_ms = absl::ToUnixMillis(now);
    std::vector<int64_t> abandoned;
    for (const auto& [id, job] : state_.jobs()) {
      if (!job.finished && job.clients.empty() && now_ms - job.last_client_release_ms >= ToMillis(options_.job_gc_grace)) {
        abandoned.push_back(id);
      }
    }
    for (int64_t id : abandoned) {
      Update u;
      u.mutable_finish_job()->set_job_id(id);
      u.mutable_finish_job()->set_reason("no clients");
      if (absl::Status s = Commit(u); !s.ok()) {
        SLUICE_LOG(Error, "cannot finish job").With("job_id", id).With("error", s.ToString());
        continue;
      }
      SLUICE_LOG(Info, "job finished").With("job_id", id).With("reason", "no clients");
    }
    // Retention: beyond finished_jobs_retained finished jobs, the oldest are forgotten (those
    // without clients that are not their name's latest: that one keeps the iteration count).
    int64_t finished = 0;
    std::vector<int64_t> removable;
    for (const auto& [id, job] : state_.jobs()) {
      if (!job.finished) continue;
      ++finished;
      if (state_.Removable(job)) removable.push_back(id);
    }
    for (size_t i = 0; i < removable.size() && finished > options_.finished_jobs_retained; ++i) {
      const std::string label = JobLabel(*state_.FindJob(removable[i]));
      const std::string dataset_id = state_.FindJob(removable[i])->spec.dataset_id();
      Update u;
      u.mutable_remove_job()->set_job_id(removable[i]);
      if (absl::Status s = Commit(u); !s.ok()) {
        SLUICE_LOG(Error, "cannot remove finished job").With("job_id", removable[i]).With("error", s.ToString());
        break;
      }
      --finished;
      dataset_last_used_[dataset_id] = now;
      job_metrics_.erase(removable[i]);
      max_round_seen_.erase(removable[i]);
      bool label_in_use = false;
      for (const auto& [id, job] : state_.jobs()) label_in_use |= JobLabel(job) == label;
      if (metrics_ != nullptr && !label_in_use) metrics_->RemoveJobSeries(label);
      SLUICE_LOG(Info, "finished job forgotten (retention)").With("job_id", removable[i]);
    }
    // Datasets no job refers to, unused for unused_dataset_retention, are forgotten (their split
    // lists are the bulk of a long-lived dispatcher's state). The period covers a client that
    // registered a dataset and has yet to create its job.
    std::vector<std::string> unused;
    for (const auto& [id, dataset] : state_.datasets()) {
      if (state_.DatasetInUse(id) || id == default_dataset_id_) {  // the default pipeline stays
        dataset_last_used_.erase(id);
        continue;
      }
      auto [it, first_seen] = dataset_last_used_.try_emplace(id, now);
      if (!first_seen && now - it->second >= options_.unused_dataset_retention) unused.push_back(id);
    }
    for (const std::string& id : unused) {
      Update u;
      u.mutable_remove_dataset()->set_dataset_id(id);
      if (absl::Status s = Commit(u); !s.ok()) {
        SLUICE_LOG(Error, "cannot remove unused dataset").With("dataset_id", id).With("error", s.ToString());
        continue;
      }
      dataset_last_used_.erase(id);
      SLUICE_LOG(Info, "unused dataset forgotten (retention)").With("dataset_id", id);
    }
    UpdateGaugesLocked();
    sequence = LastSequenceLocked();
  }
  if (absl::Status s = Durable(sequence); !s.ok()) SLUICE_LOG(Error, "journal").With("error", s.ToString());
  if (absl::Status s = MaybeCompact(); !s.ok()) SLUICE_LOG(Error, "journal compaction failed").With("error", s.ToString());
}

absl::Status DispatcherService::MaybeCompact(bool force) {
  if (journal_ == nullptr) return absl::OkStatus();
  service::Snapshot snapshot;
  {
    absl::MutexLock lock(&mu_);
    if (compacting_) return absl::OkStatus();
    const bool due = options_.snapshot_every > 0 && updates_since_snapshot_ >= options_.snapshot_every;
    if (!force && !due) return absl::OkStatus();
    // The cut: the state now equals the journal up to last_appended; the next record opens a new segment.
    snapshot.set_last_update_sequence(journal_->last_appended());
    for (auto& u : state_.ToSnapshotUpdates()) *snapshot.add_updates() = std::move(u);
    journal_->StartNewSegment();
    compacting_ = true;
    updates_since_snapshot_ = 0;
  }
  absl::Status s = journal_->WriteSnapshot(snapshot);  // disk I/O without the lock
  {
    absl::MutexLock lock(&mu_);
    compacting_ = false;
    if (!s.ok()) {
      updates_since_snapshot_ += options_.snapshot_every;  // try again next time
      return s;
    }
    UpdateGaugesLocked();
  }
  if (metrics_ != nullptr) metrics_->AddSnapshot();
  SLUICE_LOG(Info, "journal snapshot written")
      .With("sequence", snapshot.last_update_sequence())
      .With("updates", static_cast<int64_t>(snapshot.updates_size()))
      .With("journal_bytes", journal_->bytes());
  return absl::OkStatus();
}

std::string DispatcherService::StateDebugString() const {
  absl::MutexLock lock(&mu_);
  return state_.DebugString();
}

int64_t DispatcherService::updates_since_snapshot() const {
  absl::MutexLock lock(&mu_);
  return updates_since_snapshot_;
}

}  // namespace sluice::dispatcher
