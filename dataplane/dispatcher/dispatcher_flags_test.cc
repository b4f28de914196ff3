#include "dataplane/dispatcher/dispatcher_flags.h"

#include <catch2/catch.hpp>

#include <map>
#include <memory>

#include "testing/test_util.h"

namespace sluice::dispatcher {
namespace {

using sluice::testing::TempDir;
using sluice::testing::WriteFile;

DispatcherFlags MustParse(const std::vector<std::string>& args) {
  auto parsed = ParseDispatcherFlags(args);
  INFO(parsed.status().ToString());
  REQUIRE(parsed.ok());
  return parsed->flags;
}

std::string ParseError(const std::vector<std::string>& args) {
  auto parsed = ParseDispatcherFlags(args);
  REQUIRE(!parsed.ok());
  return std::string(parsed.status().message());
}

bool Has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

TEST_CASE("defaults match the data service contract") {
  DispatcherFlags f = MustParse({});
  CHECK(f.port == 5050);
  CHECK(f.fsync == "batch");
  CHECK(f.worker_timeout_ms == 5000);
  CHECK(f.heartbeat_interval_ms == 500);
  CHECK(f.journal_dir.empty());
  DispatcherOptions o = ServiceOptionsFromFlags(f);
  CHECK(o.worker_timeout == absl::Seconds(5));
  CHECK(o.heartbeat_interval == absl::Milliseconds(500));
  CHECK(TickInterval(f) == absl::Milliseconds(500));
  CHECK(ServerOptionsFromFlags(f).address == "0.0.0.0:5050");
}

TEST_CASE("flags set every option") {
  DispatcherFlags f = MustParse({"--port=0", "--metrics_port", "-1", "--journal_dir", "/tmp/j", "--fsync=always",
                                 "--worker_timeout_ms=300", "--heartbeat_interval_ms=50", "--snapshot_every=7",
                                 "--dataservice=prod", "--max_message_bytes=1024", "--listen_host=127.0.0.1",
                                 "--log_level=warning"});
  CHECK(f.port == 0);
  CHECK(f.metrics_port == -1);
  CHECK(JournalOptionsFromFlags(f).dir == "/tmp/j");
  CHECK(JournalOptionsFromFlags(f).fsync == FsyncPolicy::kAlways);
  CHECK(ServiceOptionsFromFlags(f).snapshot_every == 7);
  CHECK(ServiceOptionsFromFlags(f).dataservice == "prod");
  CHECK(ServerOptionsFromFlags(f).max_message_bytes == 1024);
  CHECK(ServerOptionsFromFlags(f).address == "127.0.0.1:0");
  CHECK(TickInterval(f) == absl::Milliseconds(30));
}

TEST_CASE("a YAML config supplies values - command-line flags win") {
  TempDir dir;
  const std::string config = dir.File("dispatcher.yaml");
  WriteFile(config,
            "port: 7000\n"
            "journal_dir: /var/lib/sluice\n"
            "fsync: never\n"
            "tls_require_client_cert: true\n"
            "tls_cert: /c.pem\n"
            "tls_key: /k.pem\n"
            "tls_ca: /ca.pem\n"
            "worker_timeout_ms: 9000\n");
  DispatcherFlags f = MustParse({"--config", config, "--port=7001"});
  CHECK(f.port == 7001);
  CHECK(f.journal_dir == "/var/lib/sluice");
  CHECK(f.fsync == "never");
  CHECK(f.tls_require_client_cert);
  CHECK(ServerOptionsFromFlags(f).tls.require_client_cert);
  CHECK(ServerOptionsFromFlags(f).tls.ca_file == "/ca.pem");
  CHECK(f.worker_timeout_ms == 9000);
  DispatcherFlags g = MustParse({"--config=" + config, "--fsync", "always"});
  CHECK(g.fsync == "always");
  CHECK(g.port == 7000);
}

TEST_CASE("bad config files are named with their line") {
  TempDir dir;
  const std::string config = dir.File("bad.yaml");
  WriteFile(config, "port: 7000\nworker_timeout: 5\n");
  std::string error = ParseError({"--config", config});
  CHECK(Has(error, config + ":2: unknown key 'worker_timeout'"));
  CHECK(Has(error, "worker_timeout_ms"));
  WriteFile(config, "port: [1, 2]\n");
  CHECK(Has(ParseError({"--config", config}), "port: expected a single value"));
  WriteFile(config, "port: {\n");
  CHECK(Has(ParseError({"--config", config}), config + ":"));
  WriteFile(config, "- a\n- b\n");
  CHECK(Has(ParseError({"--config", config}), "expected a map"));
  WriteFile(config, "port: abc\n");
  CHECK(Has(ParseError({"--config", config}), "port"));
  WriteFile(config, "config: other.yaml\n");
  CHECK(Has(ParseError({"--config", config}), "'config' cannot be nested"));
  CHECK(Has(ParseError({"--config", dir.File("missing.yaml")}), "cannot read"));
  CHECK(Has(ParseError({"--config"}), "--config: expected a file path"));
  WriteFile(config, "");
  CHECK(MustParse({"--config", config}).port == 5050);  // an empty file sets nothing
}

TEST_CASE("invalid values name the flag") {
  CHECK(Has(ParseError({"--fsync=sometimes"}), "--fsync: 'sometimes' is not one of always, batch, never"));
  CHECK(Has(ParseError({"--port=70000"}), "--port: 70000"));
  CHECK(Has(ParseError({"--metrics_port=-2"}), "--metrics_port"));
  CHECK(Has(ParseError({"--worker_timeout_ms=0"}), "--worker_timeout_ms: must be > 0"));
  CHECK(Has(ParseError({"--snapshot_every=-1"}), "--snapshot_every: must be >= 0"));
  CHECK(Has(ParseError({"--heartbeat_interval_ms=6000"}), "must be below --worker_timeout_ms"));
  CHECK(Has(ParseError({"--log_level=loud"}), "--log_level"));
  CHECK(Has(ParseError({"--tls_cert=/c.pem"}), "--tls_cert and --tls_key"));
  CHECK(Has(ParseError({"--tls_cert=/c.pem", "--tls_key=/k.pem", "--tls_require_client_cert"}), "needs --tls_ca"));
  CHECK(Has(ParseError({"--no_such_flag=1"}), "no_such_flag"));
  CHECK(Has(ParseError({"--port=abc"}), "port"));
  CHECK(Has(ParseError({"--max_dataset_splits=0"}), "--max_dataset_splits: must be > 0, got 0"));
  CHECK(Has(ParseError({"--max_dataset_splits=-1"}), "--max_dataset_splits: must be > 0"));
  CHECK(Has(ParseError({"--max_dataset_splits=lots"}), "max_dataset_splits"));
}

TEST_CASE("max_dataset_splits: default, flag and config file reach the service options") {
  CHECK(MustParse({}).max_dataset_splits == 1000000);
  CHECK(ServiceOptionsFromFlags(MustParse({})).max_dataset_splits == 1000000);
  CHECK(ServiceOptionsFromFlags(MustParse({"--max_dataset_splits=5000000"})).max_dataset_splits == 5000000);
  TempDir dir;
  const std::string config = dir.File("dispatcher.yaml");
  WriteFile(config, "max_dataset_splits: 2000\n");
  CHECK(MustParse({"--config", config}).max_dataset_splits == 2000);
  CHECK(MustParse({"--config", config, "--max_dataset_splits=3000"}).max_dataset_splits == 3000);
  WriteFile(config, "max_dataset_splits: 0\n");
  CHECK(Has(ParseError({"--config", config}), "--max_dataset_splits: must be > 0"));
}

TEST_CASE("help: --help returns the usage text") {
  auto parsed = ParseDispatcherFlags({"--help"});
  REQUIRE(parsed.ok());
  CHECK(Has(parsed->help, "--journal_dir"));
  CHECK(Has(parsed->help, "--fsync"));
}

// An environment for the tests: only the given variables are set.
EnvLookup Env(std::map<std::string, std::string> vars) {
  auto shared = std::make_shared<std::map<std::string, std::string>>(std::move(vars));
  return [shared](const char* name) -> const char* {
    auto it = shared->find(name);
    return it == shared->end() ? nullptr : it->second.c_str();
  };
}

TEST_CASE("sharing flag: off by default - from SLUICE_SHARING - the flag wins") {
  auto parse = [](const std::vector<std::string>& args, const EnvLookup& env) {
    auto parsed = ParseDispatcherFlags(args, env);
    INFO(parsed.status().ToString());
    REQUIRE(parsed.ok());
    return parsed->flags;
  };
  CHECK(!parse({}, Env({})).sharing);
  CHECK(parse({"--sharing"}, Env({})).sharing);
  CHECK(parse({}, Env({{"SLUICE_SHARING", "true"}})).sharing);
  CHECK(!parse({}, Env({{"SLUICE_SHARING", "false"}})).sharing);
  CHECK(!parse({"--sharing=false"}, Env({{"SLUICE_SHARING", "true"}})).sharing);
  CHECK(ServiceOptionsFromFlags(parse({"--sharing"}, Env({}))).default_cross_job_sharing);
  auto bad = ParseDispatcherFlags({}, Env({{"SLUICE_SHARING", "perhaps"}}));
  REQUIRE(!bad.ok());
  CHECK(Has(std::string(bad.status().message()), "$SLUICE_SHARING: expected true or false, got 'perhaps'"));
}

TEST_CASE("auto_order flag: off by default - from SLUICE_AUTO_ORDER - the flag wins - bad modes are named") {
  auto parse = [](const std::vector<std::string>& args, const EnvLookup& env) {
    auto parsed = ParseDispatcherFlags(args, env);
    INFO(parsed.status().ToString());
    REQUIRE(parsed.ok());
    return ServiceOptionsFromFlags(parsed->flags).auto_order;
  };
  CHECK(parse({}, Env({})).mode == pipeline::AutoOrderMode::kOff);
  CHECK(parse({"--auto_order=strict"}, Env({})).mode == pipeline::AutoOrderMode::kStrict);
  CHECK(parse({}, Env({{"SLUICE_AUTO_ORDER", "relaxed"}})).mode == pipeline::AutoOrderMode::kRelaxed);
  CHECK(parse({"--auto_order", "off"}, Env({{"SLUICE_AUTO_ORDER", "relaxed"}})).mode == pipeline::AutoOrderMode::kOff);
  CHECK(parse({"--auto_order_sample=8"}, Env({})).sample_elements == 8);
  CHECK(parse({}, Env({})).min_measured_speedup == 1.02);
  CHECK(parse({"--auto_order_min_speedup=0"}, Env({})).min_measured_speedup == 0);
  CHECK(Has(ParseError({"--auto_order_min_speedup=-1"}), "--auto_order_min_speedup: must be >= 0"));
  auto bad_env = ParseDispatcherFlags({}, Env({{"SLUICE_AUTO_ORDER", "chaotic"}}));
  REQUIRE(!bad_env.ok());
  CHECK(Has(std::string(bad_env.status().message()), "$SLUICE_AUTO_ORDER: expected off, strict or relaxed, got 'chaotic'"));
  CHECK(Has(ParseError({"--auto_order=sideways"}), "--auto_order: unknown AutoOrder mode 'sideways'"));
  CHECK(Has(ParseError({"--auto_order_sample=0"}), "--auto_order_sample: must be >= 1"));
}

TEST_CASE("plugin_dir flag: repeatable and comma-separated - a missing directory is a flag error") {
  TempDir a, b;
  DispatcherFlags f = MustParse({"--plugin_dir", a.path().string() + "," + b.path().string(), "--plugin_dir=/tmp"});
  CHECK(f.plugin_dirs == std::vector<std::string>{a.path().string(), b.path().string(), "/tmp"});
  CHECK(ServiceOptionsFromFlags(f).plugin_dirs.size() == 3);
  CHECK(Has(ParseError({"--plugin_dir=/no/such/dir"}), "--plugin_dir: cannot resolve '/no/such/dir'"));
}

TEST_CASE("default pipeline: the pipeline flag - else SLUICE_PIPELINE_FILE - else SLUICE_PIPELINE - errors name the source") {
  TempDir dir;
  const std::string file = dir.File("p.yaml");
  WriteFile(file, "source: {range: {stop: 7}}\n");
  const std::string other = dir.File("other.yaml");
  WriteFile(other, "source: {range: {stop: 9}}\n");
  auto load = [](const DispatcherFlags& f, const EnvLookup& env) {
    auto loaded = LoadDefaultPipeline(f, env);
    INFO(loaded.status().ToString());
    REQUIRE(loaded.ok());
    return *loaded;
  };
  CHECK(!load(DispatcherFlags(), Env({})).has_value());
  DispatcherFlags with_flag;
  with_flag.pipeline = file;
  auto from_flag = load(with_flag, Env({{"SLUICE_PIPELINE_FILE", other}, {"SLUICE_PIPELINE", "source: {range: {stop: 1}}"}}));
  REQUIRE(from_flag.has_value());
  CHECK(from_flag->source == "--pipeline '" + file + "'");
  CHECK(from_flag->def.source().kind() == "range");
  auto from_file = load(DispatcherFlags(), Env({{"SLUICE_PIPELINE_FILE", other}, {"SLUICE_PIPELINE", "source: {x: {}}"}}));
  REQUIRE(from_file.has_value());
  CHECK(from_file->source == "$SLUICE_PIPELINE_FILE '" + other + "'");
  auto from_text = load(DispatcherFlags(), Env({{"SLUICE_PIPELINE", "{\"source\": {\"range\": {\"stop\": 3}}}"}}));
  REQUIRE(from_text.has_value());
  CHECK(from_text->source == "$SLUICE_PIPELINE");

  auto error = [](const DispatcherFlags& f, const EnvLookup& env) {
    auto loaded = LoadDefaultPipeline(f, env);
    REQUIRE(!loaded.ok());
    return std::string(loaded.status().message());
  };
  DispatcherFlags missing;
  missing.pipeline = dir.File("nope.yaml");
  CHECK(Has(error(missing, Env({})), "--pipeline '" + dir.File("nope.yaml") + "': cannot read the file"));
  const std::string broken = dir.File("broken.yaml");
  WriteFile(broken, "source: {rnage: {stop: 7}}\n");
  CHECK(Has(error(DispatcherFlags(), Env({{"SLUICE_PIPELINE_FILE", broken}})), "$SLUICE_PIPELINE_FILE '" + broken + "': "));
  CHECK(Has(error(DispatcherFlags(), Env({{"SLUICE_PIPELINE_FILE", broken}})), "rnage"));
  CHECK(Has(error(DispatcherFlags(), Env({{"SLUICE_PIPELINE", "steps: []"}})), "$SLUICE_PIPELINE: "));
  // Plugins are checked against --plugin_dir before the spec is parsed (parsing loads them).
  CHECK(Has(error(DispatcherFlags(), Env({{"SLUICE_PIPELINE", "plugins: [/opt/x/libx.so]\nsource: {range: {stop: 1}}"}})),
            "$SLUICE_PIPELINE: plugins[0]: plugin '/opt/x/libx.so' is refused"));
}

}  // namespace
}  // namespace sluice::dispatcher
