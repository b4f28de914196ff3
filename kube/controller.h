// Controller: runs N worker threads that take keys from a WorkQueue and call a reconcile function.
// Outcome handling (controller-runtime / kube-rs style):
//   error                 -> AddRateLimited(key)   (per-key exponential backoff)
//   requeue_after > 0     -> Forget(key); AddAfter(key, requeue_after)
//   requeue               -> AddRateLimited(key)
//   otherwise             -> Forget(key)
// The queue guarantees one key is never reconciled by two workers at once.
//
// Threading: Start/Stop from one owner thread. The reconcile function runs on worker threads,
// concurrently for different keys; it must be thread-safe. Stop() shuts the queue down, lets the
// workers finish the keys already queued (drain) and joins them.
#ifndef SLUICE_KUBE_CONTROLLER_H_
#define SLUICE_KUBE_CONTROLLER_H_

#include <atomic>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "kube/workqueue.h"

namespace sluice::kube {

struct ReconcileResult {
  bool requeue = false;
  absl::Duration requeue_after = absl::ZeroDuration();
};

using ReconcileFunc = std::function<absl::StatusOr<ReconcileResult>(const std::string& key)>;

struct ControllerOptions {
  std::string name = "controller";
  int workers = 1;
  // Called after each reconcile (for logs/metrics); runs on the worker thread.
  std::function<void(const std::string& key, const absl::StatusOr<ReconcileResult>& result)> on_result{};
};

class Controller {
 public:
  Controller(WorkQueue* queue, ReconcileFunc reconcile, ControllerOptions options = {});
  ~Controller();  // Stop()s
  Controller(const Controller&) = delete;
  Controller& operator=(const Controller&) = delete;

  void Start();
  void Stop();
  // Handles one key (Get, reconcile, requeue policy, Done). False once the queue is shut down.
  // Exposed so tests can drive the loop step by step.
  bool ProcessNext();

  int64_t reconciles() const { return reconciles_.load(); }
  int64_t failures() const { return failures_.load(); }

 private:
  WorkQueue* const queue_;
  const ReconcileFunc reconcile_;
  const ControllerOptions options_;
  std::vector<std::thread> workers_;
  std::atomic<int64_t> reconciles_{0};
  std::atomic<int64_t> failures_{0};
};

}  // namespace sluice::kube

#endif  // SLUICE_KUBE_CONTROLLER_H_
