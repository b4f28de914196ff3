// The command line of sluice-autoscaler: the flag values, their registration with CLI11, an
// optional YAML config file (--config) whose keys are the flag names (without the dashes in front;
// "prometheus-url" or "prometheus_url"), and the checks that turn them into the controller's,
// sources' and leader election's options. A flag given on the command line wins over the file.
// Every error names the flag (or the file, line and key) and says what is expected.
// Pure value code apart from reading the config file; safe on any thread.
#ifndef SLUICE_AUTOSCALER_DAEMON_AUTOSCALER_FLAGS_H_
#define SLUICE_AUTOSCALER_DAEMON_AUTOSCALER_FLAGS_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "autoscaler/controller/autoscaling_plan.h"
#include "autoscaler/sources/http_fetch.h"
#include "autoscaler/sources/prometheus_source.h"
#include "autoscaler/sources/scrape_source.h"

namespace sluice::autoscaler {

struct AutoscalerFlags {
  std::string config;  // YAML file of flag values
  // Connection.
  std::string kubeconfig;  // "" = $KUBECONFIG, ~/.kube/config, then in-cluster
  std::string context;
  double kube_qps = 20;
  int kube_burst = 40;
  // What to watch and how often to decide.
  std::string watch_namespace;  // "" = all namespaces
  int concurrency = 2;
  std::string period = "15s";           // decision period per DataService
  std::string status_interval = "60s";  // unchanged status.autoscaler rewritten at most this often
  std::string sync_timeout = "60s";
  std::string keda = "auto";            // watch KEDA ScaledObjects: auto (when the API is served) | on | off
  // Signals.
  std::string prometheus_url;           // "" = direct scrape, unless a DataService names its own
  std::string prometheus_bearer_token_file;
  std::string prometheus_basic_auth_user;
  std::string prometheus_basic_auth_password_file;
  std::string prometheus_ca_file;
  std::string prometheus_cert_file;
  std::string prometheus_key_file;
  bool prometheus_insecure_skip_verify = false;
  std::string prometheus_timeout = "5s";
  std::string prometheus_namespace_label = "namespace";
  std::string prometheus_dataservice_label = "dataservice";
  std::string window = "1m";            // rate window of both sources
  std::string scrape_timeout = "2s";
  std::string max_signal_age = "2m";    // older signals are stale: hold
  std::string settle_time = "30s";      // after a change, wait this long before judging its effect
  // Leader election.
  bool leader_elect = false;
  std::string lease_namespace;  // "" = the kubeconfig's (or service account's) namespace
  std::string lease_name = "sluice-autoscaler";
  std::string identity;         // "" = $POD_NAME, else the host name
  double lease_duration_seconds = 15;
  double renew_deadline_seconds = 10;
  double retry_period_seconds = 2;
  // Observability.
  std::string metrics_address = ":8080";  // /metrics (and /healthz, /readyz); "off" disables
  std::string health_address = ":8081";   // /healthz, /readyz; "off" disables; may equal metrics_address
  int metrics_port = -1;                  // shorthand for --metrics-address=:PORT (-1: unset)
  int health_port = -1;                   // shorthand for --health-address=:PORT
  std::string log_level = "info";
};

// The checked form of the flags.
struct AutoscalerSettings {
  AutoscalerFlags flags;
  absl::Duration period, status_interval, sync_timeout;
  enum class Keda { kAuto, kOn, kOff } keda = Keda::kAuto;
  GlobalSettings global;
  PrometheusOptions prometheus;
  ScrapeOptions scrape;
  std::optional<std::string> metrics_address;  // "host:port"; nullopt: none
  std::optional<std::string> health_address;
};

struct ParsedAutoscalerFlags {
  AutoscalerSettings settings;
  std::string help;  // non-empty: --help was asked for; print it and exit 0
};

// `args` excludes the program name.
absl::StatusOr<ParsedAutoscalerFlags> ParseAutoscalerFlags(const std::vector<std::string>& args);

// "15s", "1m30s", "500ms" or a plain number of seconds; must be > 0. Errors name `flag`.
absl::StatusOr<absl::Duration> ParseFlagDuration(const std::string& value, const std::string& flag);

// "host:port", ":port" (all interfaces) or "off" (nullopt). Port 0 picks a free port. Errors name `flag`.
absl::StatusOr<std::optional<std::string>> ParseListenAddress(const std::string& value, const std::string& flag);

}  // namespace sluice::autoscaler

#endif  // SLUICE_AUTOSCALER_DAEMON_AUTOSCALER_FLAGS_H_
