#include "autoscaler/daemon/autoscaler_flags.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <set>

#include "CLI/CLI.hpp"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"

namespace sluice::autoscaler {
namespace {

void DefineFlags(CLI::App& app, AutoscalerFlags& f) {
  app.add_option("--config", f.config, "YAML file of flag values (keys are flag names); command-line flags win");
  // Connection.
  app.add_option("--kubeconfig", f.kubeconfig, "kubeconfig file (default: $KUBECONFIG, ~/.kube/config, in-cluster)");
  app.add_option("--context", f.context, "kubeconfig context (default: the current context)");
  app.add_option("--kube-qps", f.kube_qps, "client-side limit on API requests per second (0: none)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--kube-burst", f.kube_burst, "requests allowed above --kube-qps in a burst")->check(CLI::Range(1, 100000));
  // Work.
  app.add_option("--namespace,--watch-namespace", f.watch_namespace,
                 "only autoscale DataServices of this namespace (default: all namespaces)");
  app.add_option("--concurrency,--workers", f.concurrency, "DataServices decided at the same time")
      ->check(CLI::Range(1, 64));
  app.add_option("--period", f.period, "decision period of each autoscaled DataService (e.g. 15s)");
  app.add_option("--status-interval", f.status_interval,
                 "rewrite an unchanged status.autoscaler at most this often (changes are written at once)");
  app.add_option("--sync-timeout", f.sync_timeout, "how long to wait for the informer caches");
  app.add_option("--keda", f.keda,
                 "watch KEDA ScaledObjects naming a DataService: auto (when keda.sh/v1alpha1 is served), on, off");
  // Signals.
  app.add_option("--prometheus-url", f.prometheus_url,
                 "Prometheus base URL for DataServices that name none (default: scrape dispatchers and workers directly)");
  app.add_option("--prometheus-bearer-token-file", f.prometheus_bearer_token_file,
                 "file holding a bearer token for Prometheus (re-read at each request)");
  app.add_option("--prometheus-basic-auth-user", f.prometheus_basic_auth_user, "basic-auth user for Prometheus");
  app.add_option("--prometheus-basic-auth-password-file", f.prometheus_basic_auth_password_file,
                 "file holding the basic-auth password for Prometheus");
  app.add_option("--prometheus-ca-file", f.prometheus_ca_file, "PEM CA bundle to verify Prometheus' certificate");
  app.add_option("--prometheus-cert-file", f.prometheus_cert_file, "PEM client certificate for Prometheus (mutual TLS)");
  app.add_option("--prometheus-key-file", f.prometheus_key_file, "PEM private key of --prometheus-cert-file");
  app.add_flag("--prometheus-insecure-skip-verify", f.prometheus_insecure_skip_verify,
               "do not verify Prometheus' certificate (testing only)");
  app.add_option("--prometheus-timeout", f.prometheus_timeout, "deadline of each Prometheus query (e.g. 5s)");
  app.add_option("--prometheus-namespace-label", f.prometheus_namespace_label,
                 "label carrying the namespace on Sluice's series (\"\": none)");
  app.add_option("--prometheus-dataservice-label", f.prometheus_dataservice_label,
                 "label carrying the DataService name on Sluice's series");
  app.add_option("--window", f.window, "rate window of the signals (e.g. 1m)");
  app.add_option("--scrape-timeout", f.scrape_timeout, "deadline of each direct scrape of a /metrics page");
  app.add_option("--max-signal-age", f.max_signal_age, "signals older than this are stale: hold, never scale down");
  app.add_option("--settle-time", f.settle_time, "after a change, wait this long before judging its effect");
  // Leader election.
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
  // Observability.
  app.add_option("--metrics-address,--metrics-bind-address", f.metrics_address,
                 "host:port (or :port) serving /metrics, /healthz and /readyz; off: none");
  app.add_option("--health-address,--health-probe-bind-address", f.health_address,
                 "host:port (or :port) serving /healthz and /readyz; may equal --metrics-address; off: none");
  app.add_option("--metrics-port", f.metrics_port, "shorthand for --metrics-address=:PORT")->check(CLI::Range(0, 65535));
  app.add_option("--health-port", f.health_port, "shorthand for --health-address=:PORT")->check(CLI::Range(0, 65535));
  app.add_option("--log-level", f.log_level, "debug, info, warning or error");
}

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

// The YAML file's entries as "--key=value" arguments, leaving out flags set on the command line
// (under any of their names).
absl::StatusOr<std::vector<std::string>> ArgsFromConfig(const std::string& path, const CLI::App& app,
                                                        const std::set<std::string>& known,
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
  try {
    for (const auto& entry : root) {
      const int line = entry.first.Mark().line + 1;
      if (!entry.first.IsScalar()) {
        return absl::InvalidArgumentError(absl::StrCat(path, ":", line, ": keys must be flag names"));
      }
      const std::string key = absl::StrReplaceAll(entry.first.Scalar(), {{"_", "-"}});
      if (key == "config") return absl::InvalidArgumentError(absl::StrCat(path, ":", line, ": 'config' cannot be nested"));
      if (!known.count(key)) {
        return absl::InvalidArgumentError(absl::StrCat(path, ":", line, ": unknown key '", entry.first.Scalar(),
                                                       "' (known: ", absl::StrJoin(known, ", "), ")"));
      }
      if (!entry.second.IsScalar()) {
        return absl::InvalidArgumentError(
            absl::StrCat(path, ":", entry.second.Mark().line + 1, ": ", key, ": expected a single value"));
      }
      const CLI::Option* option = app.get_option_no_throw("--" + key);
      bool given = false;
      if (option != nullptr) {
        for (const std::string& name : option->get_lnames()) given = given || OnCommandLine(command_line, name);
      }
      if (given) continue;
      out.push_back(absl::StrCat("--", key, "=", entry.second.Scalar()));
    }
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(path, ":", e.mark.line + 1, ": ", e.msg));
  }
  return out;
}

bool Readable(const std::string& path) {
  std::ifstream in(path);
  return in.good();
}

}  // namespace

absl::StatusOr<absl::Duration> ParseFlagDuration(const std::string& value, const std::string& flag) {
  absl::Duration d;
  double seconds = 0;
  if (absl::SimpleAtod(value, &seconds)) {
    if (!std::isfinite(seconds)) {
      return absl::InvalidArgumentError(absl::StrCat(flag, " '", value, "' must be a positive, finite duration"));
    }
    d = absl::Seconds(seconds);
  } else if (!absl::ParseDuration(value, &d)) {
    return absl::InvalidArgumentError(absl::StrCat(flag, " '", value, "' is not a duration (e.g. 15s, 1m30s, 500ms)"));
  }
  if (!(d > absl::ZeroDuration()) || d == absl::InfiniteDuration()) {
    return absl::InvalidArgumentError(absl::StrCat(flag, " '", value, "' must be a positive, finite duration"));
  }
  return d;
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

namespace {

absl::StatusOr<AutoscalerSettings> Check(const AutoscalerFlags& f) {
  auto invalid = [](auto&&... parts) { return absl::InvalidArgumentError(absl::StrCat(parts...)); };
  AutoscalerSettings s;
  s.flags = f;
  const std::string level = absl::AsciiStrToLower(f.log_level);
  if (level != "debug" && level != "info" && level != "warning" && level != "error") {
    return invalid("--log-level '", f.log_level, "' must be debug, info, warning or error");
  }
  struct DurationFlag {
    const char* flag;
    const std::string* value;
    absl::Duration* out;
  };
  absl::Duration prometheus_timeout, window, scrape_timeout, max_age, settle;
  for (const DurationFlag& d : std::initializer_list<DurationFlag>{
           {"--period", &f.period, &s.period},
           {"--status-interval", &f.status_interval, &s.status_interval},
           {"--sync-timeout", &f.sync_timeout, &s.sync_timeout},
           {"--prometheus-timeout", &f.prometheus_timeout, &prometheus_timeout},
           {"--window", &f.window, &window},
           {"--scrape-timeout", &f.scrape_timeout, &scrape_timeout},
           {"--max-signal-age", &f.max_signal_age, &max_age},
           {"--settle-time", &f.settle_time, &settle}}) {
    auto parsed = ParseFlagDuration(*d.value, d.flag);
    if (!parsed.ok()) return parsed.status();
    *d.out = *parsed;
  }
  if (s.period < absl::Seconds(1)) return invalid("--period '", f.period, "' must be at least 1s");
  if (window < s.period) {
    return invalid("--window (", f.window, ") must be at least --period (", f.period,
                   "): each decision needs a rate over at least one period");
  }
  if (max_age <= s.period) {
    return invalid("--max-signal-age (", f.max_signal_age, ") must be longer than --period (", f.period,
                   "), or every decision would hold on stale data");
  }
  const std::string keda = absl::AsciiStrToLower(f.keda);
  if (keda == "auto") {
    s.keda = AutoscalerSettings::Keda::kAuto;
  } else if (keda == "on" || keda == "true") {
    s.keda = AutoscalerSettings::Keda::kOn;
  } else if (keda == "off" || keda == "false") {
    s.keda = AutoscalerSettings::Keda::kOff;
  } else {
    return invalid("--keda '", f.keda, "' must be auto, on or off");
  }

  // Prometheus.
  if (!f.prometheus_url.empty()) {
    if (!absl::StartsWith(f.prometheus_url, "http://") && !absl::StartsWith(f.prometheus_url, "https://")) {
      return invalid("--prometheus-url '", f.prometheus_url, "' must start with http:// or https://");
    }
    s.global.prometheus_url = f.prometheus_url;
  }
  if (!f.prometheus_bearer_token_file.empty() && !f.prometheus_basic_auth_user.empty()) {
    return invalid("--prometheus-bearer-token-file and --prometheus-basic-auth-user exclude each other");
  }
  if (f.prometheus_basic_auth_user.empty() != f.prometheus_basic_auth_password_file.empty()) {
    return invalid("--prometheus-basic-auth-user and --prometheus-basic-auth-password-file must be given together");
  }
  if (f.prometheus_cert_file.empty() != f.prometheus_key_file.empty()) {
    return invalid("--prometheus-cert-file and --prometheus-key-file must be given together");
  }
  for (const auto& [flag, path] : std::initializer_list<std::pair<const char*, const std::string*>>{
           {"--prometheus-bearer-token-file", &f.prometheus_bearer_token_file},
           {"--prometheus-basic-auth-password-file", &f.prometheus_basic_auth_password_file},
           {"--prometheus-ca-file", &f.prometheus_ca_file},
           {"--prometheus-cert-file", &f.prometheus_cert_file},
           {"--prometheus-key-file", &f.prometheus_key_file}}) {
    if (!path->empty() && !Readable(*path)) return invalid(flag, ": cannot read '", *path, "'");
  }
  if (f.prometheus_dataservice_label.empty()) return invalid("--prometheus-dataservice-label must not be empty");
  s.prometheus.auth.bearer_token_file = f.prometheus_bearer_token_file;
  s.prometheus.auth.basic_auth_user = f.prometheus_basic_auth_user;
  s.prometheus.auth.basic_auth_password_file = f.prometheus_basic_auth_password_file;
  s.prometheus.auth.ca_file = f.prometheus_ca_file;
  s.prometheus.auth.client_cert_file = f.prometheus_cert_file;
  s.prometheus.auth.client_key_file = f.prometheus_key_file;
  s.prometheus.auth.insecure_skip_verify = f.prometheus_insecure_skip_verify;
  s.prometheus.auth.timeout = prometheus_timeout;
  s.prometheus.window = window;
  s.prometheus.namespace_label = f.prometheus_namespace_label;
  s.prometheus.dataservice_label = f.prometheus_dataservice_label;
  // One batched snapshot per period serves every DataService of a Prometheus.
  s.prometheus.cache_for = std::min(absl::Seconds(5), s.period / 2);
  s.scrape.window = window;
  s.scrape.timeout = scrape_timeout;
  s.scrape.min_span = std::min(absl::Seconds(5), s.period / 2);
  s.global.max_signal_age = max_age;
  s.global.settle_time = settle;

  // Leader election.
  if (f.leader_elect) {
    if (f.lease_name.empty()) return invalid("--lease-name must not be empty with --leader-elect");
    if (f.renew_deadline_seconds >= f.lease_duration_seconds) {
      return invalid("--renew-deadline-seconds (", f.renew_deadline_seconds,
                     ") must be less than --lease-duration-seconds (", f.lease_duration_seconds, ")");
    }
    if (f.retry_period_seconds >= f.renew_deadline_seconds) {
      return invalid("--retry-period-seconds (", f.retry_period_seconds,
                     ") must be less than --renew-deadline-seconds (", f.renew_deadline_seconds, ")");
    }
  }

  // Addresses (the --*-port shorthands win).
  const std::string metrics = f.metrics_port >= 0 ? absl::StrCat(":", f.metrics_port) : f.metrics_address;
  const std::string health = f.health_port >= 0 ? absl::StrCat(":", f.health_port) : f.health_address;
  auto m = ParseListenAddress(metrics, f.metrics_port >= 0 ? "--metrics-port" : "--metrics-address");
  if (!m.ok()) return m.status();
  auto h = ParseListenAddress(health, f.health_port >= 0 ? "--health-port" : "--health-address");
  if (!h.ok()) return h.status();
  s.metrics_address = *m;
  s.health_address = *h;
  return s;
}

}  // namespace

absl::StatusOr<ParsedAutoscalerFlags> ParseAutoscalerFlags(const std::vector<std::string>& args) {
  ParsedAutoscalerFlags parsed;
  AutoscalerFlags flags;
  CLI::App app("sluice-autoscaler: sizes and places the workers of autoscaled DataServices from their trainers' stall",
               "sluice-autoscaler");
  DefineFlags(app, flags);
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
    auto from_file = ArgsFromConfig(*path, app, known, args);
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
  auto settings = Check(flags);
  if (!settings.ok()) return settings.status();
  parsed.settings = *std::move(settings);
  return parsed;
}

}  // namespace sluice::autoscaler
