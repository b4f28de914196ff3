// Coordinated reads: which task serves a round. Every consumer of a job evaluates the same rule on
// the same task list (learned from dispatcher heartbeats), so all consumers of round r ask the same
// worker without talking to each other.
//
// Rule (the data-service contract): round r is served by the task at position (r mod K) among the
// K tasks whose starting_round <= r, ordered by task_id. A worker that joins mid-job gets a
// starting_round in the future, so consumers learn it before any of them reaches that round.
// Pure functions; thread-safe.
#ifndef SLUICE_DATAPLANE_CLIENT_ROUND_ROBIN_H_
#define SLUICE_DATAPLANE_CLIENT_ROUND_ROBIN_H_

#include <cstdint>
#include <optional>
#include <vector>

#include "dataservice.pb.h"

namespace sluice::client {

// The task_id serving `round`, or std::nullopt when no task has started by then.
std::optional<int64_t> TaskForRound(const std::vector<service::TaskInfo>& tasks, int64_t round);

}  // namespace sluice::client

#endif  // SLUICE_DATAPLANE_CLIENT_ROUND_ROBIN_H_
