// sluice-worker flags and YAML config: defaults, overrides, and errors naming the flag or key.
#include "dataplane/worker/worker_flags.h"

#include <catch2/catch.hpp>

#include <unistd.h>

#include <cstdlib>

#include "testing/test_util.h"

namespace sluice::worker {
namespace {

std::string Error(const std::vector<std::string>& args) {
  auto parsed = ParseWorkerFlags(args);
  REQUIRE_FALSE(parsed.ok());
  return std::string(parsed.status().message());
}

TEST_CASE("worker_flags: defaults and command-line values") {
  auto parsed = ParseWorkerFlags({"--dispatcher_address=d:5000", "--port", "7001", "--placement=local",
                                  "--round_timeout_ms=250", "--sharing_window_elements=32", "--tls_require_client_cert",
                                  "--tls_ca=/ca.pem"});
  REQUIRE(parsed.ok());
  const WorkerFlags& f = parsed->flags;
  CHECK(f.dispatcher_address == "d:5000");
  CHECK(f.port == 7001);
  CHECK(f.heartbeat_interval_ms == 500);
  CHECK(f.round_timeout_ms == 250);
  CHECK(f.sharing_window_elements == 32);
  CHECK(f.tls_require_client_cert);
  auto config = MakeWorkerConfig(f, 7001);
  REQUIRE(config.ok());
  CHECK(config->worker_address == "127.0.0.1:7001");
  CHECK(config->worker_host == ResolveWorkerHost("", "127.0.0.1:7001"));  // not 127.0.0.1: the hostname
  CHECK(config->runner.plugin_dirs.empty());
  CHECK(config->placement == service::PLACEMENT_LOCAL);
  CHECK(config->runner.round_timeout == absl::Milliseconds(250));
  CHECK(config->sharing_window_elements == 32);
  CHECK(TlsFromFlags(f).require_client_cert);

  auto explicit_address = ParseWorkerFlags({"--dispatcher_address=d:1", "--worker_address=node-3.svc:9000"});
  REQUIRE(explicit_address.ok());
  auto c2 = MakeWorkerConfig(explicit_address->flags, 1234);
  REQUIRE(c2.ok());
  CHECK(c2->worker_address == "node-3.svc:9000");
  CHECK(c2->placement == service::PLACEMENT_REMOTE);

  auto help = ParseWorkerFlags({"--help"});
  REQUIRE(help.ok());
  CHECK_THAT(help->help, Catch::Contains("--sharing_window_elements"));
}

TEST_CASE("worker_flags: the locality host is --host, else $SLUICE_WORKER_HOST, else the hostname") {
  char name[256] = {};
  REQUIRE(gethostname(name, sizeof(name) - 1) == 0);
  unsetenv("SLUICE_WORKER_HOST");
  CHECK(ResolveWorkerHost("", "10.0.0.1:5000") == std::string(name));  // as clients default to theirs
  CHECK(ResolveWorkerHost("node-7", "10.0.0.1:5000") == "node-7");
  setenv("SLUICE_WORKER_HOST", "node-env", 1);
  CHECK(ResolveWorkerHost("", "10.0.0.1:5000") == "node-env");
  CHECK(ResolveWorkerHost("node-7", "10.0.0.1:5000") == "node-7");
  auto parsed = ParseWorkerFlags({"--dispatcher_address=d:1", "--worker_address=10.0.0.1:9000"});
  REQUIRE(parsed.ok());
  auto config = MakeWorkerConfig(parsed->flags, 9000);
  REQUIRE(config.ok());
  CHECK(config->worker_host == "node-env");
  unsetenv("SLUICE_WORKER_HOST");
  auto flagged = ParseWorkerFlags({"--dispatcher_address=d:1", "--host=gpu-node-1"});
  REQUIRE(flagged.ok());
  CHECK(MakeWorkerConfig(flagged->flags, 1)->worker_host == "gpu-node-1");
}

TEST_CASE("worker_flags: --plugin_dir is repeatable and comma-separated, resolved, and must exist") {
  sluice::testing::TempDir a, b;
  auto parsed = ParseWorkerFlags({"--dispatcher_address=d:1", "--plugin_dir", a.path().string() + "," + b.path().string(),
                                  "--plugin_dir=" + a.path().string() + "/."});
  REQUIRE(parsed.ok());
  CHECK(parsed->flags.plugin_dirs.size() == 3);
  auto config = MakeWorkerConfig(parsed->flags, 1);
  REQUIRE(config.ok());
  REQUIRE(config->runner.plugin_dirs.size() == 3);
  CHECK(config->runner.plugin_dirs[2] == config->runner.plugin_dirs[0]);  // "/." resolved away
  CHECK_THAT(Error({"--dispatcher_address=d:1", "--plugin_dir=/no/such/dir"}),
             Catch::Contains("--plugin_dir: cannot resolve '/no/such/dir'"));
}

TEST_CASE("worker_flags: a YAML config file, overridden by flags") {
  sluice::testing::TempDir dir;
  const std::string path = dir.File("worker.yaml");
  sluice::testing::WriteFile(path,
                             "dispatcher_address: dispatcher:5000\n"
                             "heartbeat_interval_ms: 100\n"
                             "placement: local\n"
                             "tls_require_client_cert: false\n"
                             "dataservice: imagenet\n");
  auto parsed = ParseWorkerFlags({"--config", path, "--heartbeat_interval_ms=40"});
  REQUIRE(parsed.ok());
  CHECK(parsed->flags.dispatcher_address == "dispatcher:5000");
  CHECK(parsed->flags.heartbeat_interval_ms == 40);
  CHECK(parsed->flags.placement == "local");
  CHECK(parsed->flags.dataservice == "imagenet");
  CHECK_FALSE(parsed->flags.tls_require_client_cert);
}

TEST_CASE("worker_flags: malformed input is reported with the flag, file and key") {
  CHECK_THAT(Error({}), Catch::Contains("--dispatcher_address is required"));
  CHECK_THAT(Error({"--dispatcher_address=nocolon"}), Catch::Contains("--dispatcher_address"));
  CHECK_THAT(Error({"--dispatcher_address=d:1", "--placement=moon"}), Catch::Contains("--placement"));
  CHECK_THAT(Error({"--dispatcher_address=d:1", "--heartbeat_interval_ms=0"}), Catch::Contains("--heartbeat_interval_ms"));
  CHECK_THAT(Error({"--dispatcher_address=d:1", "--port=70000"}), Catch::Contains("--port"));
  CHECK_THAT(Error({"--dispatcher_address=d:1", "--port=abc"}), Catch::Contains("port"));
  CHECK_THAT(Error({"--dispatcher_address=d:1", "--no_such_flag=1"}), Catch::Contains("no_such_flag"));
  CHECK_THAT(Error({"--dispatcher_address=d:1", "--tls_cert=/c.pem"}), Catch::Contains("--tls_key"));
  CHECK_THAT(Error({"--dispatcher_address=d:1", "--tls_require_client_cert"}), Catch::Contains("--tls_ca"));
  CHECK_THAT(Error({"--dispatcher_address=d:1", "--log_level=loud"}), Catch::Contains("--log_level"));
  CHECK_THAT(Error({"--config"}), Catch::Contains("--config"));
  CHECK_THAT(Error({"--config=/no/such/file.yaml"}), Catch::Contains("/no/such/file.yaml"));

  sluice::testing::TempDir dir;
  const std::string unknown = dir.File("unknown.yaml");
  sluice::testing::WriteFile(unknown, "dispatcher_address: d:1\nheartbeat_ms: 5\n");
  CHECK_THAT(Error({"--config", unknown}), Catch::Contains("unknown.yaml:2") && Catch::Contains("unknown key 'heartbeat_ms'"));
  const std::string broken = dir.File("broken.yaml");
  sluice::testing::WriteFile(broken, "dispatcher_address: [d:1\n");
  CHECK_THAT(Error({"--config", broken}), Catch::Contains("broken.yaml"));
  const std::string list = dir.File("list.yaml");
  sluice::testing::WriteFile(list, "- a\n- b\n");
  CHECK_THAT(Error({"--config", list}), Catch::Contains("expected a map"));
  const std::string nested = dir.File("nested.yaml");
  sluice::testing::WriteFile(nested, "dispatcher_address: {host: d}\n");
  CHECK_THAT(Error({"--config", nested}), Catch::Contains("dispatcher_address: expected a single value"));
  const std::string boolean = dir.File("bool.yaml");
  sluice::testing::WriteFile(boolean, "dispatcher_address: d:1\ntls_require_client_cert: maybe\n");
  CHECK_THAT(Error({"--config", boolean}), Catch::Contains("expected true or false"));
  CHECK_THAT(Error({"--dispatcher_address=d:1", "--max_undelivered_elements=-1"}),
             Catch::Contains("--max_undelivered_elements: must be >= 0"));
  CHECK_THAT(Error({"--dispatcher_address=d:1", "--max_undelivered_elements=many"}),
             Catch::Contains("max_undelivered_elements"));
}

TEST_CASE("worker_flags: --max_undelivered_elements from the command line or the YAML config reaches the runners") {
  auto plain = ParseWorkerFlags({"--dispatcher_address=d:1"});
  REQUIRE(plain.ok());
  CHECK(plain->flags.max_undelivered_elements == 0);
  sluice::testing::TempDir dir;
  const std::string path = dir.File("worker.yaml");
  sluice::testing::WriteFile(path, "dispatcher_address: d:1\nmax_undelivered_elements: 500\n");
  auto parsed = ParseWorkerFlags({"--config", path});
  REQUIRE(parsed.ok());
  CHECK(parsed->flags.max_undelivered_elements == 500);
  auto config = MakeWorkerConfig(parsed->flags, 7000);
  REQUIRE(config.ok());
  CHECK(config->runner.max_undelivered_elements == 500);
  auto flag = ParseWorkerFlags({"--config", path, "--max_undelivered_elements=7"});
  REQUIRE(flag.ok());
  CHECK(flag->flags.max_undelivered_elements == 7);
}

TEST_CASE("worker_flags: --buffer_min_bytes defaults to 4 MiB, reaches the runners, 0 turns it off, negative is refused") {
  auto plain = ParseWorkerFlags({"--dispatcher_address=d:1"});
  REQUIRE(plain.ok());
  auto config = MakeWorkerConfig(plain->flags, 7000);
  REQUIRE(config.ok());
  CHECK(config->runner.buffer_min_bytes == (4u << 20));
  auto off = ParseWorkerFlags({"--dispatcher_address=d:1", "--buffer_min_bytes=0"});
  REQUIRE(off.ok());
  config = MakeWorkerConfig(off->flags, 7000);
  REQUIRE(config.ok());
  CHECK(config->runner.buffer_min_bytes == 0);
  CHECK_THAT(Error({"--dispatcher_address=d:1", "--buffer_min_bytes=-1"}), Catch::Contains("--buffer_min_bytes: must be >= 0"));
  // A --buffer_elements given is a strict bound, on the command line or in the config, unless
  // --buffer_min_bytes is given as well.
  auto strict = ParseWorkerFlags({"--dispatcher_address=d:1", "--buffer_elements=8"});
  REQUIRE(strict.ok());
  CHECK(strict->flags.buffer_min_bytes == 0);
  sluice::testing::TempDir dir;
  const std::string path = dir.File("worker.yaml");
  sluice::testing::WriteFile(path, "dispatcher_address: d:1\nbuffer_elements: 8\n");
  auto from_config = ParseWorkerFlags({"--config", path});
  REQUIRE(from_config.ok());
  CHECK(from_config->flags.buffer_min_bytes == 0);
  auto both = ParseWorkerFlags({"--config", path, "--buffer_min_bytes=1048576"});
  REQUIRE(both.ok());
  CHECK(both->flags.buffer_elements == 8);
  CHECK(both->flags.buffer_min_bytes == (1u << 20));
}

}  // namespace
}  // namespace sluice::worker
