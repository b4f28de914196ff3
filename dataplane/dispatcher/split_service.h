// Split service (SHARDING_DYNAMIC): GetSplits — hands out the front of the job's split queue,
// takes acknowledgements (splits started) and position leases / finished splits, tells a task the
// end of an epoch once every split was started and no other task holds a lease, and follows the
// epochs (a worker that moved to the next epoch reached the end of this one; one that left early
// reads what is still queued of it).
//
// Threading: free functions; those taking a JournaledState require its mu (the service holds it)
// and change the state only through JournaledState::Commit.
#ifndef SLUICE_DATAPLANE_DISPATCHER_SPLIT_SERVICE_H_
#define SLUICE_DATAPLANE_DISPATCHER_SPLIT_SERVICE_H_

#include <cstdint>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "dataplane/dispatcher/dispatcher_metrics.h"
#include "dataplane/dispatcher/dispatcher_state.h"
#include "dataplane/dispatcher/journaled_state.h"
#include "dataservice.pb.h"

namespace sluice::dispatcher {

// The checks of a GetSplitsRequest that need no state.
absl::Status CheckSplitsArguments(const service::GetSplitsRequest& request);

// The task a GetSplitsRequest is for, after the checks against the state: the task exists and
// belongs to the named worker, its job is dynamically sharded, every index is a split of the
// dataset, every progress entry is well-formed.
struct SplitsCall {
  int64_t task_id = 0;
  int64_t job_id = 0;
  std::string worker_address;
};
absl::StatusOr<SplitsCall> CheckSplitsRequest(const DispatcherState& state, const service::GetSplitsRequest& request);

// Answers a checked request: at most `max_splits` splits (0: only acknowledgements and progress),
// the epoch they belong to, or end_of_splits. `metrics` may be null.
absl::Status ServeSplits(JournaledState& js, const SplitsCall& call, const service::GetSplitsRequest& request,
                         int max_splits, DispatcherMetrics* metrics, service::GetSplitsResponse* response)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(js.mu);

// Acknowledgements: the splits of `indices` that are assigned to `task_id` in `job_id`'s current
// epoch and not started are started (each once; the others are ignored: a retried call, an epoch
// that moved on).
absl::Status StartSplits(JournaledState& js, int64_t job_id, int64_t task_id,
                         const google::protobuf::RepeatedField<uint64_t>& indices) ABSL_EXCLUSIVE_LOCKS_REQUIRED(js.mu);

}  // namespace sluice::dispatcher

#endif  // SLUICE_DATAPLANE_DISPATCHER_SPLIT_SERVICE_H_
