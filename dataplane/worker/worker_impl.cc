#include "dataplane/worker/worker_impl.h"

#include <algorithm>
#include <limits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/log.h"

namespace sluice::worker {
namespace {

std::shared_ptr<WorkerMetrics> DefaultMetrics(const WorkerConfig& config) {
  std::string placement = config.placement == service::PLACEMENT_LOCAL    ? "local"
                          : config.placement == service::PLACEMENT_REMOTE ? "remote"
                                                                          : "";
  return std::make_shared<WorkerMetrics>(
      nullptr, std::map<std::string, std::string>{{"worker", config.worker_address}, {"placement", placement}, {"dataservice", ""}});
}

}  // namespace

WorkerImpl::WorkerImpl(WorkerConfig config, DispatcherClient* dispatcher, std::shared_ptr<WorkerMetrics> metrics)
    : config_(std::move(config)),
      dispatcher_(dispatcher),
      metrics_(metrics ? std::move(metrics) : DefaultMetrics(config_)),
      sharing_(config_.sharing_window_elements, config_.runner.runtime, metrics_.get()),
      heartbeat_interval_(config_.heartbeat_interval) {
  env_.options = config_.runner;
  env_.dispatcher = dispatcher_;
  env_.worker_address = config_.worker_address;
  env_.sharing = &sharing_;
  env_.metrics = metrics_.get();
}

WorkerImpl::~WorkerImpl() { Stop(); }

void WorkerImpl::Start() {
  absl::MutexLock lock(&mu_);
  if (heartbeat_thread_.joinable() || stopping_ || heartbeats_stopping_) return;
  starter_thread_ = std::thread([this] { StarterLoop(); });
  heartbeat_thread_ = std::thread([this] { HeartbeatLoop(); });
}

void WorkerImpl::StarterLoop() {
  while (true) {
    service::TaskDef task;
    {
      absl::MutexLock lock(&mu_);
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stopping_ || !to_start_.empty(); };
      mu_.Await(absl::Condition(&ready));
      if (stopping_) {
        to_start_.clear();
        starting_.clear();
        return;
      }
      task = std::move(to_start_.front());
      to_start_.pop_front();
    }
    StartTask(task);
  }
}

void WorkerImpl::StartTask(const service::TaskDef& task) {
  if (config_.before_task_build) config_.before_task_build(task.task_id());
  std::shared_ptr<TaskRunner> runner = CreateTaskRunner(task, env_);  // outside the lock: builds a pipeline
  absl::MutexLock lock(&mu_);
  starting_.erase(task.task_id());
  if (draining_ || stopping_ || input_released_ || tasks_.count(task.task_id()) > 0) return;
  tasks_[task.task_id()] = std::move(runner);
  SLUICE_LOG(Info, "task started")
      .With("task_id", task.task_id())
      .With("job_id", task.job_id())
      .With("sharding", service::ShardingPolicy_Name(task.sharding()))
      .With("num_consumers", static_cast<int64_t>(task.num_consumers()))
      .With("cross_job_sharing", task.cross_job_sharing());
}

void WorkerImpl::HeartbeatLoop() {
  bool failing = false;
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      if (stopping_ || heartbeats_stopping_) break;
    }
    absl::Status status = HeartbeatImpl(CallOptions{&stop_token_}, /*start_async=*/true);
    if (!status.ok() && !stop_token_.cancelled()) {
      if (!failing) {
        SLUICE_LOG(Warning, "heartbeat to the dispatcher failed; retrying every interval")
            .With("error", status.ToString());
      }
      failing = true;
    } else if (status.ok() && failing) {
      SLUICE_LOG(Info, "dispatcher reachable again; re-registered");
      failing = false;
    }
    absl::MutexLock lock(&mu_);
    const absl::Duration interval = heartbeat_interval_;
    // An explicit request (an unknown task, a drain) comes early, but not more than 10 per interval.
    auto stop = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stopping_ || heartbeats_stopping_; };
    if (mu_.AwaitWithTimeout(absl::Condition(&stop), interval / 10)) break;
    auto wake = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return stopping_ || heartbeats_stopping_ || heartbeat_requested_;
    };
    mu_.AwaitWithTimeout(absl::Condition(&wake), interval - interval / 10);
    heartbeat_requested_ = false;
  }
  absl::MutexLock lock(&mu_);
  heartbeat_loop_done_ = true;
}

void WorkerImpl::StopHeartbeats(absl::Time deadline) {
  {
    absl::MutexLock lock(&mu_);
    heartbeats_stopping_ = true;
    if (heartbeat_thread_.joinable()) {
      auto done = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return heartbeat_loop_done_; };
      mu_.AwaitWithDeadline(absl::Condition(&done), deadline);
    }
  }
  stop_token_.Cancel();  // a heartbeat still in flight after the deadline
  if (heartbeat_thread_.joinable()) heartbeat_thread_.join();
}

class WorkerImpl::HeartbeatDone {
 public:
  explicit HeartbeatDone(WorkerImpl* worker) : worker_(worker) {}
  ~HeartbeatDone() {
    absl::MutexLock lock(&worker_->mu_);
    worker_->heartbeat_in_flight_ = false;
  }
  HeartbeatDone(const HeartbeatDone&) = delete;
  HeartbeatDone& operator=(const HeartbeatDone&) = delete;

 private:
  WorkerImpl* worker_;
};

absl::Status WorkerImpl::HeartbeatImpl(const CallOptions& options, bool start_async) {
  std::vector<std::shared_ptr<TaskRunner>> runners;
  service::WorkerHeartbeatRequest request;
  {
    // One heartbeat at a time (the loop and explicit calls): progress is taken from the runners
    // once per heartbeat. A flag rather than a lock held across the RPC.
    absl::MutexLock lock(&mu_);
    auto idle = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !heartbeat_in_flight_; };
    mu_.Await(absl::Condition(&idle));
    heartbeat_in_flight_ = true;
    for (const auto& [id, runner] : tasks_) runners.push_back(runner);
    request.set_draining(draining_);
  }
  HeartbeatDone done(this);  // clears heartbeat_in_flight_ on every return
  request.set_worker_address(config_.worker_address);
  request.set_worker_host(config_.worker_host);
  request.set_placement(config_.placement);
  std::vector<std::vector<uint64_t>> reported_starts;
  int64_t buffered = 0;
  int64_t active = 0;
  for (const auto& runner : runners) {
    TaskProgressSnapshot progress = runner->Progress();
    service::TaskProgress* task = request.add_tasks();
    task->set_task_id(runner->task_id());
    task->set_finished(progress.finished);
    task->set_elements_produced(progress.elements_produced);
    reported_starts.push_back(runner->TakeUnreportedStarts());
    for (uint64_t index : reported_starts.back()) task->add_started_split_indices(index);
    buffered += progress.buffered_elements;
    if (!progress.finished) ++active;
  }
  const double cpu = ProcessCpuSeconds();
  metrics_->UpdateBusySeconds(cpu);
  metrics_->SetBufferedElements(buffered);
  metrics_->SetActiveTasks(active);
  service::WorkerStats* stats = request.mutable_stats();
  stats->set_elements_produced(metrics_->elements_produced());
  stats->set_bytes_produced(metrics_->bytes_produced());
  stats->set_busy_cpu_seconds(cpu);
  stats->set_buffered_elements(buffered);

  absl::StatusOr<service::WorkerHeartbeatResponse> response = dispatcher_->WorkerHeartbeat(request, options);
  {
    absl::MutexLock lock(&mu_);
    ++heartbeats_sent_;
  }
  if (!response.ok()) {
    for (size_t i = 0; i < runners.size(); ++i) runners[i]->RestoreUnreportedStarts(reported_starts[i]);
    return response.status();
  }

  std::vector<const service::TaskDef*> to_create;
  {
    absl::MutexLock lock(&mu_);
    if (!registered_) {
      SLUICE_LOG(Info, "registered with the dispatcher").With("worker_address", config_.worker_address);
    }
    registered_ = true;
    if (response->heartbeat_interval_ms() > 0) heartbeat_interval_ = absl::Milliseconds(response->heartbeat_interval_ms());
    for (const auto& task : response->new_tasks()) {
      if (draining_ || stopping_ || input_released_ || tasks_.count(task.task_id()) > 0 ||
          starting_.count(task.task_id()) > 0) {
        continue;
      }
      if (start_async && starter_thread_.joinable()) {
        starting_.insert(task.task_id());
        to_start_.push_back(task);
      } else {
        starting_.insert(task.task_id());
        to_create.push_back(&task);
      }
    }
    for (const auto& received : response->received()) {  // what the clients got: room under the cap
      if (auto it = tasks_.find(received.task_id()); it != tasks_.end()) it->second->SetDelivered(received.elements());
    }
  }
  for (const service::TaskDef* task : to_create) StartTask(*task);
  if (response->draining()) {
    // The dispatcher drains this worker (it is about to be removed): its tasks hand their input
    // back and end once what they read has been served. Idempotent.
    bool first = false;
    std::vector<std::shared_ptr<TaskRunner>> all;
    {
      absl::MutexLock lock(&mu_);
      first = !input_released_;
      input_released_ = true;
      for (const auto& [id, runner] : tasks_) all.push_back(runner);
    }
    if (first) SLUICE_LOG(Info, "drained by the dispatcher: handing splits back").With("tasks", static_cast<int64_t>(all.size()));
    for (auto& runner : all) runner->ReleaseInput();
  }
  std::vector<std::shared_ptr<TaskRunner>> removed;
  {
    absl::MutexLock lock(&mu_);
    for (int64_t id : response->tasks_to_delete()) {
      auto it = tasks_.find(id);
      if (it == tasks_.end()) continue;
      removed.push_back(std::move(it->second));
      tasks_.erase(it);
    }
  }
  for (auto& runner : removed) {
    runner->Stop(absl::NotFoundError(absl::StrCat("task_id ", runner->task_id(), " was deleted by the dispatcher")));
    SLUICE_LOG(Info, "task deleted").With("task_id", runner->task_id());
  }
  removed.clear();  // joins their producer threads unless a reader still holds one
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<TaskRunner>> WorkerImpl::FindTask(int64_t task_id, CancelToken* cancel) {
  CancelCallback wake(cancel, [this] { absl::MutexLock lock(&mu_); });
  absl::MutexLock lock(&mu_);
  auto it = tasks_.find(task_id);
  if (it == tasks_.end() && !stopping_) {
    heartbeat_requested_ = true;
    auto known = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return tasks_.count(task_id) > 0 || stopping_ || IsCancelled(cancel);
    };
    mu_.AwaitWithTimeout(absl::Condition(&known), config_.unknown_task_wait);
    // A task the starter is still building is known: wait for it, however long its pipeline takes.
    auto built = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return tasks_.count(task_id) > 0 || starting_.count(task_id) == 0 || stopping_ || IsCancelled(cancel);
    };
    mu_.Await(absl::Condition(&built));
    it = tasks_.find(task_id);
  }
  if (it != tasks_.end()) return it->second;
  if (IsCancelled(cancel)) return absl::CancelledError("request cancelled");
  if (stopping_) return absl::UnavailableError(absl::StrCat("worker ", config_.worker_address, " is shutting down"));
  return absl::NotFoundError(absl::StrCat("task_id ", task_id, " is not known to worker ", config_.worker_address,
                                          ": the task finished, was deleted, or is not assigned to this worker"));
}

absl::Status WorkerImpl::StreamElements(const service::GetElementsRequest& request, CancelToken* cancel,
                                        const std::function<bool(ElementsResponse&)>& write) {
  if (request.max_elements() < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "max_elements must be >= 0 (0: pack elements up to ~1 MiB per response), got ", request.max_elements()));
  }
  auto requested = CodecFor(request.compression());
  if (!requested.ok()) return requested.status();
  auto runner = FindTask(request.task_id(), cancel);
  if (!runner.ok()) return runner.status();
  if ((*runner)->coordinated()) {
    return absl::FailedPreconditionError(absl::StrCat("task_id ", request.task_id(),
                                                      " is a coordinated-read task (num_consumers ",
                                                      (*runner)->def().num_consumers(), "): use GetElement"));
  }
  std::optional<pipeline::Codec> wanted = *requested;
  if (!wanted.has_value()) {
    auto task_codec = CodecFor((*runner)->def().compression());
    if (task_codec.ok()) wanted = *task_codec;
  }
  const size_t max_elements =
      request.max_elements() > 0 ? static_cast<size_t>(request.max_elements()) : std::numeric_limits<size_t>::max();
  const size_t max_payload = static_cast<size_t>(std::max(1024, config_.max_message_bytes - 1024));
  while (true) {
    if (IsCancelled(cancel)) return absl::CancelledError("the stream was cancelled");
    auto batch = (*runner)->GetNextBatch(max_elements, config_.max_response_bytes, cancel);
    if (!batch.ok()) return batch.status();
    ElementsResponse response;
    response.max_elements = max_elements;
    response.max_bytes = config_.max_response_bytes;
    response.elements.reserve(batch->elements.size());
    for (EncodedElementPtr& element : batch->elements) {
      auto recoded = Recode(std::move(element), wanted);
      if (!recoded.ok()) return recoded.status();
      if ((*recoded)->size() > max_payload) {
        return absl::ResourceExhaustedError(absl::StrCat(
            "an element of task_id ", request.task_id(), " is ", (*recoded)->size(),
            " bytes, more than --max_message_bytes allows (", config_.max_message_bytes,
            "); raise --max_message_bytes on the worker and the clients, or make elements smaller"));
      }
      response.elements.push_back(*std::move(recoded));
    }
    response.end_of_sequence = batch->end_of_sequence;
    if (!write(response)) return absl::CancelledError("the client closed the stream");
    if (batch->end_of_sequence) return absl::OkStatus();
  }
}

absl::StatusOr<service::GetElementsResponse> WorkerImpl::GetElement(const service::GetElementsRequest& request,
                                                                    CancelToken* cancel) {
  if (request.round() < 0) return absl::InvalidArgumentError(absl::StrCat("round must be >= 0, got ", request.round()));
  if (request.consumer_index() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("consumer_index must be >= 0 for coordinated reads, got ", request.consumer_index()));
  }
  auto requested = CodecFor(request.compression());
  if (!requested.ok()) return requested.status();
  auto runner = FindTask(request.task_id(), cancel);
  if (!runner.ok()) return runner.status();
  const service::TaskDef& def = (*runner)->def();
  if (!(*runner)->coordinated()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "task_id ", request.task_id(), " is not a coordinated-read task (num_consumers 0): use GetElements"));
  }
  if (request.consumer_index() >= def.num_consumers()) {
    return absl::InvalidArgumentError(absl::StrCat("consumer_index ", request.consumer_index(),
                                                   " is out of range: task_id ", request.task_id(),
                                                   " has num_consumers ", def.num_consumers()));
  }
  std::optional<pipeline::Codec> wanted = *requested;
  if (!wanted.has_value()) {
    auto task_codec = CodecFor(def.compression());
    if (task_codec.ok()) wanted = *task_codec;
  }
  auto result = (*runner)->GetRoundElement(request.round(), request.consumer_index(), request.allow_skip_round(), cancel);
  if (!result.ok()) return result.status();
  service::GetElementsResponse response;
  if (result->round_skipped) {
    response.set_round_skipped(true);
  } else if (result->end_of_sequence) {
    response.set_end_of_sequence(true);
  } else {
    service::ElementData* data = response.add_elements();
    if (auto s = FillElementData(std::move(result->element), wanted, data); !s.ok()) return s;
    data->set_round(request.round());
  }
  return response;
}

void WorkerImpl::HandBackInput() {
  std::vector<std::shared_ptr<TaskRunner>> runners;
  {
    absl::MutexLock lock(&mu_);
    input_released_ = true;
    for (const auto& [id, runner] : tasks_) runners.push_back(runner);
  }
  for (auto& runner : runners) runner->ReleaseInput();
}

bool WorkerImpl::WaitForHandBack(absl::Time deadline, const std::function<bool()>& nobody_reads) {
  std::vector<std::shared_ptr<TaskRunner>> runners;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [id, runner] : tasks_) runners.push_back(runner);
  }
  absl::Time unread_since = absl::InfiniteFuture();
  while (true) {
    const bool done = std::all_of(runners.begin(), runners.end(), [](const auto& r) { return r->HandBackDone(); });
    if (done) return true;
    if (nobody_reads && nobody_reads()) {
      unread_since = std::min(unread_since, absl::Now());
      if (absl::Now() - unread_since >= absl::Milliseconds(200)) return false;
    } else {
      unread_since = absl::InfiniteFuture();
    }
    if (absl::Now() >= deadline || stop_token_.WaitFor(std::min(absl::Milliseconds(10), deadline - absl::Now()))) {
      return false;
    }
  }
}

void WorkerImpl::BeginDrain() {
  std::vector<std::shared_ptr<TaskRunner>> runners;
  {
    absl::MutexLock lock(&mu_);
    if (draining_) return;
    draining_ = true;
    heartbeat_requested_ = true;
    for (const auto& [id, runner] : tasks_) runners.push_back(runner);
  }
  SLUICE_LOG(Info, "draining: no new tasks; serving what is buffered").With("tasks", static_cast<int64_t>(runners.size()));
  for (auto& runner : runners) runner->BeginDrain();
}

bool WorkerImpl::WaitForInFlightRounds(absl::Time deadline) {
  std::vector<std::shared_ptr<TaskRunner>> runners;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [id, runner] : tasks_) runners.push_back(runner);
  }
  bool all = true;
  for (auto& runner : runners) all = runner->WaitForRoundToComplete(deadline) && all;
  return all;
}

absl::Status WorkerImpl::Deregister(absl::Time deadline) {
  service::WorkerDeregisterRequest request;
  request.set_worker_address(config_.worker_address);
  CallOptions options;
  options.deadline = deadline;
  absl::Status status = dispatcher_->WorkerDeregister(request, options);
  if (status.ok()) {
    SLUICE_LOG(Info, "deregistered from the dispatcher").With("worker_address", config_.worker_address);
  } else {
    SLUICE_LOG(Warning, "deregistration failed; the dispatcher will time the worker out").With("error", status.ToString());
  }
  return status;
}

void WorkerImpl::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  stop_token_.Cancel();
  if (heartbeat_thread_.joinable()) heartbeat_thread_.join();
  if (starter_thread_.joinable()) starter_thread_.join();  // after the pipeline it may be building
  std::map<int64_t, std::shared_ptr<TaskRunner>> tasks;
  {
    absl::MutexLock lock(&mu_);
    tasks.swap(tasks_);
  }
  for (auto& [id, runner] : tasks) {
    runner->Stop(absl::UnavailableError(absl::StrCat("worker ", config_.worker_address, " stopped")));
  }
  tasks.clear();
}

bool WorkerImpl::registered() const {
  absl::MutexLock lock(&mu_);
  return registered_;
}

bool WorkerImpl::draining() const {
  absl::MutexLock lock(&mu_);
  return draining_;
}

size_t WorkerImpl::num_tasks() const {
  absl::MutexLock lock(&mu_);
  return tasks_.size();
}

int64_t WorkerImpl::heartbeats_sent() const {
  absl::MutexLock lock(&mu_);
  return heartbeats_sent_;
}

}  // namespace sluice::worker
