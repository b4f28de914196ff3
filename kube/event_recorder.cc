#include "kube/event_recorder.h"

#include "absl/hash/hash.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "kube/errors.h"
#include "kube/resource.h"

namespace sluice::kube {

using nlohmann::json;

std::string FormatMicroTime(absl::Time t) {
  return absl::FormatTime("%Y-%m-%dT%H:%M:%E6SZ", t, absl::UTCTimeZone());
}

json ObjectReferenceTo(const json& object) {
  // Already a reference (no metadata): keep it.
  if (object.is_object() && !object.contains("metadata") && object.contains("name")) return object;
  json ref = json::object();
  if (object.contains("apiVersion")) ref["apiVersion"] = object["apiVersion"];
  if (object.contains("kind")) ref["kind"] = object["kind"];
  if (std::string ns = NamespaceOf(object); !ns.empty()) ref["namespace"] = ns;
  if (std::string name = NameOf(object); !name.empty()) ref["name"] = name;
  if (std::string uid = UidOf(object); !uid.empty()) ref["uid"] = uid;
  if (std::string rv = ResourceVersionOf(object); !rv.empty()) ref["resourceVersion"] = rv;
  return ref;
}

EventRecorder::EventRecorder(Client* client, EventRecorderOptions options)
    : client_(client), options_(std::move(options)) {}

int64_t EventRecorder::created() const {
  absl::MutexLock lock(&mu_);
  return created_;
}

int64_t EventRecorder::patched() const {
  absl::MutexLock lock(&mu_);
  return patched_;
}

absl::Status EventRecorder::Record(const json& regarding_object, EventType type, absl::string_view reason,
                                   absl::string_view action, absl::string_view note, const json* related) {
  json regarding = ObjectReferenceTo(regarding_object);
  std::string regarding_ns = GetString(regarding, "namespace");
  std::string regarding_name = GetString(regarding, "name");
  if (regarding_name.empty()) return absl::InvalidArgumentError("event: regarding object has no name");
  if (reason.empty()) return absl::InvalidArgumentError("event: reason is required");
  // The API server limits note to 1 kB.
  std::string note_text(note.substr(0, kMaxEventNoteBytes));
  std::string event_ns = regarding_ns.empty() ? "default" : regarding_ns;
  absl::Time now = options_.clock->Now();
  // The note enters the de-duplication key as a 64-bit hash: notes can be long and the cache large.
  Key key{absl::StrCat(GetString(regarding, "kind"), "/", regarding_ns, "/", regarding_name),
          GetString(regarding, "uid"), std::string(reason), absl::HashOf(note_text),
          type == EventType::kWarning ? "Warning" : "Normal"};

  std::optional<Entry> repeat;
  {
    absl::MutexLock lock(&mu_);
    auto it = cache_.find(key);
    if (it != cache_.end() && now - it->second.last < options_.dedup_window) {
      it->second.count += 1;
      it->second.last = now;
      repeat = it->second;
    }
  }
  if (repeat) {
    json patch = {{"series", {{"count", repeat->count}, {"lastObservedTime", FormatMicroTime(now)}}}};
    auto result = client_->Patch(resources::Events(), repeat->ns, repeat->name, PatchType::kMerge, patch);
    if (result.ok()) {
      absl::MutexLock lock(&mu_);
      ++patched_;
      return absl::OkStatus();
    }
    if (!absl::IsNotFound(result.status())) return result.status();
    // The Event expired or was deleted: start a new one.
  }

  std::string name = absl::StrFormat("%s.%x", regarding_name, absl::ToUnixNanos(now));
  json event = {{"apiVersion", "events.k8s.io/v1"},
                {"kind", "Event"},
                {"metadata", {{"name", name}, {"namespace", event_ns}}},
                {"eventTime", FormatMicroTime(now)},
                {"reportingController", options_.reporting_controller},
                {"reportingInstance", options_.reporting_instance},
                {"action", std::string(action)},
                {"reason", std::string(reason)},
                {"note", note_text},
                {"type", type == EventType::kWarning ? "Warning" : "Normal"},
                {"regarding", regarding}};
  if (related != nullptr) event["related"] = ObjectReferenceTo(*related);
  auto result = client_->Create(resources::Events(), event_ns, event);
  if (!result.ok()) return result.status();
  absl::MutexLock lock(&mu_);
  ++created_;
  if (cache_.size() >= options_.max_cached) {
    // Drop the stalest entry.
    auto oldest = cache_.begin();
    for (auto it = cache_.begin(); it != cache_.end(); ++it) {
      if (it->second.last < oldest->second.last) oldest = it;
    }
    cache_.erase(oldest);
  }
  cache_[key] = Entry{event_ns, name, 1, now};
  return absl::OkStatus();
}

}  // namespace sluice::kube
