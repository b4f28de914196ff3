#include "dataplane/dispatcher/retention.h"

namespace sluice::dispatcher {

std::vector<int64_t> AbandonedJobs(const DispatcherState& state, absl::Time now, absl::Duration grace) {
  const int64_t now_ms = absl::ToUnixMillis(now);
  const int64_t grace_ms = absl::ToInt64Milliseconds(grace);
  std::vector<int64_t> abandoned;
  for (const auto& [id, job] : state.jobs()) {
    if (!job.finished && job.clients.empty() && now_ms - job.last_client_release_ms >= grace_ms) {
      abandoned.push_back(id);
    }
  }
  return abandoned;
}

std::vector<int64_t> FinishedJobsToForget(const DispatcherState& state, int64_t retained) {
  int64_t finished = 0;
  std::vector<int64_t> removable;
  for (const auto& [id, job] : state.jobs()) {
    if (!job.finished) continue;
    ++finished;
    if (state.Removable(job)) removable.push_back(id);
  }
  const int64_t excess = finished - retained;
  if (excess <= 0) return {};
  if (static_cast<int64_t>(removable.size()) > excess) removable.resize(static_cast<size_t>(excess));
  return removable;
}

std::vector<std::string> DatasetRetention::Unused(const DispatcherState& state, const std::string& keep,
                                                  absl::Time now, absl::Duration retention) {
  std::vector<std::string> unused;
  for (const auto& [id, dataset] : state.datasets()) {
    if (state.DatasetInUse(id) || id == keep) {  // the default pipeline stays
      last_used_.erase(id);
      continue;
    }
    auto [it, first_seen] = last_used_.try_emplace(id, now);
    if (!first_seen && now - it->second >= retention) unused.push_back(id);
  }
  return unused;
}

}  // namespace sluice::dispatcher
