// The daemon skeleton with real signals: this binary's threads all block SIGTERM/SIGINT once a
// Daemon exists, so the signals sent here go to the Daemon's own thread.
#include "common/daemon.h"

#include <signal.h>
#include <stdlib.h>

#include <catch2/catch.hpp>

#include "absl/strings/match.h"
#include "common/http_get.h"

namespace sluice {
namespace {

TEST_CASE("Readiness by phase: standby and running are ready, starting and stopping say why not") {
  CHECK(ReadinessOf(DaemonPhase::kRunning, "x").ok());
  CHECK(ReadinessOf(DaemonPhase::kStandby, "x").ok());
  auto starting = ReadinessOf(DaemonPhase::kStarting, "caches not synced");
  CHECK(absl::IsUnavailable(starting));
  CHECK(starting.message() == "caches not synced");
  CHECK(ReadinessOf(DaemonPhase::kStopping, "x").message() == "stopping");
  CHECK(std::string(DaemonPhaseName(DaemonPhase::kStandby)) == "standby");
}

TEST_CASE("ParseLogLevel and DefaultIdentity") {
  CHECK(ParseLogLevel("DEBUG") == log::Level::kDebug);
  CHECK(ParseLogLevel("warning") == log::Level::kWarning);
  CHECK(!ParseLogLevel("verbose").has_value());
  ::setenv("POD_NAME", "sluice-operator-7f9c", 1);
  CHECK(DefaultIdentity("fallback") == "sluice-operator-7f9c");
  ::unsetenv("POD_NAME");
  CHECK(!DefaultIdentity("fallback").empty());  // the host name
}

TEST_CASE("A Daemon serves /metrics and probes, answers /readyz by phase, and stops on SIGTERM") {
  Daemon daemon;
  DaemonAdminOptions admin;
  admin.metrics_address = "127.0.0.1:0";
  admin.health_address = "127.0.0.1:0";  // the same address: one server serves both
  admin.starting_reason = "caches not synced";
  REQUIRE(daemon.ServeAdmin(admin).ok());
  REQUIRE(daemon.metrics_port() > 0);
  CHECK(daemon.health_port() == daemon.metrics_port());
  auto ready = [&](int port) {
    auto r = HttpGet("127.0.0.1", port, "/readyz");
    REQUIRE(r.ok());
    return *r;
  };
  CHECK(ready(daemon.health_port()).status == 503);
  CHECK(absl::StrContains(ready(daemon.health_port()).body, "caches not synced"));
  daemon.SetPhase(DaemonPhase::kStandby);
  CHECK(ready(daemon.health_port()).status == 200);
  daemon.SetPhase(DaemonPhase::kRunning);
  CHECK(ready(daemon.metrics_port()).status == 200);
  CHECK(ScrapeMetrics("127.0.0.1", daemon.metrics_port()).ok());

  CHECK(!daemon.stop_token().stop_requested());
  REQUIRE(::kill(::getpid(), SIGTERM) == 0);  // taken by the Daemon's signal thread, not fatal
  daemon.WaitForStop();
  CHECK(daemon.stop_token().stop_requested());
  daemon.SetPhase(DaemonPhase::kStopping);
  CHECK(ready(daemon.health_port()).status == 503);
  CHECK(daemon.Finish(0) == 0);
  CHECK(daemon.Finish(3) == 3);  // idempotent
}

TEST_CASE("A Daemon may serve probes on a server of their own, and a taken address is an error") {
  Daemon daemon;
  DaemonAdminOptions probes_only;
  probes_only.health_address = "127.0.0.1:0";
  REQUIRE(daemon.ServeAdmin(probes_only).ok());
  CHECK(daemon.metrics_port() == -1);
  REQUIRE(daemon.health_port() > 0);
  auto healthz = HttpGet("127.0.0.1", daemon.health_port(), "/healthz");
  REQUIRE(healthz.ok());
  CHECK(healthz->status == 200);

  Daemon other;
  DaemonAdminOptions taken;
  taken.metrics_address = "127.0.0.1:" + std::to_string(daemon.health_port());
  CHECK(!other.ServeAdmin(taken).ok());
  DaemonAdminOptions taken_health;
  taken_health.metrics_address = "127.0.0.1:0";
  taken_health.health_address = "127.0.0.1:" + std::to_string(daemon.health_port());
  Daemon third;
  CHECK(!third.ServeAdmin(taken_health).ok());

  Daemon none;
  REQUIRE(none.ServeAdmin(DaemonAdminOptions()).ok());
  CHECK(none.metrics_port() == -1);
  CHECK(none.health_port() == -1);
  none.RequestStop();  // stop requested from the daemon itself
  none.WaitForStop();
}

}  // namespace
}  // namespace sluice
