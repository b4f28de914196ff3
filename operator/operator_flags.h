// The command line of sluice-operator: the flag values, their registration with CLI11, and the
// checks that turn them into options (every error names the flag and says what is expected).
// Pure value code: no I/O; safe on any thread.
#ifndef SLUICE_OPERATOR_OPERATOR_FLAGS_H_
#define SLUICE_OPERATOR_OPERATOR_FLAGS_H_

#include <optional>
#include <string>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace sluice::op {

struct OperatorFlags {
  // Connection.
  std::string kubeconfig;  // "" = $KUBECONFIG, ~/.kube/config, then in-cluster
  std::string context;
  double kube_qps = 50;
  int kube_burst = 100;
  // What to watch and how hard to work.
  std::string watch_namespace;  // "" = all namespaces
  int concurrency = 2;
  double resync_seconds = 30;
  double sync_timeout_seconds = 60;
  double expectations_timeout_seconds = 300;
  double status_coalesce_seconds = 2;  // count-only status changes: at most one write per window
  // Draining workers through the dispatcher (DataService deletion, scale-down).
  double drain_timeout_seconds = 600;
  double drain_poll_seconds = 5;
  double drain_rpc_timeout_seconds = 5;
  // Scale-down: drain each worker pod removed through the dispatcher for at most this long before
  // deleting it; 0 deletes at once (each pod then relies on its SIGTERM hand-back).
  double scale_down_drain_timeout_seconds = 120;
  std::string dispatcher_tls_ca;
  std::string dispatcher_tls_cert;
  std::string dispatcher_tls_key;
  std::string dispatcher_tls_server_name;
  // Leader election.
  bool leader_elect = false;
  std::string lease_namespace;  // "" = the kubeconfig's (or service account's) namespace
  std::string lease_name = "sluice-operator";
  std::string identity;         // "" = $POD_NAME, else the host name
  double lease_duration_seconds = 15;
  double renew_deadline_seconds = 10;
  double retry_period_seconds = 2;
  // Observability.
  std::string metrics_address = ":8080";  // /metrics (and /healthz, /readyz); "off" disables
  std::string health_address = ":8081";   // /healthz, /readyz; "off" disables; may equal metrics_address
  std::string log_level = "info";
};

// Registers every flag on `app`, writing into `flags`.
void AddOperatorFlags(CLI::App& app, OperatorFlags& flags);

// Cross-flag checks CLI11 cannot express (TLS pairs, leader-election timing, log level, addresses).
absl::Status ValidateOperatorFlags(const OperatorFlags& flags);

// "host:port", ":port" (all interfaces) or "off" (nullopt). Port 0 picks a free port.
// Errors name `flag`.
absl::StatusOr<std::optional<std::string>> ParseListenAddress(const std::string& value, const std::string& flag);

}  // namespace sluice::op

#endif  // SLUICE_OPERATOR_OPERATOR_FLAGS_H_
