// The sluice-dispatcher command line: CLI11 flags plus an optional YAML config file (--config)
// whose keys are the flag names (underscores, no dashes); a flag given on the command line wins
// over the file. Also turns the flags into the service's, journal's and server's options.
// Stateless; thread-safe.
#ifndef SLUICE_DATAPLANE_DISPATCHER_DISPATCHER_FLAGS_H_
#define SLUICE_DATAPLANE_DISPATCHER_DISPATCHER_FLAGS_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "dataplane/dispatcher/dispatcher_impl.h"
#include "dataplane/dispatcher/grpc_dispatcher.h"
#include "dataplane/dispatcher/journal.h"

namespace sluice::dispatcher {

struct DispatcherFlags {
  std::string config;
  std::string listen_host = "0.0.0.0";
  int port = 5050;                     // gRPC; 0 picks a free port
  int metrics_port = 0;                // admin server: /metrics, /healthz, /readyz; 0 picks, -1 off
  std::string journal_dir;             // empty: state in memory only (lost on restart)
  std::string fsync = "batch";         // always | batch | never
  int64_t fsync_batch_ms = 100;
  int64_t fsync_batch_records = 256;
  int64_t snapshot_every = 10000;      // updates between journal snapshots; 0: never
  int64_t worker_timeout_ms = 5000;
  int64_t heartbeat_interval_ms = 500;
  int64_t client_timeout_ms = 60000;
  int64_t job_gc_grace_ms = 300000;
  int64_t finished_jobs_retained = 1000;  // older finished jobs are forgotten
  int64_t unused_dataset_retention_ms = 3600000;  // a dataset no job uses is forgotten after this
  int max_splits_per_request = 256;
  int64_t max_dataset_splits = kDefaultMaxDatasetSplits;  // a registered dataset may have at most this many splits
  int64_t tick_interval_ms = 0;        // periodic checks; 0: worker_timeout/10 within [10, 500] ms
  std::string dataservice;
  int max_message_bytes = rpc::kDefaultMaxMessageBytes;
  int64_t shutdown_timeout_ms = 1500;
  std::string tls_cert;
  std::string tls_key;
  std::string tls_ca;
  bool tls_require_client_cert = false;
  std::string log_level = "info";
  std::vector<std::string> plugin_dirs;  // --plugin_dir (repeatable, comma-separated): allowed plugin directories
  std::string pipeline;                // --pipeline FILE: the default dataset (else $SLUICE_PIPELINE_FILE / $SLUICE_PIPELINE)
  bool sharing = false;                // --sharing (default $SLUICE_SHARING): OFF jobs are cross-job shared by default
  std::string auto_order = "off";      // --auto_order (default $SLUICE_AUTO_ORDER): off | strict | relaxed
  int64_t auto_order_sample = 64;      // --auto_order_sample: elements AutoOrder samples per reorderable part
  double auto_order_min_speedup = 1.02;  // --auto_order_min_speedup: rewrites measured slower are not applied
};

struct ParsedDispatcherFlags {
  DispatcherFlags flags;
  std::string help;  // non-empty: --help was asked for; print it and exit 0
};

// Environment lookup (getenv by default; tests pass their own). Returns null when unset.
using EnvLookup = std::function<const char*(const char*)>;

// `args` excludes the program name. Errors name the flag, or the config file, line and key.
// --sharing not given on the command line or in the config takes $SLUICE_SHARING (true/false);
// --auto_order likewise takes $SLUICE_AUTO_ORDER (off, strict or relaxed: what the operator sets from
// the DataService's spec.autoOrder).
absl::StatusOr<ParsedDispatcherFlags> ParseDispatcherFlags(const std::vector<std::string>& args,
                                                           const EnvLookup& env = nullptr);

// The dispatcher's default pipeline: --pipeline FILE, else the file $SLUICE_PIPELINE_FILE names,
// else the spec text in $SLUICE_PIPELINE (what the operator sets from spec.pipeline); nullopt when
// none is set. Plugins the spec names are checked against --plugin_dir before the spec is parsed
// (parsing loads them). Errors name the source ("--pipeline 'p.yaml': p.yaml:3:5: ...").
struct DefaultPipeline {
  pipeline::PipelineDef def;
  std::string source;  // e.g. "--pipeline 'p.yaml'", "$SLUICE_PIPELINE"
};
absl::StatusOr<std::optional<DefaultPipeline>> LoadDefaultPipeline(const DispatcherFlags& flags,
                                                                   const EnvLookup& env = nullptr);

DispatcherOptions ServiceOptionsFromFlags(const DispatcherFlags& flags);
JournalOptions JournalOptionsFromFlags(const DispatcherFlags& flags);  // flags validated: fsync parses
DispatcherServerOptions ServerOptionsFromFlags(const DispatcherFlags& flags);
absl::Duration TickInterval(const DispatcherFlags& flags);

}  // namespace sluice::dispatcher

#endif  // SLUICE_DATAPLANE_DISPATCHER_DISPATCHER_FLAGS_H_
