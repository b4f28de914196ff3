// sluice-operator: reconciles DataService objects (sluice.dev/v1alpha1) into dispatcher and worker
// pods. Connects with --kubeconfig, $KUBECONFIG, ~/.kube/config or the in-cluster service account;
// optionally elects a leader over a Lease so that only one replica acts. Serves /metrics, /healthz
// and /readyz; logs structured lines to stderr. Stops on SIGTERM/SIGINT.
#include <malloc.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <optional>
#include <stop_token>
#include <string>
#include <thread>

#include "CLI/CLI.hpp"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "common/admin_server.h"
#include "common/log.h"
#include "kube/client.h"
#include "kube/config.h"
#include "kube/event_recorder.h"
#include "kube/leader_election.h"
#include "operator/controller.h"
#include "operator/dispatcher_drainer.h"
#include "operator/operator_flags.h"
#include "operator/operator_metrics.h"

namespace {

using sluice::log::Level;

std::string DefaultIdentity() {
  if (const char* pod = std::getenv("POD_NAME"); pod != nullptr && *pod != '\0') return pod;
  char host[256] = {};
  if (gethostname(host, sizeof(host) - 1) == 0 && host[0] != '\0') return host;
  return "sluice-operator";
}

Level ParseLevel(const std::string& name) {
  std::string l = absl::AsciiStrToLower(name);
  if (l == "debug") return Level::kDebug;
  if (l == "warning") return Level::kWarning;
  if (l == "error") return Level::kError;
  return Level::kInfo;
}

// What /readyz reports.
enum class Phase { kStarting, kStandby, kRunning, kStopping };

}  // namespace

int main(int argc, char** argv) {
  // The caches are many small JSON allocations made by a few threads; two malloc arenas instead of
  // one per thread keep the freed memory reusable (about 5 % less peak RSS in bench/operator).
  mallopt(M_ARENA_MAX, 2);
  CLI::App app{"sluice-operator: reconciles DataService objects into dispatcher and worker pods"};
  sluice::op::OperatorFlags flags;
  sluice::op::AddOperatorFlags(app, flags);
  CLI11_PARSE(app, argc, argv);
  sluice::log::SetComponent("operator");
  if (absl::Status valid = sluice::op::ValidateOperatorFlags(flags); !valid.ok()) {
    SLUICE_LOG(Error, "invalid flags").With("error", valid.message());
    return 2;
  }
  sluice::log::SetMinLevel(ParseLevel(flags.log_level));
  if (flags.identity.empty()) flags.identity = DefaultIdentity();

  // Signals are taken by one thread with sigwait; every other thread inherits the blocked mask.
  // SIGUSR1 only wakes that thread up at exit.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGUSR1);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  std::stop_source stop;  // requested on a signal, on lost leadership, or when leader election ends
  std::thread signal_thread([&] {
    int sig = 0;
    sigwait(&signals, &sig);
    if (sig == SIGTERM || sig == SIGINT) {
      SLUICE_LOG(Info, "signal received, stopping").With("signal", sig);
      stop.request_stop();
    }
  });
  auto finish = [&](int code) {
    pthread_kill(signal_thread.native_handle(), SIGUSR1);
    signal_thread.join();
    SLUICE_LOG(Info, "exiting").With("code", code);
    return code;
  };
  auto wait_for_stop = [&] {
    std::mutex mu;
    std::condition_variable_any cv;
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, stop.get_token(), [] { return false; });
  };

  // Observability first, so probes answer while the caches fill.
  sluice::op::OperatorMetrics metrics;
  std::atomic<Phase> phase{Phase::kStarting};
  auto readiness = [&phase]() -> absl::Status {
    switch (phase.load()) {
      case Phase::kRunning: return absl::OkStatus();
      case Phase::kStandby: return absl::OkStatus();  // a standby replica is healthy and ready to take over
      case Phase::kStarting: return absl::UnavailableError("informer caches are not synced yet");
      case Phase::kStopping: return absl::UnavailableError("stopping");
    }
    return absl::OkStatus();
  };
  std::optional<std::string> metrics_address = *sluice::op::ParseListenAddress(flags.metrics_address, "--metrics-address");
  std::optional<std::string> health_address = *sluice::op::ParseListenAddress(flags.health_address, "--health-address");
  std::unique_ptr<sluice::AdminServer> metrics_server, health_server;
  if (metrics_address.has_value()) {
    auto started = sluice::AdminServer::Start(*metrics_address, metrics.registry());
    if (!started.ok()) {
      SLUICE_LOG(Error, "cannot serve metrics").With("error", started.status().message());
      return finish(2);
    }
    metrics_server = *std::move(started);
  }
  if (health_address.has_value() && health_address != metrics_address) {
    auto started = sluice::AdminServer::Start(*health_address, std::make_shared<prometheus::Registry>());
    if (!started.ok()) {
      SLUICE_LOG(Error, "cannot serve health probes").With("error", started.status().message());
      return finish(2);
    }
    health_server = *std::move(started);
  }
  for (sluice::AdminServer* server : {metrics_server.get(), health_server.get()}) {
    if (server == nullptr) continue;
    server->SetReadinessCheck(readiness);
    server->SetReady(true);  // the check decides
  }
  SLUICE_LOG(Info, "listening")
      .With("metrics_port", metrics_server ? metrics_server->port() : -1)
      .With("health_port", health_server ? health_server->port() : (metrics_server ? metrics_server->port() : -1));

  absl::StatusOr<sluice::kube::Config> config = sluice::kube::LoadDefaultConfig(flags.kubeconfig, flags.context);
  if (!config.ok()) {
    SLUICE_LOG(Error, "cannot load the Kubernetes configuration").With("error", config.status().message());
    return finish(2);
  }
  sluice::kube::ClientOptions client_options;
  client_options.qps = flags.kube_qps;
  client_options.burst = flags.kube_burst;
  client_options.user_agent = "sluice-operator/0.1";
  absl::StatusOr<std::unique_ptr<sluice::kube::Client>> client = sluice::kube::Client::Create(*config, client_options);
  if (!client.ok()) {
    SLUICE_LOG(Error, "cannot create the Kubernetes client").With("error", client.status().message());
    return finish(2);
  }

  sluice::op::OperatorOptions options;
  options.watch_namespace = flags.watch_namespace;
  options.workers = flags.concurrency;
  options.resync_period = absl::Seconds(flags.resync_seconds);
  options.reporting_instance = flags.identity;
  options.reconcile.expectations_timeout = absl::Seconds(flags.expectations_timeout_seconds);
  options.status_coalesce_window = absl::Seconds(flags.status_coalesce_seconds);
  options.reconcile.drain_timeout = absl::Seconds(flags.drain_timeout_seconds);
  options.reconcile.drain_poll_interval = absl::Seconds(flags.drain_poll_seconds);
  options.metrics = &metrics;
  sluice::op::GrpcWorkerDrainerOptions drain_options;
  drain_options.tls.ca_file = flags.dispatcher_tls_ca;
  drain_options.tls.cert_file = flags.dispatcher_tls_cert;
  drain_options.tls.key_file = flags.dispatcher_tls_key;
  drain_options.tls.server_name_override = flags.dispatcher_tls_server_name;
  drain_options.rpc_timeout = absl::Seconds(flags.drain_rpc_timeout_seconds);
  sluice::op::GrpcWorkerDrainer drainer(drain_options);
  options.drainer = &drainer;
  sluice::op::GrpcAutoOrderReaderOptions auto_order_options;
  auto_order_options.tls = drain_options.tls;
  auto_order_options.rpc_timeout = drain_options.rpc_timeout;
  sluice::op::GrpcAutoOrderReader auto_order_reader(auto_order_options);
  options.auto_order_reader = &auto_order_reader;
  sluice::op::DataServiceController controller(client->get(), options);

  auto run = [&]() -> int {
    absl::Status started = controller.Start(absl::Seconds(flags.sync_timeout_seconds));
    if (!started.ok()) {
      SLUICE_LOG(Error, "cannot start the controller").With("error", started.message());
      return 1;
    }
    phase = Phase::kRunning;
    metrics.SetLeader(true);
    SLUICE_LOG(Info, "running")
        .With("namespace", flags.watch_namespace.empty() ? "(all)" : flags.watch_namespace)
        .With("concurrency", flags.concurrency)
        .With("identity", flags.identity);
    wait_for_stop();
    phase = Phase::kStopping;
    controller.Stop();
    metrics.SetLeader(false);
    return 0;
  };

  if (!flags.leader_elect) return finish(run());

  sluice::kube::LeaderElectionConfig le;
  le.lease_namespace = flags.lease_namespace.empty() ? config->ns : flags.lease_namespace;
  le.lease_name = flags.lease_name;
  le.identity = flags.identity;
  le.lease_duration = absl::Seconds(flags.lease_duration_seconds);
  le.renew_deadline = absl::Seconds(flags.renew_deadline_seconds);
  le.retry_period = absl::Seconds(flags.retry_period_seconds);
  std::atomic<int> code{0};
  std::thread leader_thread;
  // The elector stops (and releases the Lease) only after the controller has stopped: a successor
  // must not start reconciling while this process still finishes its in-flight writes. A standby
  // (not leading) stops at once.
  std::stop_source elector_stop;
  std::atomic<bool> leading{false};
  std::stop_callback stop_standby(stop.get_token(), [&] {
    if (!leading.load()) elector_stop.request_stop();
  });
  le.on_started_leading = [&] {
    SLUICE_LOG(Info, "acquired the leader Lease").With("lease", le.lease_namespace + "/" + le.lease_name);
    leading = true;
    leader_thread = std::thread([&] {
      code = run();
      stop.request_stop();
      SLUICE_LOG(Info, "controller stopped; releasing the leader Lease");
      elector_stop.request_stop();
    });
  };
  le.on_stopped_leading = [&] {
    if (!stop.stop_requested()) {
      SLUICE_LOG(Error, "lost the leader Lease, exiting").With("lease", le.lease_namespace + "/" + le.lease_name);
      code = 1;
      stop.request_stop();  // ends run(); the process exits so a new leader takes over cleanly
    }
  };
  le.on_new_leader = [&](const std::string& holder) {
    SLUICE_LOG(Info, "leader observed").With("leader", holder).With("self", holder == flags.identity);
  };
  // Every acquire/renew attempt at debug level: what was read and when its holder's lease expires by
  // this replica's own observation (--log-level debug explains a takeover, e.g. in the e2e suite).
  le.on_attempt = [](const sluice::kube::LeaderElectionAttempt& a) {
    auto line = SLUICE_LOG(Debug, "lease attempt");
    line.With("outcome", sluice::kube::OutcomeName(a.outcome))
        .With("holder", a.holder)
        .With("at", sluice::kube::FormatMicroTime(a.at))
        .With("observed_change", sluice::kube::FormatMicroTime(a.observed_change))
        .With("expires", sluice::kube::FormatMicroTime(a.expires));
    if (!a.error.ok()) line.With("error", a.error.ToString());
  };
  sluice::kube::LeaderElector elector(client->get(), le);
  if (absl::Status valid = elector.Validate(); !valid.ok()) {
    SLUICE_LOG(Error, "invalid leader election settings").With("error", valid.message());
    return finish(2);
  }
  phase = Phase::kStandby;
  SLUICE_LOG(Info, "waiting for the leader Lease")
      .With("lease", le.lease_namespace + "/" + le.lease_name)
      .With("identity", flags.identity);
  absl::Status ran = elector.Run(elector_stop.get_token());
  if (!ran.ok()) SLUICE_LOG(Error, "leader election failed").With("error", ran.ToString());
  stop.request_stop();
  if (leader_thread.joinable()) leader_thread.join();
  return finish(ran.ok() ? code.load() : 1);
}
