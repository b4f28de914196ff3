#include "kube/controller.h"

#include <exception>

#include "absl/strings/str_cat.h"

namespace sluice::kube {

Controller::Controller(WorkQueue* queue, ReconcileFunc reconcile, ControllerOptions options)
    : queue_(queue), reconcile_(std::move(reconcile)), options_(std::move(options)) {}

Controller::~Controller() { Stop(); }

void Controller::Start() {
  if (!workers_.empty()) return;
  for (int i = 0; i < std::max(1, options_.workers); ++i) {
    workers_.emplace_back([this] {
      while (ProcessNext()) {
      }
    });
  }
}

void Controller::Stop() {
  if (workers_.empty()) return;
  queue_->ShutDown();
  for (std::thread& worker : workers_) worker.join();
  workers_.clear();
}

bool Controller::ProcessNext() {
  std::optional<std::string> key = queue_->Get();
  if (!key) return false;
  absl::StatusOr<ReconcileResult> result;
  try {
    result = reconcile_(*key);
  } catch (const std::exception& e) {
    // Reconcilers should not throw; a throw is treated as a failed reconcile, not a crash.
    result = absl::InternalError(absl::StrCat(options_.name, ": reconcile threw: ", e.what()));
  } catch (...) {
    result = absl::InternalError(absl::StrCat(options_.name, ": reconcile threw"));
  }
  ++reconciles_;
  if (!result.ok()) {
    ++failures_;
    queue_->AddRateLimited(*key);
  } else if (result->requeue_after > absl::ZeroDuration()) {
    queue_->Forget(*key);
    queue_->AddAfter(*key, result->requeue_after);
  } else if (result->requeue) {
    queue_->AddRateLimited(*key);
  } else {
    queue_->Forget(*key);
  }
  if (options_.on_result) options_.on_result(*key, result);
  queue_->Done(*key);
  return true;
}

}  // namespace sluice::kube
