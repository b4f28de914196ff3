#include "local/worker_drain.h"

#include "absl/strings/str_cat.h"

namespace sluice::local {

WorkerDrainStatus EvaluateWorkerDrain(const service::GetStateResponse& state, const std::string& address) {
  const service::WorkerInfo* info = nullptr;
  for (const auto& w : state.workers()) {
    if (w.address() == address) info = &w;
  }
  if (info == nullptr) return {true, "no longer registered with the dispatcher"};
  if (!info->draining()) return {false, "the dispatcher does not list it as draining yet"};
  const int tasks = info->task_ids_size();
  if (tasks == 0) return {true, "draining, no task left"};
  const std::string holding = absl::StrCat("draining, ", tasks, tasks == 1 ? " task" : " tasks");
  if (info->undelivered_elements() < 0 || info->splits_held() < 0) {
    return {false, absl::StrCat(holding, ": the dispatcher reports negative counts (undelivered_elements ",
                                info->undelivered_elements(), ", splits_held ", info->splits_held(), "); not trusted")};
  }
  if (info->drained()) {
    // A verdict contradicted by its own counts is not trusted.
    if (info->undelivered_elements() > 0 || info->splits_held() > 0) {
      return {false, absl::StrCat(holding, ": the dispatcher says drained but reports ", info->undelivered_elements(),
                                  " undelivered elements and ", info->splits_held(), " splits held; not trusted")};
    }
    return {true, absl::StrCat(holding, " drained: clients received all it produced and it holds no split")};
  }
  if (info->drain_blocker().empty()) {
    return {false, absl::StrCat(holding, ": the dispatcher gives no drain verdict (an older dispatcher?)")};
  }
  return {false, absl::StrCat(holding, ": ", info->drain_blocker())};
}

}  // namespace sluice::local
