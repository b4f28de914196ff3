// Drain: a draining worker keeps serving the tasks and splits it has but gets no new tasks and no
// more splits, so it can be removed without losing work (requested by DrainWorkers, e.g. from the
// operator before a scale-down, or by the worker itself in its heartbeat).
//
// Threading: free functions; those taking a JournaledState require its mu (the service holds it)
// and change the state only through JournaledState::Commit.
#ifndef SLUICE_DATAPLANE_DISPATCHER_DRAIN_H_
#define SLUICE_DATAPLANE_DISPATCHER_DRAIN_H_

#include <string>

#include "absl/base/thread_annotations.h"
#include "dataplane/dispatcher/delivery_tracker.h"
#include "dataplane/dispatcher/dispatcher_state.h"
#include "absl/status/status.h"
#include "dataplane/dispatcher/journaled_state.h"
#include "dataservice.pb.h"

namespace sluice::dispatcher {

// The checks of a DrainWorkersRequest that need no state (workers named or all_workers, not both).
absl::Status CheckDrainRequest(const service::DrainWorkersRequest& request);

// Marks the named (or all) registered workers draining; `response->drained` lists them once each.
// Workers that are gone already are skipped.
absl::Status DrainWorkers(JournaledState& js, const service::DrainWorkersRequest& request,
                          service::DrainWorkersResponse* response) ABSL_EXCLUSIVE_LOCKS_REQUIRED(js.mu);

// Marks the registered worker at `address` draining, unless it is already; `requested`: by
// DrainWorkers (else by the worker's heartbeat), for the log.
absl::Status MarkDraining(JournaledState& js, const std::string& address, bool requested)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(js.mu);

// Whether a draining worker is drained (GetState's WorkerInfo.drained and companions). A draining
// worker hands its input back (GetSplitsResponse.release: unstarted splits returned, the splits it
// reads released at its readers' positions) and its tasks end once their pipelines flushed what
// they read and their clients took it. Drained: every task of it is a DYNAMIC one that has
// finished (or whose job has), it holds no split, its clients received all it produced, and it
// heartbeated at least twice since its last split report (`heartbeats_since_split_report`), so its
// produced counts are current. Static shares and coordinated-read tasks drain only when they end.
// Pure.
struct DrainVerdict {
  bool drained = false;
  int64_t undelivered_elements = 0;
  int64_t splits_held = 0;
  int64_t tasks_running = 0;  // DYNAMIC tasks of running jobs not finished yet
  std::string blocker;  // why not, "" when drained
};
DrainVerdict EvaluateDrained(const DispatcherState& state, const DispatcherState::Worker& worker,
                             const DeliveryTracker& delivery, int64_t heartbeats_since_split_report);

}  // namespace sluice::dispatcher

#endif  // SLUICE_DATAPLANE_DISPATCHER_DRAIN_H_
