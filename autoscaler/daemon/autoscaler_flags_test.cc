// sluice-autoscaler's command line: defaults, the YAML config file and its precedence, every
// malformed flag and config file refused with a message naming it; and the built binary's --help,
// refusals (exit code 2) and logfmt error lines.
#include "autoscaler/daemon/autoscaler_flags.h"

#include <sys/wait.h>

#include <catch2/catch.hpp>

#include <array>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "testing/test_util.h"

namespace sluice::autoscaler {
namespace {

absl::StatusOr<ParsedAutoscalerFlags> Parse(std::vector<std::string> args) { return ParseAutoscalerFlags(args); }

// The error message of parsing `args` (fails the test when they parse).
std::string ErrorOf(std::vector<std::string> args) {
  auto parsed = Parse(args);
  INFO(absl::StrJoin(args, " "));
  REQUIRE_FALSE(parsed.ok());
  return std::string(parsed.status().message());
}

TEST_CASE("defaults", "[flags]") {
  auto parsed = Parse({});
  REQUIRE(parsed.ok());
  const AutoscalerSettings& s = parsed->settings;
  CHECK(parsed->help.empty());
  CHECK(s.period == absl::Seconds(15));
  CHECK(s.status_interval == absl::Seconds(60));
  CHECK(s.keda == AutoscalerSettings::Keda::kAuto);
  CHECK_FALSE(s.global.prometheus_url.has_value());  // direct scrape
  CHECK(s.global.max_signal_age == absl::Minutes(2));
  CHECK(s.prometheus.window == absl::Minutes(1));
  CHECK(s.scrape.window == absl::Minutes(1));
  CHECK(s.metrics_address == "0.0.0.0:8080");
  CHECK(s.health_address == "0.0.0.0:8081");
  CHECK_FALSE(s.flags.leader_elect);
  CHECK(s.flags.lease_name == "sluice-autoscaler");
}

TEST_CASE("flags of the chart and the shorthands", "[flags]") {
  auto parsed = Parse({"--leader-elect", "--lease-namespace=sluice-system", "--watch-namespace=ml",
                       "--metrics-address=:9090", "--health-address=127.0.0.1:0", "--prometheus-url=http://prom:9090",
                       "--period", "30s", "--window=2m", "--keda=off", "--log-level=DEBUG"});
  REQUIRE(parsed.ok());
  const AutoscalerSettings& s = parsed->settings;
  CHECK(s.flags.leader_elect);
  CHECK(s.flags.lease_namespace == "sluice-system");
  CHECK(s.flags.watch_namespace == "ml");
  CHECK(s.metrics_address == "0.0.0.0:9090");
  CHECK(s.health_address == "127.0.0.1:0");
  CHECK(s.global.prometheus_url == "http://prom:9090");
  CHECK(s.period == absl::Seconds(30));
  CHECK(s.prometheus.window == absl::Minutes(2));
  CHECK(s.keda == AutoscalerSettings::Keda::kOff);

  parsed = Parse({"--leader-elect=false", "--metrics-port=9100", "--health-port", "9101", "--period=20"});
  REQUIRE(parsed.ok());
  CHECK_FALSE(parsed->settings.flags.leader_elect);
  CHECK(parsed->settings.metrics_address == "0.0.0.0:9100");
  CHECK(parsed->settings.health_address == "0.0.0.0:9101");
  CHECK(parsed->settings.period == absl::Seconds(20));

  parsed = Parse({"--metrics-address=off", "--health-address=off"});
  REQUIRE(parsed.ok());
  CHECK_FALSE(parsed->settings.metrics_address.has_value());
  CHECK_FALSE(parsed->settings.health_address.has_value());
}

TEST_CASE("--help", "[flags]") {
  auto parsed = Parse({"--help"});
  REQUIRE(parsed.ok());
  CHECK(absl::StrContains(parsed->help, "sluice-autoscaler"));
  for (const char* flag : {"--kubeconfig", "--watch-namespace", "--period", "--prometheus-url",
                           "--prometheus-bearer-token-file", "--prometheus-ca-file", "--leader-elect", "--metrics-port",
                           "--health-port", "--log-level", "--config"}) {
    CHECK(absl::StrContains(parsed->help, flag));
  }
}

TEST_CASE("malformed flags are refused, naming the flag", "[flags][malformed]") {
  testing::TempDir dir;
  testing::WriteFile(dir.File("token"), "secret\n");
  CHECK(absl::StrContains(ErrorOf({"--no-such-flag"}), "--no-such-flag"));
  CHECK(absl::StrContains(ErrorOf({"--period=fast"}), "--period 'fast' is not a duration"));
  CHECK(absl::StrContains(ErrorOf({"--period=0s"}), "--period '0s' must be a positive"));
  CHECK(absl::StrContains(ErrorOf({"--period=-5"}), "must be a positive"));
  CHECK(absl::StrContains(ErrorOf({"--period=inf"}), "--period"));
  CHECK(absl::StrContains(ErrorOf({"--period=500ms"}), "--period '500ms' must be at least 1s"));
  CHECK(absl::StrContains(ErrorOf({"--period=2m"}), "--window (1m) must be at least --period (2m)"));
  CHECK(absl::StrContains(ErrorOf({"--max-signal-age=10s"}), "--max-signal-age (10s) must be longer than --period"));
  CHECK(absl::StrContains(ErrorOf({"--prometheus-timeout=soon"}), "--prometheus-timeout"));
  CHECK(absl::StrContains(ErrorOf({"--log-level=loud"}), "--log-level 'loud'"));
  CHECK(absl::StrContains(ErrorOf({"--keda=maybe"}), "--keda 'maybe' must be auto, on or off"));
  CHECK(absl::StrContains(ErrorOf({"--prometheus-url=prom:9090"}), "must start with http:// or https://"));
  CHECK(absl::StrContains(ErrorOf({"--prometheus-bearer-token-file", dir.File("token"), "--prometheus-basic-auth-user=u",
                                   "--prometheus-basic-auth-password-file", dir.File("token")}),
                          "exclude each other"));
  CHECK(absl::StrContains(ErrorOf({"--prometheus-basic-auth-user=u"}), "must be given together"));
  CHECK(absl::StrContains(ErrorOf({"--prometheus-cert-file", dir.File("token")}), "must be given together"));
  CHECK(absl::StrContains(ErrorOf({"--prometheus-ca-file", dir.File("missing.pem")}),
                          "--prometheus-ca-file: cannot read"));
  CHECK(absl::StrContains(ErrorOf({"--prometheus-dataservice-label="}), "--prometheus-dataservice-label"));
  CHECK(absl::StrContains(ErrorOf({"--leader-elect", "--renew-deadline-seconds=20"}),
                          "--renew-deadline-seconds (20) must be less than --lease-duration-seconds (15)"));
  CHECK(absl::StrContains(ErrorOf({"--leader-elect", "--retry-period-seconds=10"}), "--retry-period-seconds"));
  CHECK(absl::StrContains(ErrorOf({"--leader-elect", "--lease-name="}), "--lease-name"));
  CHECK(absl::StrContains(ErrorOf({"--metrics-address=8080"}), "--metrics-address '8080' is not host:port"));
  CHECK(absl::StrContains(ErrorOf({"--health-address=:99999"}), "--health-address"));
  CHECK(absl::StrContains(ErrorOf({"--metrics-port=70000"}), "--metrics-port"));
  CHECK(absl::StrContains(ErrorOf({"--concurrency=0"}), "--concurrency"));
  CHECK(absl::StrContains(ErrorOf({"--kube-qps=-1"}), "--kube-qps"));
  CHECK(absl::StrContains(ErrorOf({"--lease-duration-seconds=abc"}), "--lease-duration-seconds"));
}

TEST_CASE("the YAML config file: keys are flag names, and the command line wins", "[flags][config]") {
  testing::TempDir dir;
  testing::WriteFile(dir.File("a.yaml"),
                     "# the autoscaler's settings\n"
                     "prometheus-url: https://prom.example/prometheus\n"
                     "period: 30s\n"
                     "window: 2m\n"
                     "watch_namespace: team\n"  // underscores work too
                     "leader-elect: true\n"
                     "metrics-port: 9200\n");
  auto parsed = Parse({"--config", dir.File("a.yaml")});
  REQUIRE(parsed.ok());
  CHECK(parsed->settings.global.prometheus_url == "https://prom.example/prometheus");
  CHECK(parsed->settings.period == absl::Seconds(30));
  CHECK(parsed->settings.flags.watch_namespace == "team");
  CHECK(parsed->settings.flags.leader_elect);
  CHECK(parsed->settings.metrics_address == "0.0.0.0:9200");

  // Given on the command line (under any of its names), the file's value is ignored.
  parsed = Parse({"--config=" + dir.File("a.yaml"), "--period=20s", "--namespace=ml", "--leader-elect=false"});
  REQUIRE(parsed.ok());
  CHECK(parsed->settings.period == absl::Seconds(20));
  CHECK(parsed->settings.flags.watch_namespace == "ml");
  CHECK_FALSE(parsed->settings.flags.leader_elect);

  testing::WriteFile(dir.File("empty.yaml"), "");
  CHECK(Parse({"--config", dir.File("empty.yaml")}).ok());
}

TEST_CASE("malformed config files are refused, naming the file, line and key", "[flags][config][malformed]") {
  testing::TempDir dir;
  auto error_of_file = [&](const std::string& text) {
    testing::WriteFile(dir.File("c.yaml"), text);
    return ErrorOf({"--config", dir.File("c.yaml")});
  };
  const std::string path = dir.File("c.yaml");
  CHECK(absl::StrContains(error_of_file("period: 15s\nperiode: 20s\n"), path + ":2: unknown key 'periode'"));
  CHECK(absl::StrContains(error_of_file("- period\n- 15s\n"), "expected a map from flag names to values"));
  CHECK(absl::StrContains(error_of_file("period: [15s, 20s]\n"), path + ":1: period: expected a single value"));
  CHECK(absl::StrContains(error_of_file("period: {a: 1}\n"), "expected a single value"));
  CHECK(absl::StrContains(error_of_file("config: other.yaml\n"), "'config' cannot be nested"));
  CHECK(absl::StrContains(error_of_file("period: [15s\n"), path + ":"));  // YAML syntax error with its position
  CHECK(absl::StrContains(error_of_file("[1, 2]: x\n"), "keys must be flag names"));
  CHECK(absl::StrContains(error_of_file("period: soon\n"), "--period 'soon' is not a duration"));
  CHECK(absl::StrContains(error_of_file("help: true\n"), "unknown key 'help'"));
  CHECK(absl::StrContains(ErrorOf({"--config", dir.File("missing.yaml")}), "--config: cannot read"));
  CHECK(absl::StrContains(ErrorOf({"--config"}), "--config: expected a file path"));
}

// ------------------------------------------------------------------------------- the binary

struct RunResult {
  int code = -1;
  std::string output;  // stdout and stderr
};

RunResult Run(const std::string& args) {
  RunResult r;
  FILE* pipe = popen(absl::StrCat(SLUICE_AUTOSCALER_BINARY, " ", args, " 2>&1").c_str(), "r");
  REQUIRE(pipe != nullptr);
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), pipe)) > 0) r.output.append(buf.data(), n);
  int status = pclose(pipe);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

TEST_CASE("the binary answers --help", "[binary]") {
  RunResult r = Run("--help");
  CHECK(r.code == 0);
  CHECK(absl::StrContains(r.output, "Usage:"));
  CHECK(absl::StrContains(r.output, "sluice-autoscaler"));
  CHECK(absl::StrContains(r.output, "--prometheus-url"));
}

TEST_CASE("the binary refuses malformed flags and config with exit code 2 and a logfmt line", "[binary][malformed]") {
  RunResult r = Run("--period=fast");
  CHECK(r.code == 2);
  CHECK(absl::StrContains(r.output, "level=error"));
  CHECK(absl::StrContains(r.output, "component=autoscaler"));
  CHECK(absl::StrContains(r.output, "msg=\"invalid flags\""));
  CHECK(absl::StrContains(r.output, "--period 'fast' is not a duration"));

  testing::TempDir dir;
  testing::WriteFile(dir.File("c.yaml"), "prometheus_url: ftp://x\n");
  r = Run("--config " + dir.File("c.yaml"));
  CHECK(r.code == 2);
  CHECK(absl::StrContains(r.output, "must start with http:// or https://"));

  // A kubeconfig that does not exist: the configuration cannot load, exit 2 (after the exit line).
  r = Run("--metrics-address=off --health-address=off --kubeconfig " + dir.File("no-kubeconfig"));
  CHECK(r.code == 2);
  CHECK(absl::StrContains(r.output, "cannot load the Kubernetes configuration"));
  CHECK(absl::StrContains(r.output, "exiting code=2"));
}

}  // namespace
}  // namespace sluice::autoscaler
