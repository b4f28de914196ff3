#include "kube/reflector.h"

#include <random>

#include "absl/strings/str_cat.h"
#include "kube/errors.h"
#include "kube/packed_object.h"
#include "kube/workqueue.h"

namespace sluice::kube {

using nlohmann::json;

absl::string_view ReflectorEventName(ReflectorEvent event) {
  switch (event) {
    case ReflectorEvent::kListed: return "listed";
    case ReflectorEvent::kRelist: return "relist";
    case ReflectorEvent::kWatchStarted: return "watch_started";
    case ReflectorEvent::kWatchEnded: return "watch_ended";
    case ReflectorEvent::kWatchError: return "watch_error";
  }
  return "?";
}

Reflector::Reflector(Client* client, Store* store, ReflectorOptions options)
    : client_(client), store_(store), options_(std::move(options)),
      rng_state_(options_.seed != 0 ? options_.seed : std::random_device{}()) {}

Reflector::~Reflector() { Stop(); }

void Reflector::AddEventHandler(ResourceEventHandler handler) { handlers_.push_back(std::move(handler)); }

void Reflector::SetMetricsCallback(std::function<void(ReflectorEvent, const absl::Status&)> callback) {
  metrics_ = std::move(callback);
}

void Reflector::Start() {
  if (thread_.joinable()) return;
  thread_ = std::jthread([this](std::stop_token stop) { Run(stop); });
}

void Reflector::Stop() {
  if (!thread_.joinable()) return;
  thread_.request_stop();
  thread_.join();
}

bool Reflector::HasSynced() const {
  absl::MutexLock lock(&mu_);
  return synced_;
}

bool Reflector::WaitForSync(absl::Duration timeout) const {
  absl::MutexLock lock(&mu_);
  auto synced = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return synced_; };
  return mu_.AwaitWithTimeout(absl::Condition(&synced), timeout);
}

std::string Reflector::LastResourceVersion() const {
  absl::MutexLock lock(&mu_);
  return resource_version_;
}

void Reflector::SetResourceVersion(const std::string& rv) {
  if (rv.empty()) return;
  absl::MutexLock lock(&mu_);
  resource_version_ = rv;
}

void Reflector::Emit(ReflectorEvent event, const absl::Status& status) {
  if (metrics_) metrics_(event, status);
}

int Reflector::PickTimeoutSeconds() {
  int64_t lo = absl::ToInt64Seconds(options_.min_watch_timeout);
  int64_t hi = std::max(lo, absl::ToInt64Seconds(options_.max_watch_timeout));
  std::mt19937_64 rng(rng_state_);
  rng_state_ = rng();
  int64_t value = std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  return static_cast<int>(std::max<int64_t>(value, 1));
}

absl::Status Reflector::ListAndSync(bool consistent, std::stop_token stop) {
  ListOptions list;
  list.label_selector = options_.label_selector;
  list.field_selector = options_.field_selector;
  list.limit = options_.page_size;
  if (!consistent) list.resource_version.emplace("0");
  // Items are transformed page by page, so a large list never exists untransformed all at once.
  auto transform = [this](json&& item) { return Transform(std::move(item)); };
  auto result = client_->ListAll(options_.resource, options_.ns, list, stop, transform);
  if (!result.ok() && !consistent && !absl::IsCancelled(result.status())) {
    // resourceVersion=0 may be refused (or too old for this server): ask for a consistent list.
    list.resource_version.reset();
    result = client_->ListAll(options_.resource, options_.ns, list, stop, transform);
  }
  if (!result.ok()) return result.status();
  std::vector<ObjectPtr> objects;
  if (result->contains("items") && (*result)["items"].is_array()) {
    for (json& item : (*result)["items"]) objects.push_back(std::make_shared<const json>(std::move(item)));
  }
  std::string rv;
  if (result->contains("metadata") && (*result)["metadata"].is_object() &&
      (*result)["metadata"].contains("resourceVersion") && (*result)["metadata"]["resourceVersion"].is_string()) {
    rv = (*result)["metadata"]["resourceVersion"].get<std::string>();
  }
  ReplaceDelta delta = store_->Replace(std::move(objects));
  {
    absl::MutexLock lock(&mu_);
    resource_version_ = rv;
    synced_ = true;
  }
  ++lists_;
  for (const ResourceEventHandler& h : handlers_) {
    for (const ObjectPtr& o : delta.deleted) if (h.on_delete) h.on_delete(o);
    for (const ObjectPtr& o : delta.added) if (h.on_add) h.on_add(o);
    for (const auto& [old_object, new_object] : delta.updated) if (h.on_update) h.on_update(old_object, new_object);
  }
  Emit(ReflectorEvent::kListed, absl::OkStatus());
  return absl::OkStatus();
}

json Reflector::Transform(json&& object) const {
  if (!options_.transform) return std::move(object);
  return options_.transform(std::move(object));
}

json DropManagedFields(json&& object) {
  if (object.is_object()) {
    auto meta = object.find("metadata");
    if (meta != object.end() && meta->is_object()) meta->erase("managedFields");
  }
  return std::move(object);
}

absl::Status Reflector::HandleEvent(WatchEvent&& event) {
  std::string rv = ResourceVersionOf(event.object);
  switch (event.type) {
    case WatchEvent::Type::kBookmark:
      break;
    case WatchEvent::Type::kAdded:
    case WatchEvent::Type::kModified: {
      auto object = std::make_shared<const json>(Transform(std::move(event.object)));
      ObjectPtr previous = store_->Upsert(object);
      for (const ResourceEventHandler& h : handlers_) {
        if (previous == nullptr) {
          if (h.on_add) h.on_add(object);
        } else if (h.on_update) {
          h.on_update(previous, object);
        }
      }
      break;
    }
    case WatchEvent::Type::kDeleted: {
      auto object = std::make_shared<const json>(Transform(std::move(event.object)));
      ObjectPtr previous = store_->Remove(ObjectKey(*object));
      if (previous != nullptr) {
        for (const ResourceEventHandler& h : handlers_) if (h.on_delete) h.on_delete(object);
      }
      break;
    }
    case WatchEvent::Type::kError:
      return absl::InternalError("unexpected ERROR event");  // Client::Watch turns these into statuses
  }
  SetResourceVersion(rv);
  return absl::OkStatus();
}

absl::Status Reflector::WatchOnce(std::stop_token stop, bool* saw_events) {
  WatchOptions watch;
  watch.label_selector = options_.label_selector;
  watch.field_selector = options_.field_selector;
  watch.resource_version = LastResourceVersion();
  watch.allow_bookmarks = true;
  watch.timeout_seconds = PickTimeoutSeconds();
  last_timeout_ = watch.timeout_seconds;
  ++watches_;
  Emit(ReflectorEvent::kWatchStarted, absl::OkStatus());
  return client_->Watch(
      options_.resource, options_.ns, watch,
      [this, saw_events](WatchEvent&& event) {
        *saw_events = true;
        return HandleEvent(std::move(event));
      },
      stop);
}

void Reflector::Run(std::stop_token stop) {
  Backoff backoff(options_.backoff, rng_state_ ^ 0x9e3779b97f4a7c15ULL);
  bool need_list = true;
  bool consistent = false;
  while (!stop.stop_requested()) {
    if (need_list) {
      absl::Status status = ListAndSync(consistent, stop);
      if (stop.stop_requested() || absl::IsCancelled(status)) break;
      if (!status.ok()) {
        ++watch_errors_;
        Emit(ReflectorEvent::kWatchError, status);
        // An expired resourceVersion cannot come back: go consistent next time.
        if (IsGone(status)) consistent = true;
        if (!options_.clock->SleepFor(backoff.Next(), stop)) break;
        continue;
      }
      need_list = false;
      consistent = false;
    }
    bool saw_events = false;
    absl::Status status = WatchOnce(stop, &saw_events);
    if (stop.stop_requested() || absl::IsCancelled(status)) break;
    if (status.ok()) {
      backoff.Reset();
      Emit(ReflectorEvent::kWatchEnded, status);
      continue;
    }
    if (IsGone(status)) {
      // Our resourceVersion was compacted away: relist (consistently) and diff.
      ++gone_relists_;
      Emit(ReflectorEvent::kRelist, status);
      need_list = true;
      consistent = true;
      backoff.Reset();
      continue;
    }
    if (saw_events) backoff.Reset();
    ++watch_errors_;
    Emit(ReflectorEvent::kWatchError, status);
    if (!options_.clock->SleepFor(backoff.Next(), stop)) break;
  }
}

ResourceEventHandler EnqueueObjectHandler(WorkQueue* queue) {
  ResourceEventHandler handler;
  handler.on_add = [queue](const ObjectPtr& o) { queue->Add(ObjectKey(*o)); };
  handler.on_update = [queue](const ObjectPtr&, const ObjectPtr& o) { queue->Add(ObjectKey(*o)); };
  handler.on_delete = [queue](const ObjectPtr& o) { queue->Add(ObjectKey(*o)); };
  return handler;
}

ResourceEventHandler EnqueueControllerOwnerHandler(WorkQueue* queue, std::string owner_kind) {
  auto enqueue = [queue, owner_kind](const ObjectPtr& o) {
    const json& object = *o;
    if (IsPacked(object)) {
      std::optional<PackedController> ref = PackedControllerOf(object);
      if (!ref.has_value() || ref->kind != owner_kind || ref->name.empty()) return;
      std::string ns = NamespaceOf(object);
      queue->Add(ns.empty() ? ref->name : absl::StrCat(ns, "/", ref->name));
      return;
    }
    if (!object.contains("metadata") || !object["metadata"].is_object()) return;
    const json& meta = object["metadata"];
    if (!meta.contains("ownerReferences") || !meta["ownerReferences"].is_array()) return;
    for (const json& ref : meta["ownerReferences"]) {
      if (!GetBool(ref, "controller")) continue;
      if (GetString(ref, "kind") != owner_kind) continue;
      std::string ns = NamespaceOf(object);
      std::string name = GetString(ref, "name");
      if (name.empty()) continue;
      queue->Add(ns.empty() ? name : absl::StrCat(ns, "/", name));
    }
  };
  ResourceEventHandler handler;
  handler.on_add = enqueue;
  handler.on_update = [enqueue](const ObjectPtr& old_object, const ObjectPtr& new_object) {
    enqueue(old_object);
    enqueue(new_object);
  };
  handler.on_delete = enqueue;
  return handler;
}

}  // namespace sluice::kube
