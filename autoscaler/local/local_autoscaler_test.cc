// The local autoscaler's pure parts: what the policy sees of the supervisor's workers, the direct
// scrape's request, the recent window, the scale-down-on-missing-data check and the logfmt line;
// the stepped consumer's step sizes; the metrics relay against a real HTTP server (an upstream
// that answers, one that does not, a cut and a restore).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>

#include <thread>

#include "absl/strings/match.h"
#include "autoscaler/local/local_autoscaler.h"
#include "autoscaler/local/metrics_relay.h"
#include "autoscaler/local/stepped_consumer.h"
#include "common/http_get.h"

namespace sluice::autoscaler {
namespace {

local::WorkerStatus Worker(int index, local::WorkerState state, bool exited = false, int port = 9000) {
  local::WorkerStatus w;
  w.index = index;
  w.name = "worker-" + std::to_string(index);
  w.state = state;
  w.exited = exited;
  w.metrics_port = port + index;
  return w;
}

TEST_CASE("TargetFromWorkers counts only serving workers, as one pool, with their start times") {
  const absl::Time t0 = absl::FromUnixSeconds(1000);
  std::vector<local::WorkerStatus> ws = {Worker(0, local::WorkerState::kRunning),
                                         Worker(1, local::WorkerState::kDraining),
                                         Worker(2, local::WorkerState::kStopped, true),
                                         Worker(3, local::WorkerState::kRunning, true),  // crashed
                                         Worker(4, local::WorkerState::kRunning)};
  const Target t = TargetFromWorkers(ws, {{"worker-4", t0}});
  CHECK(t.replicas == 2);
  CHECK(t.local == 0);
  REQUIRE(t.workers.size() == 2);
  CHECK(t.workers[0].name == "worker-0");
  CHECK(t.workers[0].created == absl::InfinitePast());
  CHECK(t.workers[1].name == "worker-4");
  CHECK(t.workers[1].created == t0);
  CHECK_FALSE(t.workers[1].local);
  CHECK(TargetFromWorkers({}, {}).replicas == 0);
}

TEST_CASE("ScrapeRequest scrapes the dispatcher and every worker still running, draining ones too") {
  std::vector<local::WorkerStatus> ws = {Worker(0, local::WorkerState::kRunning),
                                         Worker(1, local::WorkerState::kDraining),
                                         Worker(2, local::WorkerState::kStopped, true),
                                         Worker(3, local::WorkerState::kRunning, false, -10)};  // no admin server
  const ObserveRequest r = ScrapeRequest("local", "demo", "http://127.0.0.1:7000", ws, "127.0.0.1");
  CHECK(r.ns == "local");
  CHECK(r.name == "demo");
  CHECK(r.dispatcher_metrics_url == "http://127.0.0.1:7000");
  CHECK_FALSE(r.prometheus_url.has_value());
  REQUIRE(r.worker_metrics_urls.size() == 2);
  CHECK(r.worker_metrics_urls.at("worker-0") == "http://127.0.0.1:9000");
  CHECK(r.worker_metrics_urls.at("worker-1") == "http://127.0.0.1:9001");
}

TEST_CASE("MergeRecent adds the short window's rates and keeps the long window's") {
  Signals w;
  w.window = absl::Seconds(12);
  w.stall_ratio = Measurement::Of(0.1);
  w.demand = Measurement::Of(100);
  Signals r;
  r.window = absl::Seconds(4);
  r.stall_ratio = Measurement::Of(0.5);
  r.demand = Measurement::Of(300);
  r.supply = Measurement::Of(310);
  r.worker_cpu = Measurement::Missing("no series");
  w.workers = Measurement::Of(2);
  r.workers = Measurement::Of(3);  // one started within the long window: the recent rates cover it
  const Signals m = MergeRecent(w, r);
  CHECK(m.window == absl::Seconds(12));
  CHECK(*m.stall_ratio == Approx(0.1));
  CHECK(*m.demand == Approx(100));
  CHECK(m.recent_window == absl::Seconds(4));
  CHECK(*m.recent_stall_ratio == Approx(0.5));
  CHECK(*m.recent_demand == Approx(300));
  CHECK(*m.recent_supply == Approx(310));
  CHECK_FALSE(m.recent_worker_cpu.known());
  CHECK(m.recent_worker_cpu.missing == "no series");
  CHECK(*m.workers == Approx(2));
  CHECK(*m.recent_workers == Approx(3));
}

TEST_CASE("IsScaleDownOnMissingData flags a removal made without the data, never other decisions") {
  Decision d;
  d.direction = Direction::kDown;
  d.arithmetic.stall_ratio = 0.01;
  d.arithmetic.demand = 50;
  CHECK_FALSE(IsScaleDownOnMissingData(d));
  d.missing = {"demand: no series"};
  CHECK(IsScaleDownOnMissingData(d));
  d.missing.clear();
  d.arithmetic.stall_ratio.reset();
  CHECK(IsScaleDownOnMissingData(d));
  d.reasons.push_back({Reason::kIdle, "idle"});
  d.arithmetic.stall_ratio.reset();
  CHECK_FALSE(IsScaleDownOnMissingData(d));  // the trainers are known to consume nothing
  Decision up;
  up.direction = Direction::kUp;
  up.holding = true;
  CHECK_FALSE(IsScaleDownOnMissingData(up));
}

TEST_CASE("LocalPolicy makes one pool and carries the worker's CPU limit") {
  PolicyConfig p;
  p.placement.policy = Placement::kHybrid;
  p.target_stall_ratio = 0.07;
  const PolicyConfig l = LocalPolicy(p, 0.25);
  CHECK(l.placement.policy == Placement::kRemoteOnly);
  CHECK(l.placement.worker_cpus == Approx(0.25));
  CHECK(l.target_stall_ratio == Approx(0.07));
}

TEST_CASE("DecisionLogfmt explains a decision in one logfmt line") {
  LocalDecision d;
  d.number = 7;
  d.workers_before = 1;
  d.workers_after = 3;
  d.signals.stall_ratio = Measurement::Of(0.42);
  d.signals.demand = Measurement::Of(210.5);
  d.signals.supply = Measurement::Missing("no series");
  d.decision.direction = Direction::kUp;
  d.decision.act = true;
  d.decision.replicas = 3;
  d.decision.arithmetic.needed_exact = 2.6;
  d.decision.arithmetic.capacity_per_worker = 120;
  d.decision.arithmetic.capacity_source = "saturated";
  d.decision.reasons = {{Reason::kScaledUp, "1 -> 3 workers"}};
  d.added = {"worker-1", "worker-2"};
  d.source_errors = {"GET http://x/metrics: \"refused\""};
  const std::string line = DecisionLogfmt(d);
  INFO(line);
  CHECK(absl::StartsWith(line, "msg=decision n=7 workers=1->3 direction=up acted=true reason=ScaledUp"));
  CHECK(absl::StrContains(line, " stall=0.42 "));
  CHECK(absl::StrContains(line, " demand=210.5 "));
  CHECK(absl::StrContains(line, " supply=unknown "));
  CHECK(absl::StrContains(line, " needed=2.6 "));
  CHECK(absl::StrContains(line, " capacity_source=saturated "));
  CHECK(absl::StrContains(line, " added=worker-1,worker-2"));
  CHECK(absl::StrContains(line, "source_error=\"GET http://x/metrics: \\\"refused\\\"\""));
  CHECK(absl::StrContains(line, "why=\"ScaledUp: 1 -> 3 workers\""));
  CHECK(line.find('\n') == std::string::npos);

  LocalDecision held;
  held.decision.holding = true;
  held.decision.missing = {"demand: the dispatcher's /metrics did not answer"};
  held.decision.reasons = {{Reason::kHeldOnMissingData, "cannot size"}};
  const std::string hl = DecisionLogfmt(held);
  CHECK(absl::StrContains(hl, "reason=HeldOnMissingData"));
  CHECK(absl::StrContains(hl, " holding=true"));
  CHECK(absl::StrContains(hl, "missing=\"demand: the dispatcher's /metrics did not answer\""));
  CHECK(absl::StrContains(hl, "stall=unknown"));
}

TEST_CASE("ElementsPerStep keeps each step at least 5 ms, within [1, 64]") {
  CHECK(ElementsPerStep(absl::Milliseconds(10)) == 1);
  CHECK(ElementsPerStep(absl::Milliseconds(5)) == 1);
  CHECK(ElementsPerStep(absl::Milliseconds(2)) == 3);
  CHECK(ElementsPerStep(absl::Microseconds(500)) == 10);
  CHECK(ElementsPerStep(absl::Microseconds(1)) == 64);
  CHECK(ElementsPerStep(absl::ZeroDuration()) == 64);
}

// A one-shot HTTP server answering every request with `body` (status 200), on a thread.
class TinyServer {
 public:
  explicit TinyServer(std::string body) : body_(std::move(body)) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0);
    REQUIRE(::listen(fd_, 8) == 0);
    socklen_t len = sizeof(a);
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    thread_ = std::thread([this] {
      while (true) {
        const int c = ::accept(fd_, nullptr, nullptr);
        if (c < 0) return;
        char buf[4096];
        std::string req;
        while (req.find("\r\n\r\n") == std::string::npos) {
          const ssize_t n = ::recv(c, buf, sizeof(buf), 0);
          if (n <= 0) break;
          req.append(buf, static_cast<size_t>(n));
        }
        const std::string answer = "HTTP/1.0 200 OK\r\nContent-Length: " + std::to_string(body_.size()) +
                                   "\r\n\r\n" + body_;
        (void)::send(c, answer.data(), answer.size(), MSG_NOSIGNAL);
        ::close(c);
      }
    });
  }
  ~TinyServer() {
    ::shutdown(fd_, SHUT_RDWR);
    ::close(fd_);
    thread_.join();
  }
  int port() const { return port_; }

 private:
  std::string body_;
  int fd_ = -1;
  int port_ = 0;
  std::thread thread_;
};

TEST_CASE("MetricsRelay relays GETs, refuses connections while cut and relays again once restored") {
  TinyServer upstream("sluice_up 1\n");
  auto relay = MetricsRelay::Start("127.0.0.1", upstream.port());
  REQUIRE(relay.ok());
  CHECK(absl::StartsWith((*relay)->url(), "http://127.0.0.1:"));
  auto got = HttpGet("127.0.0.1", (*relay)->port(), "/metrics", absl::Seconds(5));
  REQUIRE(got.ok());
  CHECK(got->status == 200);
  CHECK(got->body == "sluice_up 1\n");

  REQUIRE((*relay)->SetAvailable(false).ok());
  CHECK_FALSE((*relay)->available());
  auto cut = HttpGet("127.0.0.1", (*relay)->port(), "/metrics", absl::Seconds(5));
  REQUIRE_FALSE(cut.ok());
  CHECK(absl::IsUnavailable(cut.status()));

  REQUIRE((*relay)->SetAvailable(true).ok());
  auto again = HttpGet("127.0.0.1", (*relay)->port(), "/metrics", absl::Seconds(5));
  REQUIRE(again.ok());
  CHECK(again->body == "sluice_up 1\n");
}

TEST_CASE("MetricsRelay answers 502 when the upstream is down, 405 to other methods") {
  int dead_port = 0;
  {
    TinyServer gone("x");
    dead_port = gone.port();
  }
  auto relay = MetricsRelay::Start("127.0.0.1", dead_port);
  REQUIRE(relay.ok());
  auto got = HttpGet("127.0.0.1", (*relay)->port(), "/metrics", absl::Seconds(5));
  REQUIRE(got.ok());
  CHECK(got->status == 502);

  // A POST (malformed for a metrics endpoint) is refused.
  const int c = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<uint16_t>((*relay)->port()));
  REQUIRE(::connect(c, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0);
  const std::string req = "POST /metrics HTTP/1.0\r\n\r\n";
  REQUIRE(::send(c, req.data(), req.size(), 0) == static_cast<ssize_t>(req.size()));
  char buf[256] = {};
  const ssize_t n = ::recv(c, buf, sizeof(buf) - 1, 0);
  ::close(c);
  REQUIRE(n > 0);
  CHECK(absl::StartsWith(buf, "HTTP/1.0 405"));
}

}  // namespace
}  // namespace sluice::autoscaler
