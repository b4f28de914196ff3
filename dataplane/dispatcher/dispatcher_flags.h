// The sluice-dispatcher command line: CLI11 flags plus an optional YAML config file (--config)
// whose keys are the flag names (underscores, no dashes); a flag given on the command line wins
// over the file. Also turns the flags into the service's, journal's and server's options.
// Stateless; thread-safe.
#ifndef SLUICE_DATAPLANE_DISPATCHER_DISPATCHER_FLAGS_H_
#define SLUICE_DATAPLANE_DISPATCHER_DISPATCHER_FLAGS_H_

#include <cstdint>
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
  int64_t tick_interval_ms = 0;        // periodic checks; 0: worker_timeout/10 within [10, 500] ms
  std::string dataservice;
  int max_message_bytes = rpc::kDefaultMaxMessageBytes;
  int64_t shutdown_timeout_ms = 1500;
  std::string tls_cert;
  std::string tls_key;
  std::string tls_ca;
  bool tls_require_client_cert = false;
  std::string log_level = "info";
};

struct ParsedDispatcherFlags {
  DispatcherFlags flags;
  std::string help;  // non-empty: --help was asked for; print it and exit 0
};

// `args` excludes the program name. Errors name the flag, or the config file, line and key.
absl::StatusOr<ParsedDispatcherFlags> ParseDispatcherFlags(const std::vector<std::string>& args);

DispatcherOptions ServiceOptionsFromFlags(const DispatcherFlags& flags);
JournalOptions JournalOptionsFromFlags(const DispatcherFlags& flags);  // flags validated: fsync parses
DispatcherServerOptions ServerOptionsFromFlags(const DispatcherFlags& flags);
absl::Duration TickInterval(const DispatcherFlags& flags);

}  // namespace sluice::dispatcher

#endif  // SLUICE_DATAPLANE_DISPATCHER_DISPATCHER_FLAGS_H_
