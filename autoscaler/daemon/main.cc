// sluice-autoscaler: sizes and places the workers of DataServices with spec.autoscaling.enabled
// (sluice.dev/v1alpha1) from their trainers' stall, by server-side apply of spec.workers.replicas,
// spec.workers.local and spec.workers.workersToDelete as field manager `sluice-autoscaler`, and
// explains each decision in status.autoscaler and Events (docs/autoscaling.md). Signals come from
// Prometheus when a URL is configured (--prometheus-url, or a DataService's
// spec.autoscaling.metrics.prometheus.url), else from direct scrapes of the dispatcher's and the
// workers' /metrics. Connects with --kubeconfig, $KUBECONFIG, ~/.kube/config or the in-cluster
// service account; optionally elects a leader over a Lease so that only one replica acts. Serves
// /metrics, /healthz and /readyz; logs logfmt lines to stderr. Stops on SIGTERM/SIGINT.
#include <malloc.h>

#include <chrono>
#include <condition_variable>
#include <iostream>
#include <mutex>
#include <memory>
#include <stop_token>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "pplx/threadpool.h"
#include "autoscaler/controller/autoscaler_controller.h"
#include "autoscaler/controller/autoscaler_metrics.h"
#include "autoscaler/daemon/autoscaler_flags.h"
#include "autoscaler/sources/prometheus_source.h"
#include "autoscaler/sources/scrape_source.h"
#include "common/daemon.h"
#include "common/log.h"
#include "kube/client.h"
#include "kube/config.h"
#include "kube/leader_elected_runner.h"

namespace {

// Whether the API server serves keda.sh/v1alpha1 (a discovery GET; any authenticated user may).
bool KedaServed(sluice::kube::Client& client) {
  auto response = client.Send("GET", "/apis/keda.sh/v1alpha1");
  if (!response.ok()) {
    SLUICE_LOG(Warning, "cannot tell whether KEDA is installed; not watching ScaledObjects (--keda=on forces it)")
        .With("error", response.status().message());
    return false;
  }
  return response->status == 200;
}

}  // namespace

int main(int argc, char** argv) {
  // As in sluice-operator: few malloc arenas keep the caches' freed memory reusable.
  mallopt(M_ARENA_MAX, 2);
  sluice::log::SetComponent("autoscaler");
  // cpprestsdk's shared pool (every HTTP exchange's completions) defaults to 40 threads; the
  // autoscaler's requests are made and awaited by its few reconcile and watch threads, and with 40
  // idle pool threads most of each completion's cost was handing it to another thread (a profile of
  // 1,000 DataServices: 13 % of the process in thread switches in the pool). A few suffice.
  crossplat::threadpool::initialize_with_threads(4);
  std::vector<std::string> args(argv + 1, argv + argc);
  auto parsed = sluice::autoscaler::ParseAutoscalerFlags(args);
  if (!parsed.ok()) {
    SLUICE_LOG(Error, "invalid flags").With("error", parsed.status().message());
    return 2;
  }
  if (!parsed->help.empty()) {
    std::cout << parsed->help;
    return 0;
  }
  const sluice::autoscaler::AutoscalerSettings& settings = parsed->settings;
  sluice::autoscaler::AutoscalerFlags flags = settings.flags;
  sluice::log::SetMinLevel(sluice::ParseLogLevel(flags.log_level).value_or(sluice::log::Level::kInfo));
  if (flags.identity.empty()) flags.identity = sluice::DefaultIdentity("sluice-autoscaler");

  // Signals (SIGTERM/SIGINT request the stop), readiness by phase, the exit line.
  sluice::Daemon daemon;

  sluice::autoscaler::AutoscalerMetrics metrics;
  sluice::DaemonAdminOptions admin;
  admin.metrics_address = settings.metrics_address;
  admin.health_address = settings.health_address;
  admin.registry = metrics.registry();
  admin.starting_reason = "informer caches are not synced yet";
  if (!daemon.ServeAdmin(admin).ok()) return daemon.Finish(2);

  absl::StatusOr<sluice::kube::Config> config = sluice::kube::LoadDefaultConfig(flags.kubeconfig, flags.context);
  if (!config.ok()) {
    SLUICE_LOG(Error, "cannot load the Kubernetes configuration").With("error", config.status().message());
    return daemon.Finish(2);
  }
  sluice::kube::ClientOptions client_options;
  client_options.qps = flags.kube_qps;
  client_options.burst = flags.kube_burst;
  client_options.user_agent = "sluice-autoscaler/0.1";
  absl::StatusOr<std::unique_ptr<sluice::kube::Client>> client = sluice::kube::Client::Create(*config, client_options);
  if (!client.ok()) {
    SLUICE_LOG(Error, "cannot create the Kubernetes client").With("error", client.status().message());
    return daemon.Finish(2);
  }

  // Where the signals come from: Prometheus for DataServices with a URL (theirs or --prometheus-url),
  // direct scrapes of the dispatcher and workers otherwise.
  sluice::autoscaler::PrometheusSource prometheus(settings.prometheus);
  sluice::autoscaler::ScrapeSource scrape(settings.scrape);
  sluice::autoscaler::RoutingSignalProvider signals(&prometheus, &scrape);

  sluice::autoscaler::AutoscalerOptions options;
  options.watch_namespace = flags.watch_namespace;
  options.workers = flags.concurrency;
  options.period = settings.period;
  options.status_interval = settings.status_interval;
  options.global = settings.global;
  options.reporting_instance = flags.identity;
  options.metrics = &metrics;
  options.signals = &signals;

  // The controller's run: until the daemon stops (a signal, or lost leadership). Built here, so that
  // a replica that waits for the Lease holds no caches.
  auto run = [&](std::stop_token stop) -> int {
    options.watch_scaled_objects = settings.keda == sluice::autoscaler::AutoscalerSettings::Keda::kOn ||
                                   (settings.keda == sluice::autoscaler::AutoscalerSettings::Keda::kAuto &&
                                    KedaServed(**client));
    sluice::autoscaler::AutoscalerController controller(client->get(), options);
    absl::Status started = controller.Start(settings.sync_timeout);
    if (!started.ok()) {
      SLUICE_LOG(Error, "cannot start the controller").With("error", started.message());
      return 1;
    }
    daemon.SetPhase(sluice::DaemonPhase::kRunning);
    metrics.SetLeader(true);
    SLUICE_LOG(Info, "running")
        .With("namespace", flags.watch_namespace.empty() ? "(all)" : flags.watch_namespace)
        .With("period", absl::FormatDuration(settings.period))
        .With("signals", settings.global.prometheus_url ? "prometheus " + *settings.global.prometheus_url
                                                        : std::string("direct scrape"))
        .With("keda", options.watch_scaled_objects ? "watched" : "not watched")
        .With("identity", flags.identity);
    // The first lists (served whole from the watch cache) are read item by item (kube/list_reader.h),
    // each item reduced to what the autoscaler keeps; what the reading freed, and later what watch
    // events and reconciles free, is given back to the system now and then, so that the resident
    // memory is the caches' (docs/benchmarks.md).
    malloc_trim(0);
    {
      std::mutex mu;
      std::condition_variable_any wake;
      std::unique_lock<std::mutex> lock(mu);
      while (!wake.wait_for(lock, stop, std::chrono::seconds(60), [] { return false; })) {
        if (stop.stop_requested()) break;
        malloc_trim(0);
      }
    }
    daemon.SetPhase(sluice::DaemonPhase::kStopping);
    controller.Stop();
    metrics.SetLeader(false);
    return 0;
  };

  if (!flags.leader_elect) return daemon.Finish(run(daemon.stop_token()));

  sluice::kube::LeaderElectionConfig le;
  le.lease_namespace = flags.lease_namespace.empty() ? config->ns : flags.lease_namespace;
  le.lease_name = flags.lease_name;
  le.identity = flags.identity;
  le.lease_duration = absl::Seconds(flags.lease_duration_seconds);
  le.renew_deadline = absl::Seconds(flags.renew_deadline_seconds);
  le.retry_period = absl::Seconds(flags.retry_period_seconds);
  sluice::kube::LeaderElectedRunner runner(client->get(), le);
  if (absl::Status valid = runner.Validate(); !valid.ok()) {
    SLUICE_LOG(Error, "invalid leader election settings").With("error", valid.message());
    return daemon.Finish(2);
  }
  daemon.SetPhase(sluice::DaemonPhase::kStandby);
  return daemon.Finish(runner.Run(daemon.stop_source(), run));
}
