// Client: a Kubernetes REST client over cpprestsdk for any group/version/resource, with JSON
// (nlohmann::json) bodies, a client-side token-bucket rate limit, bounded retries with jittered
// exponential backoff (429 honouring Retry-After for every verb; 5xx and broken connections for
// idempotent verbs only), bearer tokens from a TokenSource (refreshed once on 401), TLS with
// custom CA / client certificates / insecure-skip-verify, and plain http:// servers.
//
// Every error is an absl::Status (see errors.h for the mapping); no exception escapes.
//
// Threading: all methods are thread-safe and may be called concurrently. Calls block the calling
// thread (never call them from a cpprestsdk/pplx task continuation). Watch() blocks until the
// stream ends or `stop` is requested; a stop request cancels the in-flight HTTP request. The
// Client must outlive every call in progress.
#ifndef SLUICE_KUBE_CLIENT_H_
#define SLUICE_KUBE_CLIENT_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <stop_token>
#include <string>
#include <string_view>

#include "absl/strings/string_view.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "kube/clock.h"
#include "kube/config.h"
#include "kube/credentials.h"
#include "kube/rate_limit.h"
#include "kube/resource.h"
#include "nlohmann/json.hpp"

namespace sluice::kube {

struct ClientOptions {
  double qps = 50;  // <= 0 disables the client-side limit
  int burst = 100;
  RetryOptions retry{};
  absl::Duration request_timeout = absl::Seconds(30);
  std::string user_agent = "sluice-kube/0.1";
  Clock* clock = Clock::Real();  // rate limiting and retry sleeps
  // Overrides the token source derived from the Config (MakeTokenSource).
  std::shared_ptr<TokenSource> token_source{};
};

struct HttpResponse {
  int status = 0;
  std::string body{};
  std::string content_type{};
  std::string retry_after{};
};

struct WatchEvent {
  enum class Type { kAdded, kModified, kDeleted, kBookmark, kError };
  Type type = Type::kAdded;
  nlohmann::json object{};
};
absl::string_view WatchEventTypeName(WatchEvent::Type type);

// Parses one line of a watch stream ({"type": ..., "object": ...}). Pure.
absl::StatusOr<WatchEvent> ParseWatchLine(absl::string_view line);

// Splits a byte stream into '\n'-terminated lines, keeping partial lines across Feed calls.
class LineSplitter {
 public:
  // Appends `data`; calls `on_line` for each complete line (without the newline, empty lines
  // skipped). Stops early and returns the first non-OK status `on_line` returns.
  absl::Status Feed(absl::string_view data, const std::function<absl::Status(absl::string_view)>& on_line);
  // Whatever follows the last newline (a final unterminated line at end of stream).
  std::string TakeRemainder();

 private:
  std::string pending_;
};

class Client {
 public:
  static absl::StatusOr<std::unique_ptr<Client>> Create(const Config& config, ClientOptions options = {});
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  const Config& config() const;

  // One HTTP exchange with rate limiting, auth and retries. Non-2xx answers are returned as
  // responses (not errors); only transport failures and cancellation are errors.
  absl::StatusOr<HttpResponse> Send(absl::string_view method, absl::string_view path_and_query,
                                    std::optional<std::string> body = std::nullopt,
                                    absl::string_view content_type = "application/json",
                                    std::stop_token stop = {});
  // Send + JSON decoding; non-2xx answers become absl::Status via errors.h.
  absl::StatusOr<nlohmann::json> RequestJson(absl::string_view method, absl::string_view path,
                                             const QueryParams& query = {},
                                             const nlohmann::json* body = nullptr,
                                             absl::string_view content_type = "application/json",
                                             std::stop_token stop = {});

  absl::StatusOr<nlohmann::json> Get(const ResourceRef& ref, absl::string_view ns, absl::string_view name,
                                     absl::string_view subresource = "");
  // One page (honours limit/continue in `options`).
  absl::StatusOr<nlohmann::json> List(const ResourceRef& ref, absl::string_view ns, const ListOptions& options = {},
                                      std::stop_token stop = {});
  // Follows `continue` until the list is complete; returns a list object whose items are all pages'
  // items and whose metadata.resourceVersion is the snapshot's. If a continue token expires (410),
  // restarts once with a consistent (resourceVersion unset) list.
  // Each page's body is read as it arrives, one item at a time (kube/list_reader.h), so neither a
  // page's text nor the page as a JSON tree is held whole; `item_transform`, when set, is applied
  // to each item as soon as it is read (so that a large list never exists untransformed: what is
  // held is the transformed items). Bodies that are not a list (not JSON, "items" not an array, an
  // item without metadata.name) are DataLoss errors naming the problem.
  absl::StatusOr<nlohmann::json> ListAll(const ResourceRef& ref, absl::string_view ns, const ListOptions& options = {},
                                         std::stop_token stop = {},
                                         const std::function<nlohmann::json(nlohmann::json&&)>& item_transform = {});
  // POST to the collection, or to an object's subresource when `subresource_of` names the object
  // (e.g. pods/<name>/binding: Create(Pods(), ns, binding, {}, "a-worker-0", "binding")).
  absl::StatusOr<nlohmann::json> Create(const ResourceRef& ref, absl::string_view ns, const nlohmann::json& body,
                                        const WriteOptions& options = {}, absl::string_view subresource_of = "",
                                        absl::string_view subresource = "");
  // PUT (resourceVersion in the body guards against lost updates: stale -> IsConflict).
  absl::StatusOr<nlohmann::json> Replace(const ResourceRef& ref, absl::string_view ns, absl::string_view name,
                                         const nlohmann::json& body, const WriteOptions& options = {},
                                         absl::string_view subresource = "");
  absl::StatusOr<nlohmann::json> Patch(const ResourceRef& ref, absl::string_view ns, absl::string_view name,
                                       PatchType type, const nlohmann::json& patch,
                                       const WriteOptions& options = {}, absl::string_view subresource = "");
  // Returns the object as the server answered (a Status for immediate deletion, or the object
  // with deletionTimestamp set when finalizers hold it).
  absl::StatusOr<nlohmann::json> Delete(const ResourceRef& ref, absl::string_view ns, absl::string_view name,
                                        const DeleteOptions& options = {});

  // Opens a watch and calls `on_event` for each ADDED/MODIFIED/DELETED/BOOKMARK event as it
  // arrives. Returns OK when the server ends the stream (timeoutSeconds), the Kubernetes error of an
  // ERROR event or a non-200 answer (410 -> IsGone), Cancelled when `stop` is requested, or the
  // first error `on_event` returns.
  absl::Status Watch(const ResourceRef& ref, absl::string_view ns, const WatchOptions& options,
                     const std::function<absl::Status(WatchEvent&&)>& on_event, std::stop_token stop = {});

  // Requests sent over the wire (including retries).
  int64_t requests_sent() const;

 private:
  struct Impl;
  explicit Client(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace sluice::kube

#endif  // SLUICE_KUBE_CLIENT_H_
