#include "dataplane/dispatcher/split_service.h"

#include <algorithm>
#include <set>
#include <vector>

#include "absl/strings/str_cat.h"
#include "dataplane/dispatcher/job_creation.h"

namespace sluice::dispatcher {

using service::Update;

namespace {

// The steps of one GetSplits call. `s` is the job's split state as it is now; a step that commits
// may end the epoch or the job, so the caller reads it again (CurrentSplits) where that matters.
using SplitState = DispatcherState::SplitState;

// The job's split state, or null once the job finished.
const SplitState* CurrentSplits(const JournaledState& js, int64_t job_id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(js.mu) {
  const DispatcherState::Job* j = js.state().FindJob(job_id);
  return j->finished ? nullptr : (j->splits ? &*j->splits : nullptr);
}

bool TaskDone(const JournaledState& js, int64_t task_id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(js.mu) {
  const DispatcherState::Task* task = js.state().FindTask(task_id);
  return task == nullptr || task->finished;
}

// Position leases and finished splits of the current epoch. Reports for an epoch that is over, or
// for splits this task no longer reads (a restarted dispatcher, a retried call), change nothing.
absl::Status ReportProgress(JournaledState& js, const SplitsCall& call, const service::GetSplitsRequest& request)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(js.mu) {
  const SplitState* now = CurrentSplits(js, call.job_id);
  Update u;
  auto* progress = u.mutable_split_progress();
  progress->set_job_id(call.job_id);
  progress->set_task_id(call.task_id);
  progress->set_epoch(now->epoch);
  std::set<uint64_t> seen;
  for (const service::SplitProgress& p : request.progress()) {
    auto it = now->reading.find(p.index());
    if (p.epoch() != now->epoch || it == now->reading.end() || it->second.task != call.task_id ||
        !seen.insert(p.index()).second) {
      continue;
    }
    service::SplitProgress* entry = progress->add_progress();
    *entry = p;
    if (p.released()) {
      // A release names the reader's exact position; a malformed one (no position, or also a
      // finish) was refused by CheckSplitsRequest.
      continue;
    }
    if (entry->lease_end() < it->second.lease_end) entry->set_lease_end(-1);
  }
  if (progress->progress_size() == 0) return absl::OkStatus();
  return js.Commit(u);
}

// A draining task's unstarted splits it hands back: those still assigned to it in the current epoch
// go back to the queue (the others were taken back already: a retried call, an epoch that moved on).
absl::Status ReturnSplits(JournaledState& js, const SplitsCall& call, const service::GetSplitsRequest& request)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(js.mu) {
  const SplitState* now = CurrentSplits(js, call.job_id);
  if (now == nullptr) return absl::OkStatus();
  Update u;
  auto* r = u.mutable_return_splits();
  r->set_job_id(call.job_id);
  r->set_task_id(call.task_id);
  r->set_epoch(now->epoch);
  std::set<uint64_t> seen;
  for (uint64_t index : request.returned_split_indices()) {
    auto it = now->assigned.find(index);
    if (it != now->assigned.end() && it->second == call.task_id && seen.insert(index).second) {
      r->add_split_indices(index);
    }
  }
  if (r->split_indices_size() == 0) return absl::OkStatus();
  return js.Commit(u);
}

// Every split of the epoch is started, and no other task reads one under a lease (if that task is
// lost, the remainder comes back to the queue for the tasks still asking).
bool AllStarted(const JournaledState& js, const SplitState& s, const SplitsCall& call)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(js.mu) {
  return s.queue.empty() && s.assigned.empty() &&
         !DispatcherState::OtherTaskHoldsLease(*js.state().FindJob(call.job_id), call.task_id);
}

// The task reached the end of the epoch (once).
absl::Status ReachEnd(JournaledState& js, const SplitState& s, const SplitsCall& call)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(js.mu) {
  if (s.tasks_at_epoch_end.count(call.task_id)) return absl::OkStatus();
  Update u;
  u.mutable_task_epoch_end()->set_job_id(call.job_id);
  u.mutable_task_epoch_end()->set_task_id(call.task_id);
  u.mutable_task_epoch_end()->set_epoch(s.epoch);
  return js.Commit(u);
}

// Hands out the front of the current epoch's queue (nothing to a draining worker).
absl::Status Assign(JournaledState& js, const SplitState& s, const SplitsCall& call, int max_splits,
                    DispatcherMetrics* metrics, service::GetSplitsResponse* response)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(js.mu) {
  const DispatcherState& state = js.state();
  const bool draining = state.FindWorker(state.FindTask(call.task_id)->worker_address)->draining;
  if (max_splits == 0 || draining || s.queue.empty()) return absl::OkStatus();
  const DispatcherState::Job& job = *state.FindJob(call.job_id);
  const DispatcherState::Dataset& dataset = *state.FindDataset(job.spec.dataset_id());
  Update u;
  auto* a = u.mutable_assign_splits();
  a->set_job_id(call.job_id);
  a->set_task_id(call.task_id);
  a->set_epoch(s.epoch);
  const size_t n = std::min(static_cast<size_t>(max_splits), s.queue.size());
  for (size_t i = 0; i < n; ++i) {
    a->add_split_indices(s.queue[i]);
    service::Split* split = response->add_splits();
    *split = dataset.splits[s.queue[i]];
    split->set_skip(DispatcherState::SkipOf(job, s.queue[i]));
  }
  if (absl::Status st = js.Commit(u); !st.ok()) return st;
  if (metrics != nullptr) metrics->AddSplitsServed(JobLabel(*state.FindJob(call.job_id)), static_cast<int64_t>(n));
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckSplitsArguments(const service::GetSplitsRequest& request) {
  if (request.max_splits() < 0) {
    return absl::InvalidArgumentError(absl::StrCat("max_splits is ", request.max_splits(), "; must be >= 0"));
  }
  if (request.epoch() < 0) return absl::InvalidArgumentError(absl::StrCat("epoch is ", request.epoch(), "; must be >= 0"));
  return absl::OkStatus();
}

absl::StatusOr<SplitsCall> CheckSplitsRequest(const DispatcherState& state, const service::GetSplitsRequest& request) {
  const DispatcherState::Task* task = state.FindTask(request.task_id());
  if (task == nullptr) return absl::NotFoundError(absl::StrCat("task_id ", request.task_id(), " is not known"));
  if (!request.worker_address().empty() && request.worker_address() != task->worker_address) {
    return absl::FailedPreconditionError(absl::StrCat("task_id ", task->id, " belongs to worker '", task->worker_address,
                                                      "', not '", request.worker_address(), "'"));
  }
  const DispatcherState::Job* job = state.FindJob(task->job_id);
  if (job->spec.sharding() != service::SHARDING_DYNAMIC) {
    return absl::FailedPreconditionError(absl::StrCat(
        "job ", job->id, " uses sharding ", ShortEnumName(service::ShardingPolicy_Name(job->spec.sharding()), "SHARDING_"),
        "; GetSplits serves SHARDING_DYNAMIC jobs only"));
  }
  const DispatcherState::Dataset& dataset = *state.FindDataset(job->spec.dataset_id());
  for (int i = 0; i < request.started_split_indices_size(); ++i) {
    if (request.started_split_indices(i) >= dataset.splits.size()) {
      return absl::InvalidArgumentError(absl::StrCat("started_split_indices[", i, "] is ", request.started_split_indices(i),
                                                     "; dataset ", dataset.id, " has ", dataset.splits.size(), " splits"));
    }
  }
  for (int i = 0; i < request.returned_split_indices_size(); ++i) {
    if (request.returned_split_indices(i) >= dataset.splits.size()) {
      return absl::InvalidArgumentError(absl::StrCat("returned_split_indices[", i, "] is ", request.returned_split_indices(i),
                                                     "; dataset ", dataset.id, " has ", dataset.splits.size(), " splits"));
    }
  }
  for (int i = 0; i < request.progress_size(); ++i) {
    const service::SplitProgress& p = request.progress(i);
    if (p.released() && (p.finished() || p.lease_end() < 0)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "progress[", i, "] releases split ", p.index(), " with lease_end ", p.lease_end(),
          p.finished() ? " and finished" : "", "; a release names the reader's position (lease_end >= 0) and is not a finish"));
    }
    if (p.index() >= dataset.splits.size() || p.lease_end() < -1 || p.epoch() < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "progress[", i, "] has index ", p.index(), ", epoch ", p.epoch(), ", lease_end ", p.lease_end(),
          "; dataset ", dataset.id, " has ", dataset.splits.size(), " splits, epochs are >= 0, lease_end >= -1"));
    }
  }
  return SplitsCall{task->id, job->id, task->worker_address};
}

absl::Status StartSplits(JournaledState& js, int64_t job_id, int64_t task_id,
                         const google::protobuf::RepeatedField<uint64_t>& indices) {
  const DispatcherState::Job& job = *js.state().FindJob(job_id);
  std::vector<uint64_t> unstarted = js.state().UnstartedSplitsOf(job, task_id);
  Update u;
  auto* start = u.mutable_start_splits();
  start->set_job_id(job_id);
  start->set_task_id(task_id);
  start->set_epoch(job.splits->epoch);
  std::set<uint64_t> seen;
  for (uint64_t index : indices) {
    if (std::binary_search(unstarted.begin(), unstarted.end(), index) && seen.insert(index).second) {
      start->add_split_indices(index);
    }
  }
  if (start->split_indices_size() == 0) return absl::OkStatus();
  return js.Commit(u);
}

absl::Status ServeSplits(JournaledState& js, const SplitsCall& call, const service::GetSplitsRequest& request,
                         int max_splits, DispatcherMetrics* metrics, service::GetSplitsResponse* response) {
  const int64_t requested_epoch = request.epoch();
  response->set_epoch(requested_epoch);
  // A draining worker hands its input back (it learns it here or from its heartbeat answer).
  response->set_release(js.state().FindWorker(call.worker_address)->draining);
  const SplitState* s = CurrentSplits(js, call.job_id);
  if (s == nullptr || TaskDone(js, call.task_id)) {
    response->set_end_of_splits(true);
    return absl::OkStatus();
  }
  if (requested_epoch > s->epoch + 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("epoch ", requested_epoch, " is ahead of job ", call.job_id, "'s epoch ", s->epoch));
  }
  // Acknowledgements: splits of the current epoch assigned to this task. A worker that already
  // moved to the next epoch may still acknowledge splits of this one.
  if (requested_epoch >= s->epoch && request.started_split_indices_size() > 0) {
    if (absl::Status st = StartSplits(js, call.job_id, call.task_id, request.started_split_indices()); !st.ok()) {
      return st;
    }
  }
  // Splits handed back unstarted (a draining worker), before the released ones: those go in front.
  if (request.returned_split_indices_size() > 0) {
    if (absl::Status st = ReturnSplits(js, call, request); !st.ok()) return st;
  }
  // Leases and finished splits after the starts: a start and its first lease travel together.
  if (request.progress_size() > 0) {
    if (absl::Status st = ReportProgress(js, call, request); !st.ok()) return st;
    s = CurrentSplits(js, call.job_id);  // finishing the last leased split may end the epoch
    if (s == nullptr) {
      response->set_end_of_splits(true);
      return absl::OkStatus();
    }
  }
  if (!s->exhausted && requested_epoch == s->epoch + 1) {
    if (AllStarted(js, *s, call)) {
      // The worker finished the current epoch and moved on: it reached the end.
      if (absl::Status st = ReachEnd(js, *s, call); !st.ok()) return st;
      s = CurrentSplits(js, call.job_id);  // may have moved to the next epoch
    } else if (!s->queue.empty()) {
      // The worker left the epoch early (e.g. `take` before `repeat`) while splits of it are
      // still queued. Nobody else may come back for them, so this task reads them: the response
      // says which epoch they belong to.
      response->set_epoch(s->epoch);
      return Assign(js, *s, call, max_splits, metrics, response);
    }
    // else: other tasks still hold unstarted splits of the epoch; ask again.
  }
  if (s->exhausted || requested_epoch < s->epoch) {
    response->set_end_of_splits(true);  // that epoch is over
  } else if (requested_epoch == s->epoch) {
    if (!s->queue.empty()) {
      return Assign(js, *s, call, max_splits, metrics, response);  // draining or max_splits 0: nothing now
    }
    if (AllStarted(js, *s, call)) {
      response->set_end_of_splits(true);
      return ReachEnd(js, *s, call);
    }
    // else: other tasks hold unstarted splits that may come back; the worker asks again.
  }
  // else (requested == epoch + 1, the epoch has not moved yet): wait for the other tasks.
  return absl::OkStatus();
}

}  // namespace sluice::dispatcher

