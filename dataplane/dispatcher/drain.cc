#include "dataplane/dispatcher/drain.h"

#include <set>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/log.h"

namespace sluice::dispatcher {

absl::Status CheckDrainRequest(const service::DrainWorkersRequest& request) {
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
  return absl::OkStatus();
}

absl::Status MarkDraining(JournaledState& js, const std::string& address, bool requested) {
  const DispatcherState::Worker* worker = js.state().FindWorker(address);
  if (worker == nullptr || worker->draining) return absl::OkStatus();
  service::Update u;
  u.mutable_drain_worker()->set_worker_address(address);
  if (absl::Status s = js.Commit(u); !s.ok()) return s;
  SLUICE_LOG(Info, requested ? "worker draining (requested)" : "worker draining")
      .With("worker_address", address);
  return absl::OkStatus();
}

absl::Status DrainWorkers(JournaledState& js, const service::DrainWorkersRequest& request,
                          service::DrainWorkersResponse* response) {
  std::vector<std::string> targets(request.worker_addresses().begin(), request.worker_addresses().end());
  if (request.all_workers()) {
    for (const auto& [address, w] : js.state().workers()) targets.push_back(address);
  }
  std::set<std::string> done;
  for (const auto& address : targets) {
    if (js.state().FindWorker(address) == nullptr || done.count(address)) continue;  // already gone: nothing to drain
    if (absl::Status s = MarkDraining(js, address, /*requested=*/true); !s.ok()) return s;
    done.insert(address);
    response->add_drained(address);
  }
  return absl::OkStatus();
}

DrainVerdict EvaluateDrained(const DispatcherState& state, const DispatcherState::Worker& worker,
                             const DeliveryTracker& delivery, int64_t heartbeats_since_split_report) {
  DrainVerdict v;
  if (!worker.draining) {
    v.blocker = "not draining";
    return v;
  }
  std::string static_task;
  for (int64_t t : worker.tasks) {
    const DispatcherState::Task* task = state.FindTask(t);
    if (task == nullptr) continue;
    v.undelivered_elements += delivery.Undelivered(t);
    const DispatcherState::Job* job = state.FindJob(task->job_id);
    if (job == nullptr) continue;
    if (job->spec.sharding() != service::SHARDING_DYNAMIC) {
      if (static_task.empty()) static_task = absl::StrCat("task ", t, " is a static share of job ", job->id, " (drains when it ends)");
      continue;
    }
    if (job->spec.num_consumers() > 0) {
      if (static_task.empty()) static_task = absl::StrCat("task ", t, " serves coordinated reads of job ", job->id, " (drains when it ends)");
      continue;
    }
    if (!job->splits || job->finished || task->finished) continue;
    ++v.tasks_running;
    v.splits_held += static_cast<int64_t>(state.UnstartedSplitsOf(*job, t).size());
    for (const auto& [index, r] : job->splits->reading) {
      if (r.task == t) ++v.splits_held;
    }
  }
  if (!static_task.empty()) {
    v.blocker = static_task;
  } else if (v.splits_held > 0) {
    v.blocker = absl::StrCat(v.splits_held, v.splits_held == 1 ? " split" : " splits", " not finished");
  } else if (v.tasks_running > 0) {
    v.blocker = absl::StrCat(v.tasks_running, v.tasks_running == 1 ? " task" : " tasks",
                             " handed its input back and still producing (its pipeline flushes what it read, its "
                             "buffer waits for clients)");
  } else if (v.undelivered_elements > 0) {
    v.blocker = absl::StrCat(v.undelivered_elements, " elements produced and not yet received by clients");
  } else if (!worker.tasks.empty() && heartbeats_since_split_report < 2) {
    v.blocker = absl::StrCat(heartbeats_since_split_report, " of 2 heartbeats since its last split report");
  } else {
    v.drained = true;
  }
  return v;
}

}  // namespace sluice::dispatcher
