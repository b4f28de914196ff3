#include "dataplane/worker/worker_flags.h"

#include <limits.h>
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <CLI/CLI.hpp>
#include <cstdlib>
#include <algorithm>
#include <fstream>
#include <map>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/match.h"
#include "common/admin_server.h"
#include "dataplane/pipeline/plugin.h"

namespace sluice::worker {
namespace {

void AddFlags(CLI::App& app, WorkerFlags& f) {
  app.add_option("--config", f.config, "YAML file with flag values (keys: flag names); flags override it");
  app.add_option("--port", f.port, "gRPC port for clients (0: pick a free one)");
  app.add_option("--metrics_port", f.metrics_port, "admin port: /metrics, /healthz, /readyz (0: pick, -1: off)");
  app.add_option("--listen_host", f.listen_host, "address the servers bind to");
  app.add_option("--dispatcher_address", f.dispatcher_address, "dispatcher host:port (required)");
  app.add_option("--worker_address", f.worker_address, "host:port clients dial; the worker's identity (default 127.0.0.1:<port>)");
  app.add_option("--host", f.host,
                 "the worker's host for locality, compared with the clients' hosts (default: $SLUICE_WORKER_HOST, "
                 "else the machine's hostname)");
  app.add_option("--plugin_dir", f.plugin_dirs,
                 "directory whose element-op plugins task pipelines may load (repeatable or comma-separated; "
                 "symlinks resolved); without it every pipeline naming a plugin is refused")
      ->delimiter(',');
  app.add_option("--placement", f.placement, "local (next to trainers) or remote (CPU node)");
  app.add_option("--dataservice", f.dataservice, "DataService name, as the metrics' dataservice label");
  app.add_option("--heartbeat_interval_ms", f.heartbeat_interval_ms, "heartbeat period");
  app.add_option("--round_timeout_ms", f.round_timeout_ms, "coordinated reads: skip a round not ready in this time (with allow_skip_round)");
  app.add_option("--sharing_window_elements", f.sharing_window_elements, "cross-job sharing: elements kept for the slowest job");
  app.add_option("--buffer_bytes", f.buffer_bytes, "per task: bytes of encoded elements buffered ahead of readers");
  app.add_option("--buffer_elements", f.buffer_elements, "per task: elements buffered ahead of readers");
  app.add_option("--buffer_min_bytes", f.buffer_min_bytes,
                 "per task: small elements may pass --buffer_elements up to this many bytes (0: they may not; "
                 "default 4 MiB, 0 when --buffer_elements is given)");
  app.add_option("--max_undelivered_elements", f.max_undelivered_elements,
                 "per streaming task: produce at most this many elements beyond what the job's clients reported "
                 "received (bounds what a killed worker takes with it; 0: no cap)");
  app.add_option("--split_lease_elements", f.split_lease_elements,
                 "dynamic sharding: first position lease of a split, in elements (what a lost worker may lose per split it reads)");
  app.add_option("--split_lease_max_elements", f.split_lease_max_elements,
                 "dynamic sharding: the lease window doubles per renewal up to this many elements");
  app.add_option("--task_wait_ms", f.task_wait_ms, "how long a read for a not-yet-known task waits for the dispatcher");
  app.add_option("--cpu_budget", f.cpu_budget, "threads each task pipeline may use (0: the pipeline's own setting)");
  app.add_option("--max_message_bytes", f.max_message_bytes, "gRPC message size limit");
  app.add_option("--shutdown_timeout_ms", f.shutdown_timeout_ms, "SIGTERM: budget for draining, deregistering and stopping");
  app.add_option("--tls_cert", f.tls_cert, "PEM certificate (server, and client certificate towards the dispatcher)");
  app.add_option("--tls_key", f.tls_key, "PEM private key for --tls_cert");
  app.add_option("--tls_ca", f.tls_ca, "PEM CA to verify peers with");
  app.add_flag("--tls_require_client_cert", f.tls_require_client_cert, "mutual TLS: clients must present a certificate");
  app.add_option("--tls_server_name", f.tls_server_name, "expected name in the dispatcher's certificate, if not its address");
  app.add_option("--log_level", f.log_level, "debug, info, warning or error");
  app.add_option("--shm_dir", f.shm_dir,
                 "same-host clients: element payloads go through a shared-memory ring per stream in this "
                 "directory (docs/dataservice.md, \"Same-host shared memory\"); empty: off");
  app.add_option("--shm_ring_bytes", f.shm_ring_bytes,
                 "size of each same-host stream's shared-memory ring (reserved once the client attaches; 0: off)");
}

// Whether `args` sets `--name` (as "--name", "--name=v" or "--name v").
bool GivenOnCommandLine(const std::vector<std::string>& args, const std::string& name) {
  const std::string flag = "--" + name;
  for (const auto& a : args) {
    if (a == flag || absl::StartsWith(a, flag + "=")) return true;
  }
  return false;
}

absl::StatusOr<std::string> FindConfigPath(const std::vector<std::string>& args) {
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--config") {
      if (i + 1 >= args.size()) return absl::InvalidArgumentError("--config: needs a file path");
      return args[i + 1];
    }
    if (absl::StartsWith(args[i], "--config=")) return args[i].substr(9);
  }
  return std::string();
}

// The config file as extra command-line arguments (for the flags not given on the command line).
absl::StatusOr<std::vector<std::string>> ConfigArgs(const std::string& path, const std::set<std::string>& known,
                                                    const std::set<std::string>& boolean_flags,
                                                    const std::vector<std::string>& args) {
  YAML::Node root;
  try {
    root = YAML::LoadFile(path);
  } catch (const YAML::BadFile&) {
    return absl::NotFoundError(absl::StrCat("--config: cannot read '", path, "'"));
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(path, ":", e.mark.line + 1, ":", e.mark.column + 1, ": ", e.msg));
  }
  std::vector<std::string> out;
  if (root.IsNull()) return out;
  if (!root.IsMap()) return absl::InvalidArgumentError(absl::StrCat(path, ": expected a map of flag names to values"));
  for (const auto& entry : root) {
    std::string key;
    try {
      key = entry.first.as<std::string>();
    } catch (const YAML::Exception&) {
      return absl::InvalidArgumentError(absl::StrCat(path, ":", entry.first.Mark().line + 1, ": keys must be strings"));
    }
    if (key == "config") return absl::InvalidArgumentError(absl::StrCat(path, ": 'config' cannot be set in a config file"));
    if (known.count(key) == 0) {
      return absl::InvalidArgumentError(absl::StrCat(path, ":", entry.first.Mark().line + 1, ": unknown key '", key,
                                                     "'; known keys: ", absl::StrJoin(known, ", ")));
    }
    if (!entry.second.IsScalar()) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ":", entry.second.Mark().line + 1, ": ", key, ": expected a single value"));
    }
    if (GivenOnCommandLine(args, key)) continue;
    const std::string value = entry.second.Scalar();
    if (boolean_flags.count(key) > 0) {
      if (value == "true") {
        out.push_back("--" + key);
      } else if (value != "false") {
        return absl::InvalidArgumentError(absl::StrCat(path, ": ", key, ": expected true or false, got '", value, "'"));
      }
      continue;
    }
    out.push_back(absl::StrCat("--", key, "=", value));
  }
  return out;
}

absl::Status Validate(const WorkerFlags& f) {
  if (f.dispatcher_address.empty()) return absl::InvalidArgumentError("--dispatcher_address is required (host:port)");
  if (auto hp = SplitHostPort(f.dispatcher_address); !hp.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--dispatcher_address: ", hp.status().message()));
  }
  if (f.port < 0 || f.port > 65535) return absl::InvalidArgumentError(absl::StrCat("--port: ", f.port, " is not a port"));
  if (f.metrics_port < -1 || f.metrics_port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("--metrics_port: ", f.metrics_port, " is not a port (-1: off)"));
  }
  if (!f.worker_address.empty()) {
    if (auto hp = SplitHostPort(f.worker_address); !hp.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("--worker_address: ", hp.status().message()));
    }
  }
  if (f.placement != "local" && f.placement != "remote") {
    return absl::InvalidArgumentError(absl::StrCat("--placement: expected local or remote, got '", f.placement, "'"));
  }
  auto positive = [](const char* name, int64_t v) -> absl::Status {
    if (v <= 0) return absl::InvalidArgumentError(absl::StrCat("--", name, ": must be > 0, got ", v));
    return absl::OkStatus();
  };
  for (auto [name, value] : std::vector<std::pair<const char*, int64_t>>{
           {"heartbeat_interval_ms", f.heartbeat_interval_ms}, {"round_timeout_ms", f.round_timeout_ms},
           {"sharing_window_elements", f.sharing_window_elements}, {"buffer_bytes", f.buffer_bytes},
           {"buffer_elements", f.buffer_elements}, {"max_message_bytes", f.max_message_bytes},
           {"shutdown_timeout_ms", f.shutdown_timeout_ms}, {"split_lease_elements", f.split_lease_elements},
           {"split_lease_max_elements", f.split_lease_max_elements}}) {
    if (auto s = positive(name, value); !s.ok()) return s;
  }
  if (auto dirs = pipeline::ResolvePluginDirs(f.plugin_dirs, "--plugin_dir"); !dirs.ok()) return dirs.status();
  if (f.buffer_min_bytes < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--buffer_min_bytes: must be >= 0 (0: --buffer_elements bounds always), got ", f.buffer_min_bytes));
  }
  if (f.max_undelivered_elements < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--max_undelivered_elements: must be >= 0 (0: no cap), got ", f.max_undelivered_elements));
  }
  if (f.shm_ring_bytes != 0 && f.shm_ring_bytes < (int64_t{1} << 20)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--shm_ring_bytes: must be 0 (off) or at least 1048576 (1 MiB), got ", f.shm_ring_bytes));
  }
  if (f.task_wait_ms < 0) return absl::InvalidArgumentError(absl::StrCat("--task_wait_ms: must be >= 0, got ", f.task_wait_ms));
  if (f.cpu_budget < 0) return absl::InvalidArgumentError(absl::StrCat("--cpu_budget: must be >= 0, got ", f.cpu_budget));
  static const std::set<std::string> kLevels = {"debug", "info", "warning", "error"};
  if (kLevels.count(f.log_level) == 0) {
    return absl::InvalidArgumentError(absl::StrCat("--log_level: expected debug, info, warning or error, got '", f.log_level, "'"));
  }
  if (f.tls_key.empty() != f.tls_cert.empty()) {
    return absl::InvalidArgumentError("--tls_cert and --tls_key go together");
  }
  if (f.tls_require_client_cert && f.tls_ca.empty()) {
    return absl::InvalidArgumentError("--tls_require_client_cert needs --tls_ca to verify clients with");
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ParsedFlags> ParseWorkerFlags(const std::vector<std::string>& args) {
  ParsedFlags parsed;
  CLI::App app("sluice-worker: runs data pipelines for the Sluice data service", "sluice-worker");
  AddFlags(app, parsed.flags);
  std::set<std::string> known;
  std::set<std::string> boolean_flags;
  for (const CLI::Option* option : app.get_options()) {
    for (const std::string& name : option->get_lnames()) {
      known.insert(name);
      if (option->get_expected_min() == 0) boolean_flags.insert(name);
    }
  }
  known.erase("help");
  auto config_path = FindConfigPath(args);
  if (!config_path.ok()) return config_path.status();
  std::vector<std::string> all;
  if (!config_path->empty()) {
    auto extra = ConfigArgs(*config_path, known, boolean_flags, args);
    if (!extra.ok()) return extra.status();
    all = *std::move(extra);
  }
  all.insert(all.end(), args.begin(), args.end());
  std::vector<std::string> reversed(all.rbegin(), all.rend());  // CLI11 takes the vector back to front
  try {
    app.parse(reversed);
  } catch (const CLI::CallForHelp&) {
    parsed.help = app.help();
    return parsed;
  } catch (const CLI::ParseError& e) {
    return absl::InvalidArgumentError(e.what());
  }
  // A --buffer_elements given (flag or config) is a strict bound unless --buffer_min_bytes is given too.
  if (app.count("--buffer_elements") > 0 && app.count("--buffer_min_bytes") == 0) parsed.flags.buffer_min_bytes = 0;
  if (auto s = Validate(parsed.flags); !s.ok()) return s;
  return parsed;
}

std::string ResolveWorkerHost(const std::string& flag, const std::string& worker_address) {
  if (!flag.empty()) return flag;
  if (const char* env = std::getenv("SLUICE_WORKER_HOST"); env != nullptr && env[0] != '\0') return env;
  char name[HOST_NAME_MAX + 1] = {};
  if (gethostname(name, sizeof(name) - 1) == 0 && name[0] != '\0') return name;
  auto hp = SplitHostPort(worker_address);
  return hp.ok() ? hp->first : std::string();
}

absl::StatusOr<WorkerConfig> MakeWorkerConfig(const WorkerFlags& flags, int port) {
  WorkerConfig config;
  config.worker_address = flags.worker_address.empty() ? absl::StrCat("127.0.0.1:", port) : flags.worker_address;
  if (auto hp = SplitHostPort(config.worker_address); !hp.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--worker_address: ", hp.status().message()));
  }
  // Clients default to their hostname too (client_host / $SLUICE_CLIENT_HOST), so a worker and a
  // trainer on one machine match out of the box; in Kubernetes both are set to the node's name.
  config.worker_host = ResolveWorkerHost(flags.host, config.worker_address);
  auto plugin_dirs = pipeline::ResolvePluginDirs(flags.plugin_dirs, "--plugin_dir");
  if (!plugin_dirs.ok()) return plugin_dirs.status();
  config.runner.plugin_dirs = *std::move(plugin_dirs);
  config.placement = flags.placement == "local" ? service::PLACEMENT_LOCAL : service::PLACEMENT_REMOTE;
  config.heartbeat_interval = absl::Milliseconds(flags.heartbeat_interval_ms);
  config.unknown_task_wait = absl::Milliseconds(flags.task_wait_ms);
  config.max_message_bytes = flags.max_message_bytes;
  config.sharing_window_elements = static_cast<size_t>(flags.sharing_window_elements);
  config.runner.buffer_bytes = static_cast<size_t>(flags.buffer_bytes);
  config.runner.buffer_elements = static_cast<size_t>(flags.buffer_elements);
  config.runner.buffer_min_bytes = static_cast<size_t>(flags.buffer_min_bytes);
  config.runner.max_undelivered_elements = flags.max_undelivered_elements;
  config.runner.round_timeout = absl::Milliseconds(flags.round_timeout_ms);
  config.runner.splits.lease_elements = flags.split_lease_elements;
  config.runner.splits.max_lease_elements = std::max(flags.split_lease_elements, flags.split_lease_max_elements);
  config.runner.runtime.cpu_budget = flags.cpu_budget;
  return config;
}

rpc::TlsOptions TlsFromFlags(const WorkerFlags& flags) {
  rpc::TlsOptions tls;
  tls.cert_file = flags.tls_cert;
  tls.key_file = flags.tls_key;
  tls.ca_file = flags.tls_ca;
  tls.require_client_cert = flags.tls_require_client_cert;
  tls.server_name_override = flags.tls_server_name;
  return tls;
}

}  // namespace sluice::worker
