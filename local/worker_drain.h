// Whether a worker chosen for removal has drained, decided from the dispatcher's GetState, whose
// verdict is delivery-confirmed — so a scale-down loses no element.
//
// After DrainWorkers the dispatcher gives the worker no new task and no new split. A worker has
// drained when one of these holds:
//  - the dispatcher no longer lists it (it deregistered or was removed);
//  - the dispatcher lists it as draining with no task left (its jobs are over);
//  - the dispatcher lists it as draining and `drained`: its clients received every element it
//    produced (delivery receipts: the worker's produced counts against the clients' received
//    ones), it holds no split (none handed out and unstarted, none started and unfinished), and
//    it heartbeated twice since its last split report. Under dynamic sharding a drained worker's
//    task stays listed until its job ends, so this is the usual case in a running job.
// Elements in the gRPC transport, or buffered in the worker, are produced and not received, so
// they keep the worker alive. Under OFF, FILE and DATA sharding a worker's task is its own share
// of the data: it drains only when the task ends. A dispatcher that does not report the verdict
// (an older one: `drained` false and no `drain_blocker`) never drains a worker by this rule.
// The worker's own /metrics are not part of the verdict; the caller may scrape them for its logs.
//
// Pure functions; thread-safe.
#ifndef SLUICE_LOCAL_WORKER_DRAIN_H_
#define SLUICE_LOCAL_WORKER_DRAIN_H_

#include <string>

#include "absl/time/time.h"
#include "dataservice.pb.h"

namespace sluice::local {

// One scrape of a worker's /metrics (for logs and StoppedWorker reports only).
struct WorkerLoad {
  absl::Time at;
  double buffered_elements = 0;  // sluice_worker_buffered_elements
  double elements_produced = 0;  // sluice_worker_elements_produced_total
};

struct WorkerDrainStatus {
  bool drained = false;
  std::string reason;  // e.g. "draining, 1 task: 12 elements not yet received", for errors and logs
};

// The drain state of the worker registered as `address`.
WorkerDrainStatus EvaluateWorkerDrain(const service::GetStateResponse& state, const std::string& address);

}  // namespace sluice::local

#endif  // SLUICE_LOCAL_WORKER_DRAIN_H_
