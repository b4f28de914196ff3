#include "operator/operator_flags.h"

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace sluice::op {

void AddOperatorFlags(CLI::App& app, OperatorFlags& f) {
  app.add_option("--kubeconfig", f.kubeconfig, "kubeconfig file (default: $KUBECONFIG, ~/.kube/config, in-cluster)");
  app.add_option("--context", f.context, "kubeconfig context (default: the current context)");
  app.add_option("--kube-qps", f.kube_qps, "client-side limit on API requests per second (0: none)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--kube-burst", f.kube_burst, "requests allowed above --kube-qps in a burst")->check(CLI::Range(1, 100000));
  app.add_option("--namespace,--watch-namespace", f.watch_namespace,
                 "only reconcile DataServices of this namespace (default: all namespaces)");
  app.add_option("--concurrency,--workers", f.concurrency, "DataServices reconciled at the same time")
      ->check(CLI::Range(1, 64));
  app.add_option("--resync-seconds", f.resync_seconds, "reconcile DataServices with local placement at least this often")
      ->check(CLI::PositiveNumber);
  app.add_option("--sync-timeout-seconds", f.sync_timeout_seconds, "how long to wait for the informer caches")
      ->check(CLI::PositiveNumber);
  app.add_option("--expectations-timeout-seconds", f.expectations_timeout_seconds,
                 "give up waiting to observe own creates/deletes after this long")
      ->check(CLI::PositiveNumber);
  app.add_option("--status-coalesce-seconds", f.status_coalesce_seconds,
                 "write status changes of counts and messages at most this often per DataService (0: at once)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--drain-timeout-seconds", f.drain_timeout_seconds,
                 "release a deleted DataService whose workers have not drained after this long")
      ->check(CLI::PositiveNumber);
  app.add_option("--drain-poll-seconds", f.drain_poll_seconds, "ask the dispatcher about a drain this often")
      ->check(CLI::PositiveNumber);
  app.add_option("--scale-down-drain-timeout-seconds", f.scale_down_drain_timeout_seconds,
                 "drain a worker pod a scale-down removes through the dispatcher for at most this long before "
                 "deleting it (0: delete at once; the pod then hands its input back on SIGTERM)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--drain-rpc-timeout-seconds", f.drain_rpc_timeout_seconds, "deadline of each call to a dispatcher")
      ->check(CLI::PositiveNumber);
  app.add_option("--dispatcher-tls-ca", f.dispatcher_tls_ca, "PEM CA that dispatchers' certificates chain to (enables TLS)");
  app.add_option("--dispatcher-tls-cert", f.dispatcher_tls_cert, "PEM client certificate for dispatchers requiring mTLS");
  app.add_option("--dispatcher-tls-key", f.dispatcher_tls_key, "PEM private key of --dispatcher-tls-cert");
  app.add_option("--dispatcher-tls-server-name", f.dispatcher_tls_server_name,
                 "name expected in dispatcher certificates (default: the dispatcher Service's DNS name)");
  app.add_flag("--leader-elect", f.leader_elect, "act only while holding the leader Lease (--leader-elect=false: always act)");
  app.add_option("--lease-namespace", f.lease_namespace, "namespace of the leader Lease (default: the config's namespace)");
  app.add_option("--lease-name", f.lease_name, "name of the leader Lease");
  app.add_option("--identity", f.identity, "leader-election identity and event reportingInstance (default: $POD_NAME or hostname)");
  app.add_option("--lease-duration-seconds", f.lease_duration_seconds, "a leader silent this long is replaced")
      ->check(CLI::PositiveNumber);
  app.add_option("--renew-deadline-seconds", f.renew_deadline_seconds, "a leader that cannot renew this long steps down")
      ->check(CLI::PositiveNumber);
  app.add_option("--retry-period-seconds", f.retry_period_seconds, "how often to renew or try to acquire the Lease")
      ->check(CLI::PositiveNumber);
  app.add_option("--metrics-address,--metrics-bind-address", f.metrics_address,
                 "host:port (or :port) serving /metrics, /healthz and /readyz; off: none");
  app.add_option("--health-address,--health-probe-bind-address", f.health_address,
                 "host:port (or :port) serving /healthz and /readyz; may equal --metrics-address; off: none");
  app.add_option("--log-level", f.log_level, "debug, info, warning or error");
}

absl::StatusOr<std::optional<std::string>> ParseListenAddress(const std::string& value, const std::string& flag) {
  if (value == "off") return std::optional<std::string>();
  auto colon = value.rfind(':');
  int port = -1;
  if (colon == std::string::npos || !absl::SimpleAtoi(value.substr(colon + 1), &port) || port < 0 || port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat(flag, " '", value,
                                                   "' is not host:port, :port (all interfaces) or off; e.g. :8080"));
  }
  std::string host = value.substr(0, colon);
  if (host.empty()) host = "0.0.0.0";
  return std::optional<std::string>(absl::StrCat(host, ":", port));
}

absl::Status ValidateOperatorFlags(const OperatorFlags& f) {
  std::string level = absl::AsciiStrToLower(f.log_level);
  if (level != "debug" && level != "info" && level != "warning" && level != "error") {
    return absl::InvalidArgumentError(absl::StrCat("--log-level '", f.log_level, "' must be debug, info, warning or error"));
  }
  if (f.dispatcher_tls_cert.empty() != f.dispatcher_tls_key.empty()) {
    return absl::InvalidArgumentError("--dispatcher-tls-cert and --dispatcher-tls-key must be given together");
  }
  if (!f.dispatcher_tls_cert.empty() && f.dispatcher_tls_ca.empty()) {
    return absl::InvalidArgumentError("--dispatcher-tls-cert needs --dispatcher-tls-ca (the CA of the dispatchers)");
  }
  if (f.leader_elect) {
    if (f.lease_name.empty()) return absl::InvalidArgumentError("--lease-name must not be empty with --leader-elect");
    if (f.renew_deadline_seconds >= f.lease_duration_seconds) {
      return absl::InvalidArgumentError(absl::StrCat("--renew-deadline-seconds (", f.renew_deadline_seconds,
                                                     ") must be less than --lease-duration-seconds (",
                                                     f.lease_duration_seconds, ")"));
    }
    if (f.retry_period_seconds >= f.renew_deadline_seconds) {
      return absl::InvalidArgumentError(absl::StrCat("--retry-period-seconds (", f.retry_period_seconds,
                                                     ") must be less than --renew-deadline-seconds (",
                                                     f.renew_deadline_seconds, ")"));
    }
  }
  if (f.drain_poll_seconds > f.drain_timeout_seconds) {
    return absl::InvalidArgumentError(absl::StrCat("--drain-poll-seconds (", f.drain_poll_seconds,
                                                   ") must not exceed --drain-timeout-seconds (",
                                                   f.drain_timeout_seconds, ")"));
  }
  if (f.scale_down_drain_timeout_seconds > 0 && f.drain_poll_seconds > f.scale_down_drain_timeout_seconds) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--drain-poll-seconds (", f.drain_poll_seconds, ") must not exceed --scale-down-drain-timeout-seconds (",
        f.scale_down_drain_timeout_seconds, "); raise the timeout, or set it to 0 to delete scaled-down pods at once"));
  }
  if (auto m = ParseListenAddress(f.metrics_address, "--metrics-address"); !m.ok()) return m.status();
  if (auto h = ParseListenAddress(f.health_address, "--health-address"); !h.ok()) return h.status();
  return absl::OkStatus();
}

}  // namespace sluice::op
