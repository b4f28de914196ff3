#include "dataplane/dispatcher/dispatcher_flags.h"

#include <yaml-cpp/yaml.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "dataplane/pipeline/autoorder/auto_order.h"
#include "dataplane/pipeline/plugin.h"
#include "dataplane/pipeline/spec_parser.h"

namespace sluice::dispatcher {
namespace {

void DefineFlags(CLI::App& app, DispatcherFlags& f) {
  app.add_option("--config", f.config, "YAML file of flag values (keys are flag names); command-line flags win");
  app.add_option("--listen_host", f.listen_host, "address the gRPC and admin servers bind to");
  app.add_option("--port", f.port, "gRPC port (0: pick a free one)");
  app.add_option("--metrics_port", f.metrics_port, "admin port for /metrics, /healthz, /readyz (0: pick, -1: off)");
  app.add_option("--journal_dir", f.journal_dir, "directory of the journal; empty keeps state in memory only");
  app.add_option("--fsync", f.fsync, "journal durability: always (each change), batch (periodically) or never");
  app.add_option("--fsync_batch_ms", f.fsync_batch_ms, "--fsync=batch: fsync at least this often");
  app.add_option("--fsync_batch_records", f.fsync_batch_records, "--fsync=batch: or after this many records");
  app.add_option("--snapshot_every", f.snapshot_every, "journal updates between snapshots (compaction); 0: never");
  app.add_option("--worker_timeout_ms", f.worker_timeout_ms, "a worker silent this long is removed");
  app.add_option("--heartbeat_interval_ms", f.heartbeat_interval_ms, "heartbeat period told to workers");
  app.add_option("--client_timeout_ms", f.client_timeout_ms, "a job client silent this long is released");
  app.add_option("--job_gc_grace_ms", f.job_gc_grace_ms, "a job without clients finishes after this long");
  app.add_option("--unused_dataset_retention_ms", f.unused_dataset_retention_ms,
                 "a dataset no job refers to is forgotten after this long (its split list is freed)");
  app.add_option("--finished_jobs_retained", f.finished_jobs_retained,
                 "finished jobs kept for GetState and iteration numbering; older ones are forgotten");
  app.add_option("--max_splits_per_request", f.max_splits_per_request, "GetSplits hands out at most this many splits");
  app.add_option("--max_dataset_splits", f.max_dataset_splits,
                 "a pipeline whose source has more splits is refused at registration (each split costs the "
                 "dispatcher memory and journal space); raise the source's split_size or this");
  app.add_option("--tick_interval_ms", f.tick_interval_ms,
                 "period of the timeout/GC/compaction checks (0: worker_timeout/10 within [10, 500] ms)");
  app.add_option("--dataservice", f.dataservice, "DataService name, the metrics' dataservice label");
  app.add_option("--max_message_bytes", f.max_message_bytes, "gRPC message size limit");
  app.add_option("--shutdown_timeout_ms", f.shutdown_timeout_ms, "SIGTERM/SIGINT: time allowed for running calls");
  app.add_option("--tls_cert", f.tls_cert, "PEM server certificate (enables TLS)");
  app.add_option("--tls_key", f.tls_key, "PEM private key of --tls_cert");
  app.add_option("--tls_ca", f.tls_ca, "PEM CA that client certificates must chain to");
  app.add_flag("--tls_require_client_cert", f.tls_require_client_cert, "mutual TLS: clients must present a certificate");
  app.add_option("--log_level", f.log_level, "debug, info, warning or error");
  app.add_option("--plugin_dir", f.plugin_dirs,
                 "directory whose element-op plugins registered pipelines may name (repeatable or comma-separated; "
                 "symlinks resolved); without it every pipeline naming a plugin is refused")
      ->delimiter(',');
  app.add_option("--pipeline", f.pipeline,
                 "pipeline spec file registered at start-up as the default dataset (jobs with an empty dataset_id "
                 "read it); default: $SLUICE_PIPELINE_FILE, else the spec text in $SLUICE_PIPELINE");
  app.add_flag("--sharing", f.sharing,
               "SHARDING_OFF jobs that do not say otherwise are cross-job shared (default: $SLUICE_SHARING, else false)");
  app.add_option("--auto_order", f.auto_order,
                 "AutoOrder for registered pipelines (docs/autoorder.md): off, strict (exact reorderings, output "
                 "verified identical on a sample) or relaxed (approximate ones too); default: $SLUICE_AUTO_ORDER, else off");
  app.add_option("--auto_order_sample", f.auto_order_sample,
                 "elements AutoOrder reads at each reorderable part of a pipeline to measure and verify it");
  app.add_option("--auto_order_min_speedup", f.auto_order_min_speedup,
                 "AutoOrder applies a verified rewrite only when it measures at least this much faster on the sample "
                 "(0: whenever the cost model predicts a gain)");
}

const char* GetEnv(const EnvLookup& env, const char* name) { return env ? env(name) : std::getenv(name); }

bool OnCommandLine(const std::vector<std::string>& args, const std::string& name) {
  const std::string flag = absl::StrCat("--", name);
  return std::any_of(args.begin(), args.end(),
                     [&](const std::string& a) { return a == flag || absl::StartsWith(a, flag + "="); });
}

absl::StatusOr<std::string> ConfigPath(const std::vector<std::string>& args) {
  std::string path;
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--config") {
      if (i + 1 == args.size()) return absl::InvalidArgumentError("--config: expected a file path");
      path = args[i + 1];
    } else if (absl::StartsWith(args[i], "--config=")) {
      path = args[i].substr(9);
    }
  }
  return path;
}

// The YAML file's entries as "--key=value" arguments, leaving out keys set on the command line.
absl::StatusOr<std::vector<std::string>> ArgsFromConfig(const std::string& path, const std::set<std::string>& known,
                                                        const std::vector<std::string>& command_line) {
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
  if (!root.IsMap()) return absl::InvalidArgumentError(absl::StrCat(path, ": expected a map from flag names to values"));
  for (const auto& entry : root) {
    const int line = entry.first.Mark().line + 1;
    if (!entry.first.IsScalar()) return absl::InvalidArgumentError(absl::StrCat(path, ":", line, ": keys must be flag names"));
    const std::string key = entry.first.Scalar();
    if (key == "config") return absl::InvalidArgumentError(absl::StrCat(path, ":", line, ": 'config' cannot be nested"));
    if (!known.count(key)) {
      return absl::InvalidArgumentError(absl::StrCat(path, ":", line, ": unknown key '", key, "' (known: ",
                                                     absl::StrJoin(known, ", "), ")"));
    }
    if (!entry.second.IsScalar()) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ":", entry.second.Mark().line + 1, ": ", key, ": expected a single value"));
    }
    if (OnCommandLine(command_line, key)) continue;
    out.push_back(absl::StrCat("--", key, "=", entry.second.Scalar()));
  }
  return out;
}

absl::Status Validate(const DispatcherFlags& f) {
  auto invalid = [](auto&&... parts) { return absl::InvalidArgumentError(absl::StrCat(parts...)); };
  if (f.port < 0 || f.port > 65535) return invalid("--port: ", f.port, " is not a port (0 picks one)");
  if (f.metrics_port < -1 || f.metrics_port > 65535) {
    return invalid("--metrics_port: ", f.metrics_port, " is not a port (0 picks one, -1 turns it off)");
  }
  if (auto p = ParseFsyncPolicy(f.fsync); !p.ok()) return p.status();
  const std::pair<const char*, int64_t> positive[] = {
      {"fsync_batch_ms", f.fsync_batch_ms},           {"fsync_batch_records", f.fsync_batch_records},
      {"worker_timeout_ms", f.worker_timeout_ms},     {"heartbeat_interval_ms", f.heartbeat_interval_ms},
      {"client_timeout_ms", f.client_timeout_ms},     {"max_splits_per_request", f.max_splits_per_request},
      {"max_message_bytes", f.max_message_bytes},     {"shutdown_timeout_ms", f.shutdown_timeout_ms},
      {"max_dataset_splits", f.max_dataset_splits}};
  for (const auto& [name, value] : positive) {
    if (value <= 0) return invalid("--", name, ": must be > 0, got ", value);
  }
  const std::pair<const char*, int64_t> non_negative[] = {{"snapshot_every", f.snapshot_every},
                                                          {"job_gc_grace_ms", f.job_gc_grace_ms},
                                                          {"finished_jobs_retained", f.finished_jobs_retained},
                                                          {"unused_dataset_retention_ms", f.unused_dataset_retention_ms},
                                                          {"tick_interval_ms", f.tick_interval_ms}};
  for (const auto& [name, value] : non_negative) {
    if (value < 0) return invalid("--", name, ": must be >= 0, got ", value);
  }
  if (f.heartbeat_interval_ms >= f.worker_timeout_ms) {
    return invalid("--heartbeat_interval_ms (", f.heartbeat_interval_ms, ") must be below --worker_timeout_ms (",
                   f.worker_timeout_ms, "), or every worker times out");
  }
  static const std::set<std::string> kLevels = {"debug", "info", "warning", "error"};
  if (!kLevels.count(f.log_level)) return invalid("--log_level: '", f.log_level, "' is not debug, info, warning or error");
  if (f.tls_cert.empty() != f.tls_key.empty()) return invalid("--tls_cert and --tls_key must be given together");
  if (f.tls_require_client_cert && f.tls_ca.empty()) {
    return invalid("--tls_require_client_cert needs --tls_ca (the CA client certificates must chain to)");
  }
  if (!f.tls_ca.empty() && f.tls_cert.empty()) return invalid("--tls_ca needs --tls_cert and --tls_key (a TLS server)");
  if (auto dirs = pipeline::ResolvePluginDirs(f.plugin_dirs, "--plugin_dir"); !dirs.ok()) return dirs.status();
  if (auto mode = pipeline::ParseAutoOrderMode(f.auto_order); !mode.ok()) return invalid("--auto_order: ", mode.status().message());
  if (f.auto_order_sample < 1) return invalid("--auto_order_sample: must be >= 1, got ", f.auto_order_sample);
  if (!(f.auto_order_min_speedup >= 0)) {
    return invalid("--auto_order_min_speedup: must be >= 0, got ", f.auto_order_min_speedup);
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ParsedDispatcherFlags> ParseDispatcherFlags(const std::vector<std::string>& args, const EnvLookup& env) {
  ParsedDispatcherFlags parsed;
  CLI::App app("sluice-dispatcher: the Sluice data service's dispatcher", "sluice-dispatcher");
  DefineFlags(app, parsed.flags);
  std::set<std::string> known;
  for (const CLI::Option* option : app.get_options()) {
    for (const std::string& name : option->get_lnames()) known.insert(name);
  }
  known.erase("help");
  known.erase("config");
  auto path = ConfigPath(args);
  if (!path.ok()) return path.status();
  std::vector<std::string> all;
  if (!path->empty()) {
    auto from_file = ArgsFromConfig(*path, known, args);
    if (!from_file.ok()) return from_file.status();
    all = *std::move(from_file);
  }
  all.insert(all.end(), args.begin(), args.end());
  std::reverse(all.begin(), all.end());  // CLI11 consumes the vector from the back
  try {
    app.parse(all);
  } catch (const CLI::CallForHelp&) {
    parsed.help = app.help();
    return parsed;
  } catch (const CLI::ParseError& e) {
    return absl::InvalidArgumentError(e.what());
  }
  if (app.count("--sharing") == 0) {
    if (const char* value = GetEnv(env, "SLUICE_SHARING"); value != nullptr && value[0] != '\0') {
      const std::string v = absl::AsciiStrToLower(value);
      if (v == "true" || v == "1" || v == "yes") {
        parsed.flags.sharing = true;
      } else if (v == "false" || v == "0" || v == "no") {
        parsed.flags.sharing = false;
      } else {
        return absl::InvalidArgumentError(absl::StrCat("$SLUICE_SHARING: expected true or false, got '", value, "'"));
      }
    }
  }
  if (app.count("--auto_order") == 0) {
    if (const char* value = GetEnv(env, "SLUICE_AUTO_ORDER"); value != nullptr && value[0] != '\0') {
      if (!pipeline::ParseAutoOrderMode(value).ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat("$SLUICE_AUTO_ORDER: expected off, strict or relaxed, got '", value, "'"));
      }
      parsed.flags.auto_order = value;
    }
  }
  if (absl::Status s = Validate(parsed.flags); !s.ok()) return s;
  return parsed;
}

namespace {

// The plugin paths a spec names (`plugins: [path, {path: p}]`), read without the spec parser
// (which loads them). Unreadable YAML gives none: the parser reports it.
std::vector<std::string> SpecPluginPaths(const std::string& text) {
  std::vector<std::string> paths;
  try {
    YAML::Node root = YAML::Load(text);
    if (!root.IsMap() || !root["plugins"] || !root["plugins"].IsSequence()) return paths;
    for (const YAML::Node& p : root["plugins"]) {
      if (p.IsScalar()) {
        paths.push_back(p.Scalar());
      } else if (p.IsMap() && p["path"] && p["path"].IsScalar()) {
        paths.push_back(p["path"].Scalar());
      }
    }
  } catch (const YAML::Exception&) {
  }
  return paths;
}

}  // namespace

absl::StatusOr<std::optional<DefaultPipeline>> LoadDefaultPipeline(const DispatcherFlags& flags, const EnvLookup& env) {
  std::string source;
  std::string path;
  std::string text;
  if (!flags.pipeline.empty()) {
    path = flags.pipeline;
    source = absl::StrCat("--pipeline '", path, "'");
  } else if (const char* file = GetEnv(env, "SLUICE_PIPELINE_FILE"); file != nullptr && file[0] != '\0') {
    path = file;
    source = absl::StrCat("$SLUICE_PIPELINE_FILE '", path, "'");
  } else if (const char* inline_text = GetEnv(env, "SLUICE_PIPELINE"); inline_text != nullptr && inline_text[0] != '\0') {
    text = inline_text;
    source = "$SLUICE_PIPELINE";
  } else {
    return std::optional<DefaultPipeline>();
  }
  auto fail = [&](absl::string_view message) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": ", message));
  };
  if (!path.empty()) {
    std::ifstream in(path);
    if (!in) return fail("cannot read the file");
    std::stringstream contents;
    contents << in.rdbuf();
    text = contents.str();
  }
  auto dirs = pipeline::ResolvePluginDirs(flags.plugin_dirs, "--plugin_dir");
  if (!dirs.ok()) return fail(dirs.status().message());
  std::vector<std::string> plugins = SpecPluginPaths(text);
  for (size_t i = 0; i < plugins.size(); ++i) {
    if (auto checked = pipeline::CheckPluginPath(plugins[i], *dirs, "--plugin_dir"); !checked.ok()) {
      return fail(absl::StrCat("plugins[", i, "]: ", checked.status().message()));
    }
  }
  auto def = pipeline::ParsePipelineSpec(text, path.empty() ? "$SLUICE_PIPELINE" : path);
  if (!def.ok()) return fail(def.status().message());
  return std::optional<DefaultPipeline>(DefaultPipeline{*std::move(def), source});
}

DispatcherOptions ServiceOptionsFromFlags(const DispatcherFlags& f) {
  DispatcherOptions o;
  o.worker_timeout = absl::Milliseconds(f.worker_timeout_ms);
  o.heartbeat_interval = absl::Milliseconds(f.heartbeat_interval_ms);
  o.client_timeout = absl::Milliseconds(f.client_timeout_ms);
  o.job_gc_grace = absl::Milliseconds(f.job_gc_grace_ms);
  o.snapshot_every = f.snapshot_every;
  o.finished_jobs_retained = f.finished_jobs_retained;
  o.unused_dataset_retention = absl::Milliseconds(f.unused_dataset_retention_ms);
  o.max_splits_per_request = f.max_splits_per_request;
  o.max_dataset_splits = f.max_dataset_splits;
  o.dataservice = f.dataservice;
  o.plugin_dirs = f.plugin_dirs;
  o.default_cross_job_sharing = f.sharing;
  o.auto_order.mode = pipeline::ParseAutoOrderMode(f.auto_order).value_or(pipeline::AutoOrderMode::kOff);
  o.auto_order.sample_elements = f.auto_order_sample;
  o.auto_order.min_measured_speedup = f.auto_order_min_speedup;
  return o;
}

JournalOptions JournalOptionsFromFlags(const DispatcherFlags& f) {
  JournalOptions o;
  o.dir = f.journal_dir;
  o.fsync = ParseFsyncPolicy(f.fsync).value_or(FsyncPolicy::kBatch);
  o.batch_interval = absl::Milliseconds(f.fsync_batch_ms);
  o.batch_records = f.fsync_batch_records;
  return o;
}

DispatcherServerOptions ServerOptionsFromFlags(const DispatcherFlags& f) {
  DispatcherServerOptions o;
  o.address = absl::StrCat(f.listen_host.find(':') != std::string::npos ? absl::StrCat("[", f.listen_host, "]")
                                                                        : f.listen_host,
                           ":", f.port);
  o.tls.cert_file = f.tls_cert;
  o.tls.key_file = f.tls_key;
  o.tls.ca_file = f.tls_ca;
  o.tls.require_client_cert = f.tls_require_client_cert;
  o.max_message_bytes = f.max_message_bytes;
  return o;
}

absl::Duration TickInterval(const DispatcherFlags& f) {
  if (f.tick_interval_ms > 0) return absl::Milliseconds(f.tick_interval_ms);
  return std::clamp(absl::Milliseconds(f.worker_timeout_ms) / 10, absl::Milliseconds(10), absl::Milliseconds(500));
}

}  // namespace sluice::dispatcher
