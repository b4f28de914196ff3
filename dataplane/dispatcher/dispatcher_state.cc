#include "dataplane/dispatcher/dispatcher_state.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace sluice::dispatcher {

using service::Update;

int64_t NormalizedNumEpochs(int64_t num_epochs) { return num_epochs == 0 ? 1 : num_epochs; }

namespace {

bool IsStaticSharding(service::ShardingPolicy policy) {
  return policy == service::SHARDING_FILE || policy == service::SHARDING_DATA;
}

absl::Status UnknownJob(absl::string_view field, int64_t id) {
  return absl::NotFoundError(absl::StrCat(field, " ", id, " is not known"));
}
absl::Status UnknownTask(absl::string_view field, int64_t id) {
  return absl::NotFoundError(absl::StrCat(field, " ", id, " is not known"));
}
absl::Status UnknownWorker(absl::string_view field, const std::string& address) {
  return absl::NotFoundError(absl::StrCat(field, " '", address, "' is not known"));
}

// Validates the enums and numbers of a job spec (proto3 enums may carry any integer).
absl::Status CheckJobSpec(const service::JobSpec& spec, absl::string_view field) {
  if (!service::ShardingPolicy_IsValid(spec.sharding())) {
    return absl::InvalidArgumentError(absl::StrCat(field, ".sharding ", spec.sharding(), " is not a ShardingPolicy"));
  }
  if (!service::TargetWorkers_IsValid(spec.target_workers())) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ".target_workers ", spec.target_workers(), " is not a TargetWorkers value"));
  }
  if (!service::Compression_IsValid(spec.compression())) {
    return absl::InvalidArgumentError(absl::StrCat(field, ".compression ", spec.compression(), " is not a Compression"));
  }
  if (spec.num_consumers() < 0) {
    return absl::InvalidArgumentError(absl::StrCat(field, ".num_consumers is ", spec.num_consumers(), "; must be >= 0"));
  }
  if (spec.num_epochs() < -1) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ".num_epochs is ", spec.num_epochs(), "; must be -1 (forever) or >= 0"));
  }
  return absl::OkStatus();
}

// Appends [begin, end) ranges covering `indices` (in the given order, consecutive runs merged).
template <typename Container>
void AppendRanges(const Container& indices, google::protobuf::RepeatedPtrField<service::SplitRange>* out) {
  service::SplitRange* current = nullptr;
  for (uint64_t index : indices) {
    if (current != nullptr && current->end() == index) {
      current->set_end(index + 1);
      continue;
    }
    current = out->Add();
    current->set_begin(index);
    current->set_end(index + 1);
  }
}

}  // namespace

// ---------------------------------------------------------------- queries

const DispatcherState::Dataset* DispatcherState::FindDataset(const std::string& id) const {
  auto it = datasets_.find(id);
  return it == datasets_.end() ? nullptr : &it->second;
}
const DispatcherState::Job* DispatcherState::FindJob(int64_t id) const {
  auto it = jobs_.find(id);
  return it == jobs_.end() ? nullptr : &it->second;
}
const DispatcherState::Job* DispatcherState::FindJobByName(const std::string& name) const {
  auto it = job_by_name_.find(name);
  return it == job_by_name_.end() ? nullptr : FindJob(it->second);
}
const DispatcherState::JobClient* DispatcherState::FindJobClient(int64_t id) const {
  auto it = job_clients_.find(id);
  return it == job_clients_.end() ? nullptr : &it->second;
}
const DispatcherState::Worker* DispatcherState::FindWorker(const std::string& address) const {
  auto it = workers_.find(address);
  return it == workers_.end() ? nullptr : &it->second;
}
const DispatcherState::Task* DispatcherState::FindTask(int64_t id) const {
  auto it = tasks_.find(id);
  return it == tasks_.end() ? nullptr : &it->second;
}
DispatcherState::Job* DispatcherState::MutableJob(int64_t id) {
  auto it = jobs_.find(id);
  return it == jobs_.end() ? nullptr : &it->second;
}
const DispatcherState::Dataset& DispatcherState::DatasetOf(const Job& job) const {
  return datasets_.at(job.spec.dataset_id());
}

std::vector<uint64_t> DispatcherState::UnstartedSplitsOf(const Job& job, int64_t task_id) const {
  std::vector<uint64_t> out;
  if (!job.splits) return out;
  for (const auto& [index, task] : job.splits->assigned) {
    if (task == task_id) out.push_back(index);
  }
  return out;
}

bool DispatcherState::OtherTaskHoldsLease(const Job& job, int64_t task_id) {
  if (!job.splits) return false;
  for (const auto& [index, r] : job.splits->reading) {
    if (r.task != task_id && r.lease_end >= 0) return true;
  }
  return false;
}

int64_t DispatcherState::SkipOf(const Job& job, uint64_t index) {
  if (!job.splits) return 0;
  auto it = job.splits->skip.find(index);
  return it == job.splits->skip.end() ? 0 : it->second;
}

// ---------------------------------------------------------------- Check

absl::Status DispatcherState::Check(const Update& update) const {
  switch (update.kind_case()) {
    case Update::kRegisterDataset: return CheckRegisterDataset(update.register_dataset());
    case Update::kCreateJob: return CheckCreateJob(update.create_job());
    case Update::kAcquireJobClient: return CheckAcquireJobClient(update.acquire_job_client());
    case Update::kReleaseJobClient: return CheckReleaseJobClient(update.release_job_client());
    case Update::kRegisterWorker: return CheckRegisterWorker(update.register_worker());
    case Update::kRemoveWorker: return CheckRemoveWorker(update.remove_worker());
    case Update::kCreateTask: return CheckCreateTask(update.create_task());
    case Update::kFinishTask: return CheckFinishTask(update.finish_task());
    case Update::kAssignSplits: return CheckAssignSplits(update.assign_splits());
    case Update::kStartSplits: return CheckStartSplits(update.start_splits());
    case Update::kFinishJob: return CheckFinishJob(update.finish_job());
    case Update::kDrainWorker: return CheckDrainWorker(update.drain_worker());
    case Update::kTaskEpochEnd: return CheckTaskEpochEnd(update.task_epoch_end());
    case Update::kRoundWatermark: return CheckRoundWatermark(update.round_watermark());
    case Update::kRestoreJob: return CheckRestoreJob(update.restore_job());
    case Update::kIdCounters: return CheckIdCounters(update.id_counters());
    case Update::kSplitProgress: return CheckSplitProgress(update.split_progress());
    case Update::kRemoveJob: return CheckRemoveJob(update.remove_job());
    case Update::kRemoveDataset: return CheckRemoveDataset(update.remove_dataset());
    case Update::kReturnSplits: return CheckReturnSplits(update.return_splits());
    case Update::KIND_NOT_SET: break;
  }
  return absl::InvalidArgumentError(
      "update has no known kind (empty, or written by a newer dispatcher version this one cannot apply)");
}

absl::Status DispatcherState::CheckRegisterDataset(const service::RegisterDatasetUpdate& u) const {
  if (u.dataset_id().empty()) return absl::InvalidArgumentError("register_dataset.dataset_id is empty");
  if (datasets_.count(u.dataset_id())) {
    return absl::AlreadyExistsError(absl::StrCat("register_dataset.dataset_id '", u.dataset_id(), "' is already registered"));
  }
  for (int i = 0; i < u.splits_size(); ++i) {
    if (u.splits(i).index() != static_cast<uint64_t>(i)) {
      return absl::InvalidArgumentError(
          absl::StrCat("register_dataset.splits[", i, "].index is ", u.splits(i).index(), "; expected ", i));
    }
  }
  return absl::OkStatus();
}

absl::Status DispatcherState::CheckCreateJob(const service::CreateJobUpdate& u) const {
  if (u.job_id() <= 0) return absl::InvalidArgumentError(absl::StrCat("create_job.job_id ", u.job_id(), " must be > 0"));
  if (jobs_.count(u.job_id())) return absl::AlreadyExistsError(absl::StrCat("create_job.job_id ", u.job_id(), " exists"));
  if (u.job_id() < next_job_id_) {
    return absl::FailedPreconditionError(
        absl::StrCat("create_job.job_id ", u.job_id(), " was used before (next free id is ", next_job_id_, ")"));
  }
  if (!datasets_.count(u.spec().dataset_id())) {
    return absl::NotFoundError(absl::StrCat("create_job.spec.dataset_id '", u.spec().dataset_id(), "' is not known"));
  }
  if (auto s = CheckJobSpec(u.spec(), "create_job.spec"); !s.ok()) return s;
  const bool is_static = IsStaticSharding(u.spec().sharding());
  if (is_static && u.static_workers_size() == 0) {
    return absl::InvalidArgumentError("create_job.static_workers is empty; static sharding needs the worker list");
  }
  if (!is_static && u.static_workers_size() != 0) {
    return absl::InvalidArgumentError("create_job.static_workers is only for SHARDING_FILE and SHARDING_DATA");
  }
  std::set<std::string> seen;
  for (int i = 0; i < u.static_workers_size(); ++i) {
    if (u.static_workers(i).empty() || !seen.insert(u.static_workers(i)).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("create_job.static_workers[", i, "] '", u.static_workers(i), "' is empty or repeated"));
    }
  }
  return absl::OkStatus();
}

absl::Status DispatcherState::CheckAcquireJobClient(const service::AcquireJobClientUpdate& u) const {
  if (u.job_client_id() <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("acquire_job_client.job_client_id ", u.job_client_id(), " must be > 0"));
  }
  if (job_clients_.count(u.job_client_id())) {
    return absl::AlreadyExistsError(absl::StrCat("acquire_job_client.job_client_id ", u.job_client_id(), " exists"));
  }
  if (u.job_client_id() < next_job_client_id_) {
    return absl::FailedPreconditionError(absl::StrCat("acquire_job_client.job_client_id ", u.job_client_id(),
                                                      " was used before (next free id is ", next_job_client_id_, ")"));
  }
  const Job* job = FindJob(u.job_id());
  if (job == nullptr) return UnknownJob("acquire_job_client.job_id", u.job_id());
  if (job->finished) {
    return absl::FailedPreconditionError(absl::StrCat("acquire_job_client.job_id ", u.job_id(), " is finished"));
  }
  const int32_t consumers = job->spec.num_consumers();
  if (u.consumer_index() < 0 || (consumers > 0 && u.consumer_index() >= consumers)) {
    return absl::InvalidArgumentError(absl::StrCat("acquire_job_client.consumer_index ", u.consumer_index(),
                                                   " is outside [0, ", std::max(consumers, 1), ")"));
  }
  if (consumers > 0) {
    for (int64_t other : job->clients) {
      if (job_clients_.at(other).consumer_index == u.consumer_index()) {
        return absl::AlreadyExistsError(absl::StrCat("acquire_job_client.consumer_index ", u.consumer_index(),
                                                     " of job ", u.job_id(), " is held by job client ", other));
      }
    }
  }
  if (!service::TargetWorkers_IsValid(u.target_workers())) {
    return absl::InvalidArgumentError(
        absl::StrCat("acquire_job_client.target_workers ", u.target_workers(), " is not a TargetWorkers value"));
  }
  return absl::OkStatus();
}

absl::Status DispatcherState::CheckReleaseJobClient(const service::ReleaseJobClientUpdate& u) const {
  if (!job_clients_.count(u.job_client_id())) {
    return absl::NotFoundError(absl::StrCat("release_job_client.job_client_id ", u.job_client_id(), " is not known"));
  }
  if (u.time_ms() < 0) {
    return absl::InvalidArgumentError(absl::StrCat("release_job_client.time_ms ", u.time_ms(), " is negative"));
  }
  return absl::OkStatus();
}

absl::Status DispatcherState::CheckRegisterWorker(const service::RegisterWorkerUpdate& u) const {
  if (u.worker_address().empty()) return absl::InvalidArgumentError("register_worker.worker_address is empty");
  if (workers_.count(u.worker_address())) {
    return absl::AlreadyExistsError(
        absl::StrCat("register_worker.worker_address '", u.worker_address(), "' is already registered"));
  }
  if (!service::Placement_IsValid(u.placement())) {
    return absl::InvalidArgumentError(absl::StrCat("register_worker.placement ", u.placement(), " is not a Placement"));
  }
  return absl::OkStatus();
}

absl::Status DispatcherState::CheckRemoveWorker(const service::RemoveWorkerUpdate& u) const {
  if (!workers_.count(u.worker_address())) return UnknownWorker("remove_worker.worker_address", u.worker_address());
  return absl::OkStatus();
}

absl::Status DispatcherState::CheckCreateTask(const service::CreateTaskUpdate& u) const {
  if (u.task_id() <= 0) return absl::InvalidArgumentError(absl::StrCat("create_task.task_id ", u.task_id(), " must be > 0"));
  if (tasks_.count(u.task_id())) return absl::AlreadyExistsError(absl::StrCat("create_task.task_id ", u.task_id(), " exists"));
  if (u.task_id() < next_task_id_) {
    return absl::FailedPreconditionError(
        absl::StrCat("create_task.task_id ", u.task_id(), " was used before (next free id is ", next_task_id_, ")"));
  }
  const Job* job = FindJob(u.job_id());
  if (job == nullptr) return UnknownJob("create_task.job_id", u.job_id());
  if (job->finished) return absl::FailedPreconditionError(absl::StrCat("create_task.job_id ", u.job_id(), " is finished"));
  const Worker* worker = FindWorker(u.worker_address());
  if (worker == nullptr) return UnknownWorker("create_task.worker_address", u.worker_address());
  if (worker->draining) {
    return absl::FailedPreconditionError(
        absl::StrCat("create_task.worker_address '", u.worker_address(), "' is draining and takes no new tasks"));
  }
  for (int64_t t : worker->tasks) {
    if (tasks_.at(t).job_id == u.job_id()) {
      return absl::AlreadyExistsError(absl::StrCat("create_task: worker '", u.worker_address(), "' already has task ", t,
                                                   " of job ", u.job_id()));
    }
  }
  if (u.starting_round() < 0) {
    return absl::InvalidArgumentError(absl::StrCat("create_task.starting_round ", u.starting_round(), " is negative"));
  }
  if (IsStaticSharding(job->spec.sharding())) {
    const int n = static_cast<int>(job->static_workers.size());
    if (u.num_workers() != n || u.worker_index() < 0 || u.worker_index() >= n) {
      return absl::InvalidArgumentError(absl::StrCat("create_task.worker_index/num_workers ", u.worker_index(), "/",
                                                     u.num_workers(), " do not fit job ", u.job_id(), "'s ", n,
                                                     " static workers"));
    }
    if (job->static_workers[u.worker_index()] != u.worker_address()) {
      return absl::InvalidArgumentError(absl::StrCat("create_task.worker_index ", u.worker_index(), " of job ", u.job_id(),
                                                     " belongs to worker '", job->static_workers[u.worker_index()],
                                                     "', not '", u.worker_address(), "'"));
    }
  } else if (u.worker_index() != 0 || u.num_workers() != 0) {
    return absl::InvalidArgumentError("create_task.worker_index/num_workers are only for static sharding");
  }
  return absl::OkStatus();
}

absl::Status DispatcherState::CheckFinishTask(const service::FinishTaskUpdate& u) const {
  const Task* task = FindTask(u.task_id());
  if (task == nullptr) return UnknownTask("finish_task.task_id", u.task_id());
  if (task->finished) {
    return absl::FailedPreconditionError(absl::StrCat("finish_task.task_id ", u.task_id(), " is already finished"));
  }
  return absl::OkStatus();
}

absl::Status DispatcherState::CheckAssignSplits(const service::AssignSplitsUpdate& u) const {
  const Job* job = FindJob(u.job_id());
  if (job == nullptr) return UnknownJob("assign_splits.job_id", u.job_id());
  if (job->finished || !job->splits) {
    return absl::FailedPreconditionError(
        absl::StrCat("assign_splits.job_id ", u.job_id(), " is finished or does not use dynamic sharding"));
  }
  const Task* task = FindTask(u.task_id());
  if (task == nullptr) return UnknownTask("assign_splits.task_id", u.task_id());
  if (task->job_id != u.job_id() || task->finished) {
    return absl::FailedPreconditionError(
        absl::StrCat("assign_splits.task_id ", u.task_id(), " is finished or not a task of job ", u.job_id()));
  }
  const SplitState& s = *job->splits;
  if (s.exhausted || u.epoch() != s.epoch) {
    return absl::FailedPreconditionError(absl::StrCat("assign_splits.epoch ", u.epoch(), " is not job ", u.job_id(),
                                                      "'s current epoch ", s.epoch, s.exhausted ? " (exhausted)" : ""));
  }
  if (u.split_indices_size() == 0) return absl::InvalidArgumentError("assign_splits.split_indices is empty");
  if (static_cast<size_t>(u.split_indices_size()) > s.queue.size()) {
    return absl::FailedPreconditionError(absl::StrCat("assign_splits: ", u.split_indices_size(), " splits requested, ",
                                                      s.queue.size(), " queued"));
  }
  for (int i = 0; i < u.split_indices_size(); ++i) {
    if (u.split_indices(i) != s.queue[i]) {
      return absl::FailedPreconditionError(absl::StrCat("assign_splits.split_indices[", i, "] is ", u.split_indices(i),
                                                        "; the queue holds ", s.queue[i], " there"));
    }
  }
  return absl::OkStatus();
}

absl::Status DispatcherState::CheckStartSplits(const service::StartSplitsUpdate& u) const {
  const Job* job = FindJob(u.job_id());
  if (job == nullptr) return UnknownJob("start_splits.job_id", u.job_id());
  if (job->finished || !job->splits) {
    return absl::FailedPreconditionError(
        absl::StrCat("start_splits.job_id ", u.job_id(), " is finished or does not use dynamic sharding"));
  }
  const Task* task = FindTask(u.task_id());
  if (task == nullptr) return UnknownTask("start_splits.task_id", u.task_id());
  if (task->job_id != u.job_id()) {
    return absl::FailedPreconditionError(absl::StrCat("start_splits.task_id ", u.task_id(), " is not a task of job ", u.job_id()));
  }
  const SplitState& s = *job->splits;
  if (u.epoch() != s.epoch) {
    return absl::FailedPreconditionError(
        absl::StrCat("start_splits.epoch ", u.epoch(), " is not job ", u.job_id(), "'s current epoch ", s.epoch));
  }
  if (u.split_indices_size() == 0) return absl::InvalidArgumentError("start_splits.split_indices is empty");
  std::set<uint64_t> seen;
  for (int i = 0; i < u.split_indices_size(); ++i) {
    auto it = s.assigned.find(u.split_indices(i));
    if (it == s.assigned.end() || it->second != u.task_id() || !seen.insert(u.split_indices(i)).second) {
      return absl::FailedPreconditionError(absl::StrCat("start_splits.split_indices[", i, "] ", u.split_indices(i),
                                                        " is not assigned to task ", u.task_id(), " (or repeated)"));
    }
  }
  return absl::OkStatus();
}

absl::Status DispatcherState::CheckFinishJob(const service::FinishJobUpdate& u) const {
  const Job* job = FindJob(u.job_id());
  if (job == nullptr) return UnknownJob("finish_job.job_id", u.job_id());
  if (job->finished) return absl::FailedPreconditionError(absl::StrCat("finish_job.job_id ", u.job_id(), " is already finished"));
  return absl::OkStatus();
}

absl::Status DispatcherState::CheckDrainWorker(const service::DrainWorkerUpdate& u) const {
  const Worker* worker = FindWorker(u.worker_address());
  if (worker == nullptr) return UnknownWorker("drain_worker.worker_address", u.worker_address());
  if (worker->draining) {
    return absl::FailedPreconditionError(
        absl::StrCat("drain_worker.worker_address '", u.worker_address(), "' is already draining"));
  }
  return absl::OkStatus();
}

absl::Status DispatcherState::CheckTaskEpochEnd(const service::TaskEpochEndUpdate& u) const {
  const Job* job = FindJob(u.job_id());
  if (job == nullptr) return UnknownJob("task_epoch_end.job_id", u.job_id());
  if (job->finished || !job->splits) {
    return absl::FailedPreconditionError(
        absl::StrCat("task_epoch_end.job_id ", u.job_id(), " is finished or does not use dynamic sharding"));
  }
  const Task* task = FindTask(u.task_id());
  if (task == nullptr) return UnknownTask("task_epoch_end.task_id", u.task_id());
  if (task->job_id != u.job_id() || task->finished) {
    return absl::FailedPreconditionError(
        absl::StrCat("task_epoch_end.task_id ", u.task_id(), " is finished or not a task of job ", u.job_id()));
  }
  const SplitState& s = *job->splits;
  if (s.exhausted || u.epoch() != s.epoch) {
    return absl::FailedPreconditionError(absl::StrCat("task_epoch_end.epoch ", u.epoch(), " is not job ", u.job_id(),
                                                      "'s current epoch ", s.epoch, s.exhausted ? " (exhausted)" : ""));
  }
  if (!s.queue.empty() || !s.assigned.empty()) {
    return absl::FailedPreconditionError(absl::StrCat("task_epoch_end: epoch ", s.epoch, " of job ", u.job_id(), " has ",
                                                      s.queue.size() + s.assigned.size(), " splits not started"));
  }
  if (OtherTaskHoldsLease(*job, u.task_id())) {
    return absl::FailedPreconditionError(absl::StrCat("task_epoch_end: another task of job ", u.job_id(),
                                                      " still reads a split of epoch ", s.epoch, " under a lease"));
  }
  if (s.tasks_at_epoch_end.count(u.task_id())) {
    return absl::AlreadyExistsError(
        absl::StrCat("task_epoch_end: task ", u.task_id(), " already reached the end of epoch ", s.epoch));
  }
  return absl::OkStatus();
}

absl::Status DispatcherState::CheckRoundWatermark(const service::RoundWatermarkUpdate& u) const {
  const Job* job = FindJob(u.job_id());
  if (job == nullptr) return UnknownJob("round_watermark.job_id", u.job_id());
  if (u.round() <= job->round_watermark) {
    return absl::FailedPreconditionError(absl::StrCat("round_watermark.round ", u.round(), " is not above job ", u.job_id(),
                                                      "'s watermark ", job->round_watermark));
  }
  return absl::OkStatus();
}

absl::Status DispatcherState::CheckRestoreJob(const service::RestoreJobUpdate& u) const {
  const Job* job = FindJob(u.job_id());
  if (job == nullptr) return UnknownJob("restore_job.job_id", u.job_id());
  if (u.last_client_release_ms() < 0 || u.round_watermark() < 0 || u.splits_served() < 0 || u.epoch() < 0) {
    return absl::InvalidArgumentError("restore_job: last_client_release_ms, round_watermark, splits_served and epoch must be >= 0");
  }
  if (!job->splits) {
    if (u.queued_size() || u.assigned_size() || u.started_size() || u.tasks_at_epoch_end_size() || u.epoch() ||
        u.splits_exhausted() || u.reading_size() || u.finished_size() || u.skips_size()) {
      return absl::InvalidArgumentError(absl::StrCat("restore_job: job ", u.job_id(), " has no split positions to restore"));
    }
    return absl::OkStatus();
  }
  const uint64_t n = DatasetOf(*job).splits.size();
  const int64_t epochs = NormalizedNumEpochs(job->spec.num_epochs());
  if (epochs != -1 && u.epoch() >= epochs) {
    return absl::InvalidArgumentError(absl::StrCat("restore_job.epoch ", u.epoch(), " is beyond the job's ", epochs, " epochs"));
  }
  std::vector<bool> seen(n, false);
  uint64_t covered = 0;
  auto mark = [&](uint64_t index, absl::string_view field) -> absl::Status {
    if (index >= n || seen[index]) {
      return absl::InvalidArgumentError(absl::StrCat("restore_job.", field, ": split ", index,
                                                     " is out of range (", n, " splits) or listed twice"));
    }
    seen[index] = true;
    ++covered;
    return absl::OkStatus();
  };
  for (const auto* ranges : {&u.queued(), &u.started()}) {
    const char* field = ranges == &u.queued() ? "queued" : "started";
    for (const auto& r : *ranges) {
      if (r.begin() > r.end() || r.end() > n) {
        return absl::InvalidArgumentError(
            absl::StrCat("restore_job.", field, ": range [", r.begin(), ", ", r.end(), ") is outside [0, ", n, ")"));
      }
      for (uint64_t i = r.begin(); i < r.end(); ++i) {
        if (auto s = mark(i, field); !s.ok()) return s;
      }
    }
  }
  for (const auto& a : u.assigned()) {
    const Task* task = FindTask(a.task_id());
    if (task == nullptr || task->job_id != u.job_id() || task->finished) {
      return absl::InvalidArgumentError(
          absl::StrCat("restore_job.assigned: task ", a.task_id(), " is not a live task of job ", u.job_id()));
    }
    for (uint64_t i : a.split_indices()) {
      if (auto s = mark(i, "assigned"); !s.ok()) return s;
    }
  }
  if (covered != n) {
    return absl::InvalidArgumentError(
        absl::StrCat("restore_job: queued, assigned and started cover ", covered, " of ", n, " splits"));
  }
  for (int64_t t : u.tasks_at_epoch_end()) {
    const Task* task = FindTask(t);
    if (task == nullptr || task->job_id != u.job_id() || task->finished) {
      return absl::InvalidArgumentError(
          absl::StrCat("restore_job.tasks_at_epoch_end: task ", t, " is not a live task of job ", u.job_id()));
    }
  }
  // Reading and finished splits are started ones, each in one of the two lists at most; skips
  // belong to splits not started.
  std::vector<bool> started(n, false);
  for (const auto& r : u.started()) {
    for (uint64_t i = r.begin(); i < r.end(); ++i) started[i] = true;
  }
  std::vector<bool> placed(n, false);
  for (const auto& r : u.reading()) {
    if (r.index() >= n || !started[r.index()] || placed[r.index()] || r.lease_end() < -1) {
      return absl::InvalidArgumentError(absl::StrCat("restore_job.reading: split ", r.index(),
                                                     " is not started, listed twice or has lease_end below -1"));
    }
    placed[r.index()] = true;
    const Task* task = FindTask(r.task_id());
    if (task == nullptr || task->job_id != u.job_id()) {
      return absl::InvalidArgumentError(
          absl::StrCat("restore_job.reading: task ", r.task_id(), " is not a task of job ", u.job_id()));
    }
  }
  for (const auto& r : u.finished()) {
    if (r.begin() > r.end() || r.end() > n) {
      return absl::InvalidArgumentError(
          absl::StrCat("restore_job.finished: range [", r.begin(), ", ", r.end(), ") is outside [0, ", n, ")"));
    }
    for (uint64_t i = r.begin(); i < r.end(); ++i) {
      if (!started[i] || placed[i]) {
        return absl::InvalidArgumentError(
            absl::StrCat("restore_job.finished: split ", i, " is not started or is also reading"));
      }
      placed[i] = true;
    }
  }
  for (const auto& k : u.skips()) {
    if (k.index() >= n || started[k.index()] || k.skip() < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("restore_job.skips: split ", k.index(), " is out of range, started, or has a negative skip"));
    }
  }
  return absl::OkStatus();
}

absl::Status DispatcherState::CheckSplitProgress(const service::SplitProgressUpdate& u) const {
  const Job* job = FindJob(u.job_id());
  if (job == nullptr) return UnknownJob("split_progress.job_id", u.job_id());
  if (job->finished || !job->splits) {
    return absl::FailedPreconditionError(
        absl::StrCat("split_progress.job_id ", u.job_id(), " is finished or does not use dynamic sharding"));
  }
  const Task* task = FindTask(u.task_id());
  if (task == nullptr) return UnknownTask("split_progress.task_id", u.task_id());
  if (task->job_id != u.job_id()) {
    return absl::FailedPreconditionError(
        absl::StrCat("split_progress.task_id ", u.task_id(), " is not a task of job ", u.job_id()));
  }
  const SplitState& s = *job->splits;
  if (u.epoch() != s.epoch) {
    return absl::FailedPreconditionError(
        absl::StrCat("split_progress.epoch ", u.epoch(), " is not job ", u.job_id(), "'s current epoch ", s.epoch));
  }
  if (u.progress_size() == 0) return absl::InvalidArgumentError("split_progress.progress is empty");
  std::set<uint64_t> seen;
  for (int i = 0; i < u.progress_size(); ++i) {
    const service::SplitProgress& p = u.progress(i);
    auto it = s.reading.find(p.index());
    if (it == s.reading.end() || it->second.task != u.task_id() || !seen.insert(p.index()).second) {
      return absl::FailedPreconditionError(absl::StrCat("split_progress.progress[", i, "].index ", p.index(),
                                                        " is not a split task ", u.task_id(),
                                                        " is reading (or it is repeated)"));
    }
    if (p.released()) {
      if (p.finished() || p.lease_end() < 0) {
        return absl::InvalidArgumentError(absl::StrCat("split_progress.progress[", i, "] releases split ", p.index(),
                                                       " with lease_end ", p.lease_end(), p.finished() ? " and finished" : "",
                                                       "; a release names the reader's position (>= 0) and is not a finish"));
      }
      continue;  // a release may stop below the lease: it names where the reader is
    }
    if (p.lease_end() < -1 || (p.lease_end() >= 0 && p.lease_end() < it->second.lease_end)) {
      return absl::FailedPreconditionError(absl::StrCat("split_progress.progress[", i, "].lease_end ", p.lease_end(),
                                                        " is below the split's lease ", it->second.lease_end,
                                                        " (leases only grow; -1 leaves it unchanged)"));
    }
  }
  return absl::OkStatus();
}

absl::Status DispatcherState::CheckReturnSplits(const service::ReturnSplitsUpdate& u) const {
  const Job* job = FindJob(u.job_id());
  if (job == nullptr) return UnknownJob("return_splits.job_id", u.job_id());
  if (job->finished || !job->splits) {
    return absl::FailedPreconditionError(
        absl::StrCat("return_splits.job_id ", u.job_id(), " is finished or does not use dynamic sharding"));
  }
  const Task* task = FindTask(u.task_id());
  if (task == nullptr) return UnknownTask("return_splits.task_id", u.task_id());
  if (task->job_id != u.job_id()) {
    return absl::FailedPreconditionError(
        absl::StrCat("return_splits.task_id ", u.task_id(), " is not a task of job ", u.job_id()));
  }
  const SplitState& s = *job->splits;
  if (u.epoch() != s.epoch) {
    return absl::FailedPreconditionError(
        absl::StrCat("return_splits.epoch ", u.epoch(), " is not job ", u.job_id(), "'s current epoch ", s.epoch));
  }
  if (u.split_indices_size() == 0) return absl::InvalidArgumentError("return_splits.split_indices is empty");
  std::set<uint64_t> seen;
  for (int i = 0; i < u.split_indices_size(); ++i) {
    auto it = s.assigned.find(u.split_indices(i));
    if (it == s.assigned.end() || it->second != u.task_id() || !seen.insert(u.split_indices(i)).second) {
      return absl::FailedPreconditionError(absl::StrCat("return_splits.split_indices[", i, "] ", u.split_indices(i),
                                                        " is not a split assigned to task ", u.task_id(),
                                                        " and unstarted (or it is repeated)"));
    }
  }
  return absl::OkStatus();
}

bool DispatcherState::Removable(const Job& job) const {
  if (!job.finished || !job.clients.empty()) return false;
  if (job.spec.job_name().empty()) return true;
  const Job* latest = FindJobByName(job.spec.job_name());
  return latest != nullptr && latest->id != job.id;
}

bool DispatcherState::DatasetInUse(const std::string& dataset_id) const {
  for (const auto& [id, job] : jobs_) {
    if (job.spec.dataset_id() == dataset_id) return true;
  }
  return false;
}

absl::Status DispatcherState::CheckRemoveDataset(const service::RemoveDatasetUpdate& u) const {
  if (FindDataset(u.dataset_id()) == nullptr) {
    return absl::NotFoundError(absl::StrCat("remove_dataset.dataset_id '", u.dataset_id(), "' is not known"));
  }
  if (DatasetInUse(u.dataset_id())) {
    return absl::FailedPreconditionError(
        absl::StrCat("remove_dataset.dataset_id '", u.dataset_id(), "' is used by a job"));
  }
  return absl::OkStatus();
}

absl::Status DispatcherState::CheckRemoveJob(const service::RemoveJobUpdate& u) const {
  const Job* job = FindJob(u.job_id());
  if (job == nullptr) return UnknownJob("remove_job.job_id", u.job_id());
  if (!Removable(*job)) {
    return absl::FailedPreconditionError(absl::StrCat("remove_job.job_id ", u.job_id(),
                                                      " is not finished, has clients, or is its name's latest job"));
  }
  return absl::OkStatus();
}

absl::Status DispatcherState::CheckIdCounters(const service::IdCountersUpdate& u) const {
  if (u.next_job_id() < next_job_id_ || u.next_task_id() < next_task_id_ || u.next_job_client_id() < next_job_client_id_) {
    return absl::FailedPreconditionError(absl::StrCat("id_counters (", u.next_job_id(), ", ", u.next_task_id(), ", ",
                                                      u.next_job_client_id(), ") would reuse ids (current ", next_job_id_,
                                                      ", ", next_task_id_, ", ", next_job_client_id_, ")"));
  }
  return absl::OkStatus();
}

// ---------------------------------------------------------------- Apply

absl::Status DispatcherState::Apply(const Update& update) {
  if (auto s = Check(update); !s.ok()) return s;
  switch (update.kind_case()) {
    case Update::kRegisterDataset: DoRegisterDataset(update.register_dataset()); break;
    case Update::kCreateJob: DoCreateJob(update.create_job()); break;
    case Update::kAcquireJobClient: DoAcquireJobClient(update.acquire_job_client()); break;
    case Update::kReleaseJobClient: DoReleaseJobClient(update.release_job_client()); break;
    case Update::kRegisterWorker: DoRegisterWorker(update.register_worker()); break;
    case Update::kRemoveWorker: DoRemoveWorker(update.remove_worker()); break;
    case Update::kCreateTask: DoCreateTask(update.create_task()); break;
    case Update::kFinishTask: DoFinishTask(update.finish_task()); break;
    case Update::kAssignSplits: DoAssignSplits(update.assign_splits()); break;
    case Update::kStartSplits: DoStartSplits(update.start_splits()); break;
    case Update::kFinishJob: DoFinishJob(update.finish_job()); break;
    case Update::kDrainWorker: DoDrainWorker(update.drain_worker()); break;
    case Update::kTaskEpochEnd: DoTaskEpochEnd(update.task_epoch_end()); break;
    case Update::kRoundWatermark: DoRoundWatermark(update.round_watermark()); break;
    case Update::kRestoreJob: DoRestoreJob(update.restore_job()); break;
    case Update::kIdCounters: DoIdCounters(update.id_counters()); break;
    case Update::kSplitProgress: DoSplitProgress(update.split_progress()); break;
    case Update::kRemoveJob: DoRemoveJob(update.remove_job()); break;
    case Update::kRemoveDataset: DoRemoveDataset(update.remove_dataset()); break;
    case Update::kReturnSplits: DoReturnSplits(update.return_splits()); break;
    case Update::KIND_NOT_SET: break;  // rejected by Check
  }
  return absl::OkStatus();
}

void DispatcherState::DoRegisterDataset(const service::RegisterDatasetUpdate& u) {
  Dataset& d = datasets_[u.dataset_id()];
  d.id = u.dataset_id();
  d.pipeline = u.pipeline();
  d.splits.assign(u.splits().begin(), u.splits().end());
  if (u.has_auto_order()) d.auto_order = u.auto_order();
}

void DispatcherState::RefillQueue(Job& job) {
  SplitState& s = *job.splits;
  const uint64_t n = DatasetOf(job).splits.size();
  s.queue.clear();
  for (uint64_t i = 0; i < n; ++i) s.queue.push_back(i);
  s.assigned.clear();
  s.started.assign(n, false);
  s.num_started = 0;
  s.tasks_at_epoch_end.clear();
  s.reading.clear();
  s.finished.assign(n, false);
  s.skip.clear();
}

void DispatcherState::DoCreateJob(const service::CreateJobUpdate& u) {
  Job& job = jobs_[u.job_id()];
  job.id = u.job_id();
  job.spec = u.spec();
  job.spec.set_num_epochs(NormalizedNumEpochs(job.spec.num_epochs()));
  job.iteration = std::max<int64_t>(1, u.iteration());
  job.static_workers.assign(u.static_workers().begin(), u.static_workers().end());
  if (job.spec.sharding() == service::SHARDING_DYNAMIC) {
    job.splits.emplace();
    RefillQueue(job);
    if (DatasetOf(job).splits.empty()) job.splits->exhausted = true;
  }
  if (!job.spec.job_name().empty()) job_by_name_[job.spec.job_name()] = job.id;
  next_job_id_ = u.job_id() + 1;
}

void DispatcherState::DoAcquireJobClient(const service::AcquireJobClientUpdate& u) {
  JobClient& c = job_clients_[u.job_client_id()];
  c.id = u.job_client_id();
  c.job_id = u.job_id();
  c.client_host = u.client_host();
  c.target_workers = u.target_workers();
  c.consumer_index = u.consumer_index();
  jobs_.at(u.job_id()).clients.insert(c.id);
  next_job_client_id_ = u.job_client_id() + 1;
}

void DispatcherState::DoReleaseJobClient(const service::ReleaseJobClientUpdate& u) {
  auto it = job_clients_.find(u.job_client_id());
  Job& job = jobs_.at(it->second.job_id);
  job.clients.erase(u.job_client_id());
  job.last_client_release_ms = u.time_ms();
  job_clients_.erase(it);
}

void DispatcherState::DoRegisterWorker(const service::RegisterWorkerUpdate& u) {
  Worker& w = workers_[u.worker_address()];
  w.address = u.worker_address();
  w.host = u.worker_host();
  w.placement = u.placement();
}

void DispatcherState::ReleaseTaskSplits(Job& job, int64_t task_id) {
  if (!job.splits) return;
  SplitState& s = *job.splits;
  std::vector<uint64_t> unstarted = UnstartedSplitsOf(job, task_id);
  // Back to the front, in ascending order: they are the oldest work of the epoch.
  for (auto it = unstarted.rbegin(); it != unstarted.rend(); ++it) {
    s.assigned.erase(*it);
    s.queue.push_front(*it);
  }
  // The splits it was reading: what lies past the lease was never read, so it goes back as a
  // remainder (in front: it is older still). Without a lease nothing is known; the split counts
  // as read (at most once).
  std::vector<std::pair<uint64_t, int64_t>> remainders;
  for (auto it = s.reading.begin(); it != s.reading.end();) {
    if (it->second.task != task_id) {
      ++it;
      continue;
    }
    if (it->second.lease_end >= 0) remainders.emplace_back(it->first, it->second.lease_end);
    it = s.reading.erase(it);
  }
  for (auto it = remainders.rbegin(); it != remainders.rend(); ++it) {
    s.started[it->first] = false;
    --s.num_started;
    s.skip[it->first] = it->second;
    s.queue.push_front(it->first);
  }
  s.tasks_at_epoch_end.erase(task_id);
}

void DispatcherState::MaybeAdvanceEpoch(Job& job) {
  if (job.finished || !job.splits) return;
  SplitState& s = *job.splits;
  if (s.exhausted || !s.queue.empty() || !s.assigned.empty() || s.tasks_at_epoch_end.empty()) return;
  for (const auto& [index, r] : s.reading) {
    if (r.lease_end >= 0) return;  // its reader may still be lost: the remainder belongs to this epoch
  }
  for (int64_t t : job.tasks) {
    if (!tasks_.at(t).finished && !s.tasks_at_epoch_end.count(t)) return;
  }
  const int64_t epochs = job.spec.num_epochs();
  if (epochs != -1 && s.epoch + 1 >= epochs) {
    s.exhausted = true;
    return;
  }
  ++s.epoch;
  RefillQueue(job);
}

void DispatcherState::DoRemoveWorker(const service::RemoveWorkerUpdate& u) {
  auto it = workers_.find(u.worker_address());
  std::set<int64_t> affected_jobs;
  for (int64_t task_id : it->second.tasks) {
    const int64_t job_id = tasks_.at(task_id).job_id;
    Job& job = jobs_.at(job_id);
    job.tasks.erase(task_id);
    ReleaseTaskSplits(job, task_id);
    tasks_.erase(task_id);
    affected_jobs.insert(job_id);
  }
  workers_.erase(it);
  for (int64_t job_id : affected_jobs) MaybeAdvanceEpoch(jobs_.at(job_id));
}

void DispatcherState::DoCreateTask(const service::CreateTaskUpdate& u) {
  Task& t = tasks_[u.task_id()];
  t.id = u.task_id();
  t.job_id = u.job_id();
  t.worker_address = u.worker_address();
  t.starting_round = u.starting_round();
  t.worker_index = u.worker_index();
  t.num_workers = u.num_workers();
  jobs_.at(u.job_id()).tasks.insert(t.id);
  workers_.at(u.worker_address()).tasks.insert(t.id);
  next_task_id_ = u.task_id() + 1;
}

void DispatcherState::DoFinishTask(const service::FinishTaskUpdate& u) {
  Task& task = tasks_.at(u.task_id());
  task.finished = true;
  Job& job = jobs_.at(task.job_id);
  ReleaseTaskSplits(job, task.id);
  MaybeAdvanceEpoch(job);
}

void DispatcherState::DoAssignSplits(const service::AssignSplitsUpdate& u) {
  Job& job = jobs_.at(u.job_id());
  SplitState& s = *job.splits;
  for (uint64_t index : u.split_indices()) {
    s.queue.pop_front();
    s.assigned[index] = u.task_id();
  }
  job.splits_served += u.split_indices_size();
}

void DispatcherState::DoStartSplits(const service::StartSplitsUpdate& u) {
  SplitState& s = *jobs_.at(u.job_id()).splits;
  for (uint64_t index : u.split_indices()) {
    s.assigned.erase(index);
    s.started[index] = true;
    ++s.num_started;
    s.reading[index] = SplitState::Reading{u.task_id(), -1};
    s.skip.erase(index);
  }
}

void DispatcherState::DoRemoveJob(const service::RemoveJobUpdate& u) { jobs_.erase(u.job_id()); }

void DispatcherState::DoRemoveDataset(const service::RemoveDatasetUpdate& u) { datasets_.erase(u.dataset_id()); }

void DispatcherState::DoSplitProgress(const service::SplitProgressUpdate& u) {
  Job& job = jobs_.at(u.job_id());
  SplitState& s = *job.splits;
  std::vector<std::pair<uint64_t, int64_t>> released;
  for (const auto& p : u.progress()) {
    if (p.released()) {
      released.emplace_back(p.index(), p.lease_end());
      continue;
    }
    if (p.lease_end() >= 0) s.reading[p.index()].lease_end = p.lease_end();
    if (p.finished()) {
      s.reading.erase(p.index());
      s.finished[p.index()] = true;
    }
  }
  // Handed back by a draining reader: the unread rest is a remainder, in front (highest first, so
  // the queue holds them in ascending order).
  std::sort(released.begin(), released.end());
  for (auto it = released.rbegin(); it != released.rend(); ++it) {
    s.reading.erase(it->first);
    s.started[it->first] = false;
    --s.num_started;
    if (it->second > 0) {
      s.skip[it->first] = it->second;
    } else {
      s.skip.erase(it->first);
    }
    s.queue.push_front(it->first);
  }
  MaybeAdvanceEpoch(job);
}

void DispatcherState::DoReturnSplits(const service::ReturnSplitsUpdate& u) {
  SplitState& s = *jobs_.at(u.job_id()).splits;
  std::vector<uint64_t> indices(u.split_indices().begin(), u.split_indices().end());
  std::sort(indices.begin(), indices.end());
  for (auto it = indices.rbegin(); it != indices.rend(); ++it) {
    s.assigned.erase(*it);
    s.queue.push_front(*it);
  }
}

void DispatcherState::DoFinishJob(const service::FinishJobUpdate& u) {
  Job& job = jobs_.at(u.job_id());
  job.finished = true;
  job.finish_reason = u.reason();
  for (int64_t task_id : job.tasks) {
    auto task = tasks_.find(task_id);
    workers_.at(task->second.worker_address).tasks.erase(task_id);
    tasks_.erase(task);
  }
  job.tasks.clear();
  job.splits.reset();
}

void DispatcherState::DoDrainWorker(const service::DrainWorkerUpdate& u) { workers_.at(u.worker_address()).draining = true; }

void DispatcherState::DoTaskEpochEnd(const service::TaskEpochEndUpdate& u) {
  Job& job = jobs_.at(u.job_id());
  job.splits->tasks_at_epoch_end.insert(u.task_id());
  MaybeAdvanceEpoch(job);
}

void DispatcherState::DoRoundWatermark(const service::RoundWatermarkUpdate& u) {
  jobs_.at(u.job_id()).round_watermark = u.round();
}

void DispatcherState::DoRestoreJob(const service::RestoreJobUpdate& u) {
  Job& job = jobs_.at(u.job_id());
  job.last_client_release_ms = u.last_client_release_ms();
  job.round_watermark = u.round_watermark();
  job.splits_served = u.splits_served();
  if (!job.splits) return;
  SplitState& s = *job.splits;
  const uint64_t n = DatasetOf(job).splits.size();
  s.epoch = u.epoch();
  s.queue.clear();
  for (const auto& r : u.queued()) {
    for (uint64_t i = r.begin(); i < r.end(); ++i) s.queue.push_back(i);
  }
  s.assigned.clear();
  for (const auto& a : u.assigned()) {
    for (uint64_t i : a.split_indices()) s.assigned[i] = a.task_id();
  }
  s.started.assign(n, false);
  s.num_started = 0;
  for (const auto& r : u.started()) {
    for (uint64_t i = r.begin(); i < r.end(); ++i) {
      s.started[i] = true;
      ++s.num_started;
    }
  }
  s.tasks_at_epoch_end = std::set<int64_t>(u.tasks_at_epoch_end().begin(), u.tasks_at_epoch_end().end());
  s.exhausted = u.splits_exhausted();
  s.reading.clear();
  for (const auto& r : u.reading()) s.reading[r.index()] = SplitState::Reading{r.task_id(), r.lease_end()};
  s.finished.assign(n, false);
  for (const auto& r : u.finished()) {
    for (uint64_t i = r.begin(); i < r.end(); ++i) s.finished[i] = true;
  }
  s.skip.clear();
  for (const auto& k : u.skips()) s.skip[k.index()] = k.skip();
}

void DispatcherState::DoIdCounters(const service::IdCountersUpdate& u) {
  next_job_id_ = u.next_job_id();
  next_task_id_ = u.next_task_id();
  next_job_client_id_ = u.next_job_client_id();
}

// ---------------------------------------------------------------- snapshots

std::vector<Update> DispatcherState::ToSnapshotUpdates() const {
  std::vector<Update> out;
  for (const auto& [id, d] : datasets_) {
    auto* u = out.emplace_back().mutable_register_dataset();
    u->set_dataset_id(id);
    *u->mutable_pipeline() = d.pipeline;
    for (const auto& split : d.splits) *u->add_splits() = split;
    if (d.auto_order.has_value()) *u->mutable_auto_order() = *d.auto_order;
  }
  for (const auto& [address, w] : workers_) {
    auto* u = out.emplace_back().mutable_register_worker();
    u->set_worker_address(address);
    u->set_worker_host(w.host);
    u->set_placement(w.placement);
  }
  // Ids only grow, so objects are created in id order across jobs; jobs finish after all of
  // their tasks and clients exist.
  for (const auto& [job_id, job] : jobs_) {
    auto* create = out.emplace_back().mutable_create_job();
    create->set_job_id(job_id);
    *create->mutable_spec() = job.spec;
    create->set_iteration(job.iteration);
    for (const auto& a : job.static_workers) create->add_static_workers(a);
  }
  for (const auto& [task_id, t] : tasks_) {
    auto* u = out.emplace_back().mutable_create_task();
    u->set_task_id(t.id);
    u->set_job_id(t.job_id);
    u->set_worker_address(t.worker_address);
    u->set_starting_round(t.starting_round);
    u->set_worker_index(t.worker_index);
    u->set_num_workers(t.num_workers);
  }
  for (const auto& [task_id, t] : tasks_) {
    if (t.finished) out.emplace_back().mutable_finish_task()->set_task_id(task_id);
  }
  for (const auto& [client_id, c] : job_clients_) {
    auto* u = out.emplace_back().mutable_acquire_job_client();
    u->set_job_client_id(c.id);
    u->set_job_id(c.job_id);
    u->set_client_host(c.client_host);
    u->set_target_workers(c.target_workers);
    u->set_consumer_index(c.consumer_index);
  }
  for (const auto& [job_id, job] : jobs_) {
    // Finishing drops the split positions, so it comes before restoring the counters.
    if (job.finished) {
      auto* u = out.emplace_back().mutable_finish_job();
      u->set_job_id(job_id);
      u->set_reason(job.finish_reason);
    }
    auto* restore = out.emplace_back().mutable_restore_job();
    restore->set_job_id(job_id);
    restore->set_last_client_release_ms(job.last_client_release_ms);
    restore->set_round_watermark(job.round_watermark);
    restore->set_splits_served(job.splits_served);
    if (job.splits) {
      const SplitState& s = *job.splits;
      restore->set_epoch(s.epoch);
      AppendRanges(s.queue, restore->mutable_queued());
      std::map<int64_t, std::vector<uint64_t>> by_task;
      for (const auto& [index, task] : s.assigned) by_task[task].push_back(index);
      for (const auto& [task, indices] : by_task) {
        auto* a = restore->add_assigned();
        a->set_task_id(task);
        for (uint64_t i : indices) a->add_split_indices(i);
      }
      std::vector<uint64_t> started;
      for (uint64_t i = 0; i < s.started.size(); ++i) {
        if (s.started[i]) started.push_back(i);
      }
      AppendRanges(started, restore->mutable_started());
      for (int64_t t : s.tasks_at_epoch_end) restore->add_tasks_at_epoch_end(t);
      restore->set_splits_exhausted(s.exhausted);
      for (const auto& [index, r] : s.reading) {
        auto* reading = restore->add_reading();
        reading->set_index(index);
        reading->set_task_id(r.task);
        reading->set_lease_end(r.lease_end);
      }
      std::vector<uint64_t> finished;
      for (uint64_t i = 0; i < s.finished.size(); ++i) {
        if (s.finished[i]) finished.push_back(i);
      }
      AppendRanges(finished, restore->mutable_finished());
      for (const auto& [index, skip] : s.skip) {
        auto* k = restore->add_skips();
        k->set_index(index);
        k->set_skip(skip);
      }
    }
  }
  for (const auto& [address, w] : workers_) {
    if (w.draining) out.emplace_back().mutable_drain_worker()->set_worker_address(address);
  }
  auto* ids = out.emplace_back().mutable_id_counters();
  ids->set_next_job_id(next_job_id_);
  ids->set_next_task_id(next_task_id_);
  ids->set_next_job_client_id(next_job_client_id_);
  return out;
}

std::string DispatcherState::DebugString() const {
  std::string out;
  absl::StrAppend(&out, "next_ids job=", next_job_id_, " task=", next_task_id_, " client=", next_job_client_id_, "\n");
  for (const auto& [id, d] : datasets_) {
    absl::StrAppend(&out, "dataset ", id, " splits=", d.splits.size(), " pipeline=", d.pipeline.ShortDebugString(), "\n");
    for (const auto& s : d.splits) absl::StrAppend(&out, "  split ", s.ShortDebugString(), "\n");
  }
  for (const auto& [address, w] : workers_) {
    absl::StrAppend(&out, "worker ", address, " host=", w.host, " placement=", w.placement, " draining=", w.draining,
                    " tasks=[", absl::StrJoin(w.tasks, ","), "]\n");
  }
  for (const auto& [id, t] : tasks_) {
    absl::StrAppend(&out, "task ", id, " job=", t.job_id, " worker=", t.worker_address, " round=", t.starting_round,
                    " index=", t.worker_index, "/", t.num_workers, " finished=", t.finished, "\n");
  }
  for (const auto& [id, c] : job_clients_) {
    absl::StrAppend(&out, "client ", id, " job=", c.job_id, " host=", c.client_host, " target=", c.target_workers,
                    " consumer=", c.consumer_index, "\n");
  }
  for (const auto& [name, id] : job_by_name_) absl::StrAppend(&out, "job_name ", name, " -> ", id, "\n");
  for (const auto& [id, job] : jobs_) {
    absl::StrAppend(&out, "job ", id, " iteration=", job.iteration, " spec={", job.spec.ShortDebugString(), "} static=[",
                    absl::StrJoin(job.static_workers, ","), "] finished=", job.finished, " reason=", job.finish_reason,
                    " clients=[", absl::StrJoin(job.clients, ","), "] released_ms=", job.last_client_release_ms,
                    " tasks=[", absl::StrJoin(job.tasks, ","), "] watermark=", job.round_watermark,
                    " served=", job.splits_served, "\n");
    if (job.splits) {
      const SplitState& s = *job.splits;
      std::vector<std::string> assigned;
      for (const auto& [index, task] : s.assigned) assigned.push_back(absl::StrCat(index, ":", task));
      std::string started;
      for (bool b : s.started) started.push_back(b ? '1' : '0');
      std::vector<std::string> reading;
      for (const auto& [index, r] : s.reading) reading.push_back(absl::StrCat(index, ":", r.task, "@", r.lease_end));
      std::string finished;
      for (bool b : s.finished) finished.push_back(b ? '1' : '0');
      std::vector<std::string> skips;
      for (const auto& [index, skip] : s.skip) skips.push_back(absl::StrCat(index, "+", skip));
      absl::StrAppend(&out, "  splits epoch=", s.epoch, " exhausted=", s.exhausted, " queue=[",
                      absl::StrJoin(s.queue, ","), "] assigned=[", absl::StrJoin(assigned, ","), "] started=", started,
                      " num_started=", s.num_started, " at_end=[", absl::StrJoin(s.tasks_at_epoch_end, ","),
                      "] reading=[", absl::StrJoin(reading, ","), "] finished=", finished, " skips=[",
                      absl::StrJoin(skips, ","), "]\n");
    }
  }
  return out;
}

}  // namespace sluice::dispatcher
