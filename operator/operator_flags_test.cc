// sluice-operator's command line: defaults, aliases and every malformed value.
#include "operator/operator_flags.h"

#include <catch2/catch.hpp>

#include <string>
#include <vector>

namespace sluice::op {
namespace {

// Parses `args` (without argv[0]); returns CLI11's error text, or "" when parsing succeeded.
std::string Parse(std::vector<std::string> args, OperatorFlags* flags) {
  CLI::App app;
  AddOperatorFlags(app, *flags);
  std::vector<std::string> reversed(args.rbegin(), args.rend());
  try {
    app.parse(reversed);
  } catch (const CLI::ParseError& e) {
    return e.what();
  }
  return "";
}

TEST_CASE("operator flags: defaults are valid and aliases reach the same fields") {
  OperatorFlags defaults;
  CHECK(ValidateOperatorFlags(defaults).ok());
  CHECK(defaults.metrics_address == ":8080");
  CHECK(defaults.health_address == ":8081");
  CHECK(!defaults.leader_elect);
  CHECK(defaults.scale_down_drain_timeout_seconds == 120);

  OperatorFlags f;
  REQUIRE(Parse({"--watch-namespace=ml", "--workers=4", "--leader-elect", "--lease-namespace=ops",
                 "--metrics-bind-address=127.0.0.1:0", "--health-probe-bind-address=off", "--kube-qps=0",
                 "--log-level=debug", "--drain-poll-seconds=0.5", "--status-coalesce-seconds=0",
                 "--scale-down-drain-timeout-seconds=30"},
                &f) == "");
  CHECK(f.watch_namespace == "ml");
  CHECK(f.concurrency == 4);
  CHECK(f.leader_elect);
  CHECK(f.lease_namespace == "ops");
  CHECK(f.metrics_address == "127.0.0.1:0");
  CHECK(f.health_address == "off");
  CHECK(f.kube_qps == 0);
  CHECK(f.drain_poll_seconds == 0.5);
  CHECK(f.status_coalesce_seconds == 0);
  CHECK(f.scale_down_drain_timeout_seconds == 30);
  CHECK(ValidateOperatorFlags(f).ok());
  OperatorFlags off;  // 0: scale-downs delete at once
  REQUIRE(Parse({"--scale-down-drain-timeout-seconds=0"}, &off) == "");
  CHECK(ValidateOperatorFlags(off).ok());

  OperatorFlags g;
  REQUIRE(Parse({"--leader-elect=false", "--namespace", "a", "--concurrency", "3"}, &g) == "");
  CHECK(!g.leader_elect);
  CHECK(g.watch_namespace == "a");
  CHECK(g.concurrency == 3);
}

TEST_CASE("operator flags: CLI11 rejects out-of-range numbers") {
  for (const std::vector<std::string>& args : std::vector<std::vector<std::string>>{
           {"--concurrency=0"}, {"--concurrency=65"}, {"--kube-qps=-1"}, {"--drain-timeout-seconds=0"},
           {"--lease-duration-seconds=-3"}, {"--resync-seconds=abc"}, {"--status-coalesce-seconds=-1"},
           {"--scale-down-drain-timeout-seconds=-1"}, {"--scale-down-drain-timeout-seconds=soon"},
           {"--no-such-flag"}}) {
    OperatorFlags f;
    INFO(args[0]);
    CHECK(Parse(args, &f) != "");
  }
}

TEST_CASE("operator flags: cross-flag checks name the flags") {
  auto error = [](OperatorFlags f) { return std::string(ValidateOperatorFlags(f).message()); };
  OperatorFlags f;
  f.log_level = "verbose";
  CHECK(error(f).find("--log-level 'verbose'") != std::string::npos);

  f = OperatorFlags();
  f.dispatcher_tls_cert = "c.pem";
  CHECK(error(f).find("--dispatcher-tls-key") != std::string::npos);
  f.dispatcher_tls_key = "k.pem";
  CHECK(error(f).find("--dispatcher-tls-ca") != std::string::npos);
  f.dispatcher_tls_ca = "ca.pem";
  CHECK(error(f).empty());

  f = OperatorFlags();
  f.leader_elect = true;
  f.renew_deadline_seconds = 15;
  CHECK(error(f).find("--renew-deadline-seconds (15) must be less than --lease-duration-seconds (15)") !=
        std::string::npos);
  f.renew_deadline_seconds = 2;
  CHECK(error(f).find("--retry-period-seconds (2) must be less than --renew-deadline-seconds (2)") !=
        std::string::npos);
  f.leader_elect = false;  // the lease timing only matters with leader election
  CHECK(error(f).empty());

  f = OperatorFlags();
  f.drain_poll_seconds = 700;
  CHECK(error(f).find("--drain-poll-seconds (700)") != std::string::npos);
  f = OperatorFlags();
  f.drain_poll_seconds = 60;
  f.scale_down_drain_timeout_seconds = 30;
  CHECK(error(f).find("--drain-poll-seconds (60) must not exceed --scale-down-drain-timeout-seconds (30)") !=
        std::string::npos);
  f.scale_down_drain_timeout_seconds = 0;  // off: the poll interval does not matter to it
  CHECK(error(f).empty());

  f = OperatorFlags();
  f.metrics_address = "localhost";
  CHECK(error(f).find("--metrics-address 'localhost' is not host:port") != std::string::npos);
  f = OperatorFlags();
  f.health_address = ":99999";
  CHECK(error(f).find("--health-address ':99999'") != std::string::npos);
}

TEST_CASE("operator flags: listen addresses") {
  CHECK(**ParseListenAddress(":8080", "--x") == "0.0.0.0:8080");
  CHECK(**ParseListenAddress("127.0.0.1:0", "--x") == "127.0.0.1:0");
  CHECK(!ParseListenAddress("off", "--x")->has_value());
  for (const char* bad : {"", "8080", ":", ":-1", "host:http", "a:65536"}) {
    INFO(bad);
    absl::StatusOr<std::optional<std::string>> parsed = ParseListenAddress(bad, "--metrics-address");
    REQUIRE(!parsed.ok());
    CHECK(std::string(parsed.status().message()).find("--metrics-address") != std::string::npos);
  }
}

}  // namespace
}  // namespace sluice::op
