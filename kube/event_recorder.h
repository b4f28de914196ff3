// EventRecorder: writes events.k8s.io/v1 Events about objects (reportingController,
// reportingInstance, eventTime, regarding, related, reason, note, type, action).
// Repeats of the same (regarding, reason, note) within `dedup_window` do not create new Events:
// the existing Event's series.count is bumped (2 on the first repeat) with a merge patch, like
// client-go's events library. Outside the window (or if the Event is gone) a new Event is created.
//
// Threading: thread-safe; the cache lock is never held across the HTTP call (two identical
// events recorded at the same instant from two threads may both create an Event).
#ifndef SLUICE_KUBE_EVENT_RECORDER_H_
#define SLUICE_KUBE_EVENT_RECORDER_H_

#include <map>
#include <string>
#include <tuple>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "kube/client.h"
#include "kube/clock.h"
#include "nlohmann/json.hpp"

namespace sluice::kube {

enum class EventType { kNormal, kWarning };

struct EventRecorderOptions {
  std::string reporting_controller{};  // e.g. "example.com/my-operator"
  std::string reporting_instance{};    // e.g. the pod name
  absl::Duration dedup_window = absl::Minutes(10);
  size_t max_cached = 4096;  // oldest entries are dropped beyond this
  Clock* clock = Clock::Real();
};

// Notes longer than this are cut (the API server rejects longer events.k8s.io/v1 notes).
inline constexpr size_t kMaxEventNoteBytes = 1024;

// "2026-11-22T00:00:00.000000Z" (meta/v1 MicroTime).
std::string FormatMicroTime(absl::Time t);
// {apiVersion, kind, namespace, name, uid, resourceVersion} of `object` (empty fields omitted).
nlohmann::json ObjectReferenceTo(const nlohmann::json& object);

class EventRecorder {
 public:
  EventRecorder(Client* client, EventRecorderOptions options);

  // `regarding` is the object itself (or an ObjectReference). `related` may be null.
  absl::Status Record(const nlohmann::json& regarding, EventType type, absl::string_view reason,
                      absl::string_view action, absl::string_view note, const nlohmann::json* related = nullptr);

  int64_t created() const;
  int64_t patched() const;

 private:
  struct Entry {
    std::string ns;
    std::string name;
    int count = 1;
    absl::Time last;
  };
  // (regarding kind/namespace/name, uid, reason, hash of the note, type)
  using Key = std::tuple<std::string, std::string, std::string, size_t, std::string>;

  Client* const client_;
  const EventRecorderOptions options_;
  mutable absl::Mutex mu_;
  std::map<Key, Entry> cache_ ABSL_GUARDED_BY(mu_);
  int64_t created_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t patched_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace sluice::kube

#endif  // SLUICE_KUBE_EVENT_RECORDER_H_
