// FixtureServer: a small HTTP/1.1 server on 127.0.0.1 for tests that replays recorded Kubernetes
// API answers (testing/kube-fixtures: exchanges recorded from a real API server, see its README) and
// scripted ones: plain JSON bodies, chunked watch streams (optionally held open until released, to
// prove events arrive live), arbitrary status codes and headers. Every request is recorded for assertions.
//
// Threading: thread-safe. One thread accepts; one thread per connection (keep-alive). Stop()
// (also run by the destructor) closes every socket, releases held streams and joins all threads.
#ifndef SLUICE_KUBE_TESTING_FIXTURE_SERVER_H_
#define SLUICE_KUBE_TESTING_FIXTURE_SERVER_H_

#include <atomic>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "nlohmann/json.hpp"

namespace sluice::kube::testing {

struct RecordedRequest {
  std::string method{};
  std::string path{};
  std::map<std::string, std::string> query{};    // decoded
  std::map<std::string, std::string> headers{};  // names lower-cased
  std::string body{};
  nlohmann::json JsonBody() const;  // null if the body is not JSON
};

struct Reply {
  int status = 200;
  std::string content_type = "application/json";
  std::string body{};
  std::vector<std::pair<std::string, std::string>> headers{};
  bool chunked = false;            // send `lines` as a chunked stream (one chunk per line)
  std::vector<std::string> lines{};  // each sent followed by '\n'
  bool hold_open = false;          // keep the stream open after `lines` until ReleaseHeld()/Stop()

  static Reply Json(int status, const nlohmann::json& body);
  // A meta/v1 Status answer.
  static Reply Status(int code, absl::string_view reason, absl::string_view message);
  static Reply Watch(const std::vector<nlohmann::json>& events, bool hold_open = false);
  // From a fixture exchange's "response" (a body, or "events" for a watch).
  static Reply FromExchange(const nlohmann::json& exchange);
};

using Handler = std::function<std::optional<Reply>(const RecordedRequest&)>;

// A self-signed certificate (valid for 127.0.0.1 and CN) and its key, both PEM, for TLS tests.
struct TestCertificate {
  std::string cert_pem{};
  std::string key_pem{};
};
absl::StatusOr<TestCertificate> MakeSelfSignedCertificate(absl::string_view common_name);

struct TlsOptions {
  TestCertificate server{};
  // When set, clients must present a certificate signed by (or equal to) this PEM; its subject CN
  // is recorded as the "x-client-cn" header of each request.
  std::string client_ca_pem{};
};

// Where the fixtures live: $SLUICE_KUBE_FIXTURES, else the source tree's testing/kube-fixtures.
std::string FixturesDir();
// Loads <FixturesDir>/<name>.json.
absl::StatusOr<nlohmann::json> LoadFixture(absl::string_view name);
// The index-th exchange of a fixture file (aborts the test process on a missing file: fixtures are
// part of the test contract).
nlohmann::json FixtureExchange(absl::string_view name, size_t index);

class FixtureServer {
 public:
  FixtureServer();
  ~FixtureServer();
  FixtureServer(const FixtureServer&) = delete;
  FixtureServer& operator=(const FixtureServer&) = delete;

  absl::Status Start();
  // Serves HTTPS instead of HTTP.
  absl::Status StartTls(const TlsOptions& tls);
  void Stop();
  int port() const { return port_; }
  std::string url() const;  // "http://127.0.0.1:<port>" (or https:// after StartTls)

  // Queues `reply` for the next request with this method and path whose query contains every
  // pair of `query`. Expectations are matched in the order they were added, each used once.
  void Expect(std::string method, std::string path, Reply reply, std::map<std::string, std::string> query = {});
  // Queues a fixture exchange under its recorded method, path and query.
  void ExpectExchange(const nlohmann::json& exchange);
  // Consulted when no expectation matches. Default: 404 Status "no fixture for ...".
  void SetFallback(Handler handler);
  size_t PendingExpectations() const;

  std::vector<RecordedRequest> Requests() const;
  size_t RequestCount() const;
  // Waits (real time) until at least n requests arrived.
  bool WaitForRequests(size_t n, absl::Duration timeout = absl::Seconds(10)) const;
  // Held-open streams being served (counted from before their first byte is sent).
  size_t OpenHeldStreams() const;
  bool WaitForOpenHeldStreams(size_t n, absl::Duration timeout = absl::Seconds(10)) const;
  // Ends every held stream (they finish with the terminating chunk).
  void ReleaseHeld();

 private:
  struct Expectation {
    std::string method;
    std::string path;
    std::map<std::string, std::string> query;
    Reply reply;
  };
  struct Connection;
  void AcceptLoop();
  void ServeConnection(int fd);
  Reply Answer(const RecordedRequest& request);
  bool WriteReply(Connection& conn, const Reply& reply);
  bool WriteChunks(Connection& conn, const std::string& head, const Reply& reply);

  void* ssl_ctx_ = nullptr;  // SSL_CTX*, kept opaque so users need no OpenSSL headers
  int listen_fd_ = -1;
  int port_ = 0;
  std::thread accept_thread_;
  mutable absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t release_generation_ ABSL_GUARDED_BY(mu_) = 0;
  size_t held_open_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<int> connections_ ABSL_GUARDED_BY(mu_);
  std::vector<std::thread> connection_threads_ ABSL_GUARDED_BY(mu_);
  std::vector<Expectation> expectations_ ABSL_GUARDED_BY(mu_);
  Handler fallback_ ABSL_GUARDED_BY(mu_);
  std::vector<RecordedRequest> requests_ ABSL_GUARDED_BY(mu_);
};

}  // namespace sluice::kube::testing

#endif  // SLUICE_KUBE_TESTING_FIXTURE_SERVER_H_
