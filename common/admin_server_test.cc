#include "common/admin_server.h"

#include <arpa/inet.h>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>

#include "prometheus/counter.h"

namespace sluice {
namespace {

// A minimal HTTP/1.1 GET over loopback; returns the whole response.
std::string HttpGet(int port, const std::string& path) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0);
  std::string req = "GET " + path + " HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n";
  REQUIRE(::write(fd, req.data(), req.size()) == static_cast<ssize_t>(req.size()));
  std::string out;
  char buf[4096];
  ssize_t n;
  while ((n = ::read(fd, buf, sizeof(buf))) > 0) out.append(buf, static_cast<size_t>(n));
  ::close(fd);
  return out;
}

TEST_CASE("the admin server serves metrics, health and readiness") {
  auto registry = std::make_shared<prometheus::Registry>();
  auto& family = prometheus::BuildCounter().Name("sluice_test_events_total").Help("test events").Register(*registry);
  family.Add({{"kind", "a"}}).Increment(3);
  auto server = AdminServer::Start("127.0.0.1:0", registry);
  REQUIRE(server.ok());
  int port = (*server)->port();
  REQUIRE(port > 0);
  CHECK_THAT(HttpGet(port, "/healthz"), Catch::StartsWith("HTTP/1.1 200"));
  std::string not_ready = HttpGet(port, "/readyz");
  CHECK_THAT(not_ready, Catch::StartsWith("HTTP/1.1 503"));
  CHECK_THAT(not_ready, Catch::Contains("not ready: starting"));
  (*server)->SetReady(true);
  CHECK_THAT(HttpGet(port, "/readyz"), Catch::StartsWith("HTTP/1.1 200"));
  (*server)->SetReadinessCheck([] { return absl::UnavailableError("dispatcher unreachable"); });
  CHECK_THAT(HttpGet(port, "/readyz"), Catch::Contains("dispatcher unreachable"));
  std::string metrics = HttpGet(port, "/metrics");
  CHECK_THAT(metrics, Catch::Contains("sluice_test_events_total{kind=\"a\"} 3"));
}

TEST_CASE("stopping the admin server releases its port at once") {
  auto registry = std::make_shared<prometheus::Registry>();
  auto first = AdminServer::Start("127.0.0.1:0", registry);
  REQUIRE(first.ok());
  int port = (*first)->port();
  first->reset();
  auto again = AdminServer::Start("127.0.0.1:" + std::to_string(port), registry);
  CHECK(again.ok());
}

TEST_CASE("bad listen addresses are clear errors") {
  auto registry = std::make_shared<prometheus::Registry>();
  auto bad = AdminServer::Start("no-port-here", registry);
  REQUIRE_FALSE(bad.ok());
  CHECK_THAT(std::string(bad.status().message()), Catch::Contains("is not host:port"));
  auto first = AdminServer::Start("127.0.0.1:0", registry);
  REQUIRE(first.ok());
  auto clash = AdminServer::Start("127.0.0.1:" + std::to_string((*first)->port()), registry);
  REQUIRE_FALSE(clash.ok());
  CHECK_THAT(std::string(clash.status().message()), Catch::Contains("port in use"));
}

}  // namespace
}  // namespace sluice
