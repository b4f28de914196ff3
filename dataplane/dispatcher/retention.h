// Retention and timeouts: what the periodic Tick removes. Workers and clients whose heartbeats
// stopped, jobs without clients past the grace period, the oldest finished jobs beyond the retained
// count, and datasets no job uses for the retention period (their split lists are the bulk of a
// long-lived dispatcher's state). Selections only: the service commits the removals.
//
// Pure functions of their arguments, and DatasetRetention (soft state: when each dataset was last
// registered or last used by a job that went; after a restart every dataset starts its period
// anew). Thread-compatible; the service calls them under its lock.
#ifndef SLUICE_DATAPLANE_DISPATCHER_RETENTION_H_
#define SLUICE_DATAPLANE_DISPATCHER_RETENTION_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "dataplane/dispatcher/dispatcher_state.h"

namespace sluice::dispatcher {

// The keys last seen more than `timeout` before `now`.
template <typename Key>
std::vector<Key> TimedOut(const std::map<Key, absl::Time>& last_seen, absl::Time now, absl::Duration timeout) {
  std::vector<Key> out;
  for (const auto& [key, seen] : last_seen) {
    if (now - seen > timeout) out.push_back(key);
  }
  return out;
}

// Running jobs without clients whose last client left `grace` or longer before `now`.
std::vector<int64_t> AbandonedJobs(const DispatcherState& state, absl::Time now, absl::Duration grace);

// The finished jobs to forget so that at most `retained` finished jobs stay: the oldest of those
// that may be (DispatcherState::Removable: no clients, not their name's latest), in id order.
std::vector<int64_t> FinishedJobsToForget(const DispatcherState& state, int64_t retained);

class DatasetRetention {
 public:
  // The dataset was registered or used just now (a job for it is probably on its way).
  void Touch(const std::string& dataset_id, absl::Time now) { last_used_[dataset_id] = now; }
  void Forget(const std::string& dataset_id) { last_used_.erase(dataset_id); }
  // The datasets no job refers to, other than `keep` (the default pipeline's), unused for
  // `retention`. A dataset first seen unused now starts its period now.
  std::vector<std::string> Unused(const DispatcherState& state, const std::string& keep, absl::Time now,
                                  absl::Duration retention);

 private:
  std::map<std::string, absl::Time> last_used_;
};

}  // namespace sluice::dispatcher

#endif  // SLUICE_DATAPLANE_DISPATCHER_RETENTION_H_
