// Whether a worker chosen for removal has drained, decided purely from what the dispatcher
// (GetState) and the worker itself (/metrics) report — so a scale-down loses no element.
//
// After DrainWorkers the dispatcher gives the worker no new task and no new split. A worker has
// drained when one of these holds:
//  - the dispatcher no longer lists it (it deregistered or was removed);
//  - the dispatcher lists it as draining with no task left (its jobs are over);
//  - the dispatcher lists it as draining, and the worker's own /metrics have shown, for at least
//    the quiet period, nothing buffered (`sluice_worker_buffered_elements` 0: clients read all it
//    produced) and no new element (`sluice_worker_elements_produced_total` unchanged: the splits
//    it was reading are finished). Under dynamic sharding a drained worker's task stays listed
//    until its job ends, so this is the usual case in a running job.
// The quiet period must span a few worker heartbeats: the buffered gauge is refreshed at each one.
// Limit: the dispatcher does not report which splits a worker still holds, so a pipeline slower
// than one element per quiet period mid-split would look drained; choose the quiet period above
// the slowest element time. Under OFF, FILE and DATA sharding a worker's task is its own share of
// the data: it drains only when the task ends.
//
// Pure functions; thread-safe.
#ifndef SLUICE_LOCAL_WORKER_DRAIN_H_
#define SLUICE_LOCAL_WORKER_DRAIN_H_

#include <string>
#include <vector>

#include "absl/time/time.h"
#include "dataservice.pb.h"

namespace sluice::local {

// One scrape of a worker's /metrics.
struct WorkerLoad {
  absl::Time at;
  double buffered_elements = 0;  // sluice_worker_buffered_elements
  double elements_produced = 0;  // sluice_worker_elements_produced_total
};

struct WorkerDrainStatus {
  bool drained = false;
  std::string reason;  // e.g. "draining, 1 task: 12 elements buffered", for errors and logs
};

// The drain state of the worker registered as `address`. `loads`: its scrapes since the drain
// began, oldest first (empty when it has no admin server, or none succeeded yet).
WorkerDrainStatus EvaluateWorkerDrain(const service::GetStateResponse& state, const std::string& address,
                                      const std::vector<WorkerLoad>& loads, absl::Duration quiet_period);

}  // namespace sluice::local

#endif  // SLUICE_LOCAL_WORKER_DRAIN_H_
