// Reflector: keeps a Store in sync with the API server by list + watch (client-go's Reflector,
// kube-rs's watcher + reflector), and tells handlers what changed.
//
//  - List: paginated (limit/continue); the first list asks resourceVersion=0 (served from the
//    API server's cache) and falls back to a consistent list if that fails; after a 410 the relist
//    is consistent. A relist diffs against the store: objects missing from it yield on_delete.
//  - Watch: from the list's resourceVersion with allowWatchBookmarks=true and a random
//    timeoutSeconds in [min_watch_timeout, max_watch_timeout]. A 410 (as HTTP status or ERROR
//    event) triggers a relist. Other errors back off (0.8 s doubling to 30 s, jittered); the
//    backoff resets after a healthy stream (one that delivered events or ended normally).
//  - Stop: Stop() / the stop token cancels the in-flight HTTP request, so shutdown never hangs.
//
// Threading: Run() blocks its calling thread (or Start() owns one). Handlers and the metrics
// callback run on that thread, in event order, without any lock held; they must not block for
// long (enqueue into a WorkQueue instead). Accessors are thread-safe.
#ifndef SLUICE_KUBE_REFLECTOR_H_
#define SLUICE_KUBE_REFLECTOR_H_

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <functional>
#include <stop_token>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "kube/client.h"
#include "kube/clock.h"
#include "kube/rate_limit.h"
#include "kube/resource.h"
#include "kube/store.h"

namespace sluice::kube {

struct ResourceEventHandler {
  std::function<void(const ObjectPtr&)> on_add{};
  std::function<void(const ObjectPtr& old_object, const ObjectPtr& new_object)> on_update{};
  // The last known state (from the DELETED event, or the cached object when a relist found it gone).
  std::function<void(const ObjectPtr&)> on_delete{};
};

struct ReflectorOptions {
  ResourceRef resource{};
  std::string ns;  // "" = all namespaces (or a cluster-scoped resource)
  std::string label_selector{};
  std::string field_selector{};
  int64_t page_size = 500;
  absl::Duration min_watch_timeout = absl::Minutes(5);
  absl::Duration max_watch_timeout = absl::Minutes(10);
  BackoffPolicy backoff{};  // defaults: 0.8 s doubling to 30 s with jitter
  Clock* clock = Clock::Real();
  uint64_t seed = 0;  // 0 = random
  // Applied to every listed or watched object before it is stored and handed to handlers (client-go's
  // SetTransform): keep only the fields the program reads, to save memory. It must keep
  // metadata.name, metadata.namespace and metadata.resourceVersion. Runs on the reflector's thread.
  std::function<nlohmann::json(nlohmann::json&&)> transform{};
};

// A transform that drops metadata.managedFields (often the largest part of a small object).
nlohmann::json DropManagedFields(nlohmann::json&& object);

// What the metrics callback is told.
enum class ReflectorEvent {
  kListed,        // a (re)list completed and the store was replaced
  kRelist,        // a relist was started because the watch answered 410 Gone
  kWatchStarted,  // a watch request is being opened
  kWatchEnded,    // the server ended a watch normally (timeoutSeconds)
  kWatchError,    // a watch or list failed with a non-410 error; backing off
};
absl::string_view ReflectorEventName(ReflectorEvent event);

class Reflector {
 public:
  Reflector(Client* client, Store* store, ReflectorOptions options);
  ~Reflector();  // Stop()s
  Reflector(const Reflector&) = delete;
  Reflector& operator=(const Reflector&) = delete;

  // Register before Run/Start.
  void AddEventHandler(ResourceEventHandler handler);
  void SetMetricsCallback(std::function<void(ReflectorEvent, const absl::Status&)> callback);

  // Runs until `stop` is requested.
  void Run(std::stop_token stop);
  // Run() on an owned thread; Stop() requests stop and joins (idempotent).
  void Start();
  void Stop();

  bool HasSynced() const;
  // Waits (real time) until the first list has been applied; false on timeout.
  bool WaitForSync(absl::Duration timeout) const;
  std::string LastResourceVersion() const;

  int64_t lists() const { return lists_.load(); }
  // Lists after the first one (after 410s, or after failed first attempts' recovery).
  int64_t relists() const { return std::max<int64_t>(0, lists_.load() - 1); }
  // Watches opened after the first one.
  int64_t watch_restarts() const { return std::max<int64_t>(0, watches_.load() - 1); }
  int64_t relists_after_gone() const { return gone_relists_.load(); }
  int64_t watches_started() const { return watches_.load(); }
  int64_t watch_errors() const { return watch_errors_.load(); }
  // The timeoutSeconds of the most recent watch request.
  int last_watch_timeout_seconds() const { return last_timeout_.load(); }

 private:
  absl::Status ListAndSync(bool consistent, std::stop_token stop);
  absl::Status WatchOnce(std::stop_token stop, bool* saw_events);
  absl::Status HandleEvent(WatchEvent&& event);
  nlohmann::json Transform(nlohmann::json&& object) const;
  void Emit(ReflectorEvent event, const absl::Status& status);
  void SetResourceVersion(const std::string& rv);
  int PickTimeoutSeconds();

  Client* const client_;
  Store* const store_;
  const ReflectorOptions options_;
  std::vector<ResourceEventHandler> handlers_;
  std::function<void(ReflectorEvent, const absl::Status&)> metrics_{};
  uint64_t rng_state_;

  mutable absl::Mutex mu_;
  std::string resource_version_ ABSL_GUARDED_BY(mu_);
  bool synced_ ABSL_GUARDED_BY(mu_) = false;

  std::atomic<int64_t> lists_{0};
  std::atomic<int64_t> gone_relists_{0};
  std::atomic<int64_t> watches_{0};
  std::atomic<int64_t> watch_errors_{0};
  std::atomic<int> last_timeout_{0};
  std::jthread thread_;
};

// Handlers that turn cache changes into workqueue keys (see workqueue.h).
class WorkQueue;
// Enqueues the object's own key on add/update/delete.
ResourceEventHandler EnqueueObjectHandler(WorkQueue* queue);
// Enqueues the key of the controller owner (same namespace) whose kind is `owner_kind`.
ResourceEventHandler EnqueueControllerOwnerHandler(WorkQueue* queue, std::string owner_kind);

}  // namespace sluice::kube

#endif  // SLUICE_KUBE_REFLECTOR_H_
