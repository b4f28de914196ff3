#include "common/http_get.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <thread>

#include "absl/strings/match.h"
#include "common/admin_server.h"
#include "prometheus/counter.h"

namespace sluice {
namespace {

// A loopback listener on a kernel-chosen port that answers one connection with `answer` (raw
// bytes) after reading the request, then closes it.
class OneShotServer {
 public:
  explicit OneShotServer(std::string answer) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    REQUIRE(fd_ >= 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0);
    REQUIRE(::listen(fd_, 1) == 0);
    socklen_t len = sizeof(addr);
    REQUIRE(::getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len) == 0);
    port_ = ntohs(addr.sin_port);
    thread_ = std::thread([this, answer = std::move(answer)] {
      const int c = ::accept(fd_, nullptr, nullptr);
      if (c < 0) return;
      char buf[4096];
      (void)::read(c, buf, sizeof(buf));
      (void)::write(c, answer.data(), answer.size());
      ::close(c);
    });
  }
  ~OneShotServer() {
    ::shutdown(fd_, SHUT_RDWR);
    thread_.join();
    ::close(fd_);
  }
  int port() const { return port_; }

 private:
  int fd_ = -1;
  int port_ = 0;
  std::thread thread_;
};

// A port nothing listens on: bound, then released.
int ClosedPort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  socklen_t len = sizeof(addr);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  ::close(fd);
  return ntohs(addr.sin_port);
}

TEST_CASE("ScrapeMetrics reads a real admin server's /metrics, and HttpGet its probes") {
  auto registry = std::make_shared<prometheus::Registry>();
  auto& family = prometheus::BuildCounter().Name("sluice_test_events_total").Help("Test events (C:\\path)").Register(*registry);
  family.Add({{"kind", "a \"quoted\" \\ value"}}).Increment(3);
  family.Add({{"kind", "b"}}).Increment(4);
  auto server = AdminServer::Start("127.0.0.1:0", registry);
  REQUIRE(server.ok());
  auto samples = ScrapeMetrics("127.0.0.1", (*server)->port());
  INFO(samples.status().ToString());
  REQUIRE(samples.ok());
  CHECK(promtext::SumSamples(*samples, "sluice_test_events_total") == 7);
  CHECK(promtext::SumSamples(*samples, "sluice_test_events_total", {{"kind", "a \"quoted\" \\ value"}}) == 3);
  auto healthz = HttpGet("localhost", (*server)->port(), "/healthz");
  REQUIRE(healthz.ok());
  CHECK(healthz->status == 200);
  auto readyz = HttpGet("127.0.0.1", (*server)->port(), "/readyz");
  REQUIRE(readyz.ok());
  CHECK(readyz->status == 503);
}

TEST_CASE("HttpGet and ScrapeMetrics errors say what went wrong and where") {
  auto bad_host = HttpGet("example.com", 80, "/metrics");
  CHECK(absl::IsInvalidArgument(bad_host.status()));
  CHECK(absl::StrContains(bad_host.status().message(), "example.com"));
  CHECK(absl::IsInvalidArgument(HttpGet("127.0.0.1", 0, "/").status()));
  CHECK(absl::IsInvalidArgument(HttpGet("127.0.0.1", 70000, "/").status()));

  const int closed = ClosedPort();
  auto refused = ScrapeMetrics("127.0.0.1", closed);
  CHECK(absl::IsUnavailable(refused.status()));
  CHECK(absl::StrContains(refused.status().message(), absl::StrCat("127.0.0.1:", closed)));

  {
    OneShotServer server("garbage without a header end");
    auto garbage = HttpGet("127.0.0.1", server.port(), "/metrics");
    CHECK(absl::IsDataLoss(garbage.status()));
  }
  {
    OneShotServer server("HTTP/1.0 404 Not Found\r\n\r\nnope");
    auto not_found = ScrapeMetrics("127.0.0.1", server.port());
    CHECK(absl::IsUnavailable(not_found.status()));
    CHECK(absl::StrContains(not_found.status().message(), "answered 404"));
  }
  {
    OneShotServer server("HTTP/1.0 200 OK\r\n\r\nok 1\nbroken{ 2\n");
    auto malformed = ScrapeMetrics("127.0.0.1", server.port());
    CHECK(absl::IsInvalidArgument(malformed.status()));
    CHECK(absl::StrContains(malformed.status().message(), "/metrics: metrics text line 2"));
  }
  {
    OneShotServer server("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nok 1\n\r\n0\r\n\r\n");
    CHECK(absl::IsDataLoss(ScrapeMetrics("127.0.0.1", server.port()).status()));
  }
}

}  // namespace
}  // namespace sluice
