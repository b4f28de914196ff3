#include "local/worker_drain.h"

#include "absl/strings/str_cat.h"

namespace sluice::local {

WorkerDrainStatus EvaluateWorkerDrain(const service::GetStateResponse& state, const std::string& address,
                                      const std::vector<WorkerLoad>& loads, absl::Duration quiet_period) {
  const service::WorkerInfo* info = nullptr;
  for (const auto& w : state.workers()) {
    if (w.address() == address) info = &w;
  }
  if (info == nullptr) return {true, "no longer registered with the dispatcher"};
  if (!info->draining()) return {false, "the dispatcher does not list it as draining yet"};
  const int tasks = info->task_ids_size();
  if (tasks == 0) return {true, "draining, no task left"};
  const std::string holding = absl::StrCat("draining, ", tasks, tasks == 1 ? " task" : " tasks");
  if (loads.empty()) return {false, absl::StrCat(holding, "; no /metrics read yet to tell whether its buffers are empty")};
  const WorkerLoad& last = loads.back();
  if (last.buffered_elements > 0) {
    return {false, absl::StrCat(holding, ": ", last.buffered_elements, " elements buffered, not yet read")};
  }
  // The quiet streak: the latest scrapes with nothing buffered and the produced count unchanged.
  absl::Time quiet_since = last.at;
  for (auto it = loads.rbegin(); it != loads.rend(); ++it) {
    if (it->buffered_elements > 0 || it->elements_produced != last.elements_produced) break;
    quiet_since = it->at;
  }
  const absl::Duration quiet = last.at - quiet_since;
  if (quiet >= quiet_period) {
    return {true, absl::StrCat(holding, " idle: nothing buffered and nothing produced for ", absl::FormatDuration(quiet))};
  }
  return {false, absl::StrCat(holding, ": nothing buffered, quiet for ", absl::FormatDuration(quiet), " of ",
                              absl::FormatDuration(quiet_period), " (its splits may still be read)")};
}

}  // namespace sluice::local
