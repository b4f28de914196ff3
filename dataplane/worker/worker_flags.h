// The sluice-worker command line: CLI11 flags and an optional YAML config file (--config) whose
// keys are the flag names without dashes; flags given on the command line override the file.
// Stateless; thread-safe.
#ifndef SLUICE_DATAPLANE_WORKER_WORKER_FLAGS_H_
#define SLUICE_DATAPLANE_WORKER_WORKER_FLAGS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "dataplane/rpc/credentials.h"
#include "dataplane/worker/worker_impl.h"

namespace sluice::worker {

struct WorkerFlags {
  std::string config;
  int port = 0;                        // gRPC; 0 picks a free port
  int metrics_port = 0;                // admin server (/metrics, /healthz, /readyz); 0 picks, -1 disables
  std::string listen_host = "0.0.0.0";
  std::string dispatcher_address;
  std::string worker_address;          // default 127.0.0.1:<port>
  std::string host;                    // default: $SLUICE_WORKER_HOST, else gethostname()
  std::vector<std::string> plugin_dirs;  // --plugin_dir (repeatable, comma-separated): allowed plugin directories
  std::string placement = "remote";    // local | remote
  std::string dataservice;
  int64_t heartbeat_interval_ms = 500;
  int64_t round_timeout_ms = 1000;
  int64_t sharing_window_elements = 256;
  int64_t buffer_bytes = 64 << 20;
  int64_t buffer_elements = 256;
  int64_t buffer_min_bytes = 4 << 20;
  int64_t max_undelivered_elements = 0;    // per streaming task; 0: no cap
  int64_t split_lease_elements = 32;        // dynamic sharding: first position lease of a split
  int64_t split_lease_max_elements = 2048;  // ... doubling per renewal up to this
  int64_t task_wait_ms = 2000;
  int cpu_budget = 0;
  int max_message_bytes = rpc::kDefaultMaxMessageBytes;
  int64_t shutdown_timeout_ms = 1800;
  std::string tls_cert;
  std::string tls_key;
  std::string tls_ca;
  bool tls_require_client_cert = false;
  std::string tls_server_name;
  std::string log_level = "info";
  // Same-host shared memory for element payloads (shm_stream.h): the ring directory (empty: off)
  // and each stream's ring size (0: off).
  std::string shm_dir = "/dev/shm";
  int64_t shm_ring_bytes = int64_t{32} << 20;
};

struct ParsedFlags {
  WorkerFlags flags;
  std::string help;  // non-empty: --help was asked for; print it and exit 0
};

// `args` excludes the program name. Errors name the flag or the config file and key.
absl::StatusOr<ParsedFlags> ParseWorkerFlags(const std::vector<std::string>& args);

// The worker's host for locality: `flag` if set, else $SLUICE_WORKER_HOST, else gethostname(),
// else the host part of `worker_address`.
std::string ResolveWorkerHost(const std::string& flag, const std::string& worker_address);

// Builds the worker's configuration from validated flags; `port` is the gRPC port actually bound.
absl::StatusOr<WorkerConfig> MakeWorkerConfig(const WorkerFlags& flags, int port);
// TLS settings for the server and for the channel to the dispatcher.
rpc::TlsOptions TlsFromFlags(const WorkerFlags& flags);

}  // namespace sluice::worker

#endif  // SLUICE_DATAPLANE_WORKER_WORKER_FLAGS_H_
