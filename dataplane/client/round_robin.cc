#include "dataplane/client/round_robin.h"

#include <algorithm>

namespace sluice::client {

std::optional<int64_t> TaskForRound(const std::vector<service::TaskInfo>& tasks, int64_t round) {
  std::vector<int64_t> eligible;
  for (const auto& t : tasks) {
    if (t.starting_round() <= round) eligible.push_back(t.task_id());
  }
  if (eligible.empty() || round < 0) return std::nullopt;
  std::sort(eligible.begin(), eligible.end());
  eligible.erase(std::unique(eligible.begin(), eligible.end()), eligible.end());
  return eligible[static_cast<size_t>(round % static_cast<int64_t>(eligible.size()))];
}

}  // namespace sluice::client
