// sluice-operator: reconciles DataService objects (sluice.dev/v1alpha1) into dispatcher and worker
// pods. Connects with --kubeconfig, $KUBECONFIG, ~/.kube/config or the in-cluster service account;
// optionally elects a leader over a Lease so that only one replica acts. Stops on SIGTERM/SIGINT.
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <stop_token>
#include <string>
#include <thread>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "kube/client.h"
#include "kube/config.h"
#include "kube/leader_election.h"
#include "operator/controller.h"

namespace {

std::string DefaultIdentity() {
  if (const char* pod = std::getenv("POD_NAME"); pod != nullptr && *pod != '\0') return pod;
  char host[256] = {};
  if (gethostname(host, sizeof(host) - 1) == 0 && host[0] != '\0') return host;
  return "sluice-operator";
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"sluice-operator: reconciles DataService objects into dispatcher and worker pods"};
  std::string kubeconfig, context, watch_namespace, identity = DefaultIdentity();
  std::string lease_namespace, lease_name = "sluice-operator";
  bool leader_elect = false;
  int workers = 2;
  double resync_seconds = 30, sync_timeout_seconds = 60, expectations_timeout_seconds = 300;
  double drain_timeout_seconds = 600;
  app.add_option("--kubeconfig", kubeconfig, "kubeconfig file (default: $KUBECONFIG, ~/.kube/config, in-cluster)");
  app.add_option("--context", context, "kubeconfig context (default: the current context)");
  app.add_option("--namespace", watch_namespace, "only reconcile DataServices of this namespace (default: all)");
  app.add_option("--workers", workers, "concurrent reconciles")->check(CLI::Range(1, 64));
  app.add_flag("--leader-elect", leader_elect, "act only while holding the leader Lease");
  app.add_option("--lease-namespace", lease_namespace, "namespace of the leader Lease (default: the config's namespace)");
  app.add_option("--lease-name", lease_name, "name of the leader Lease");
  app.add_option("--identity", identity, "leader-election identity and event reportingInstance (default: $POD_NAME or hostname)");
  app.add_option("--resync-seconds", resync_seconds, "reconcile DataServices with local placement at least this often")
      ->check(CLI::PositiveNumber);
  app.add_option("--sync-timeout-seconds", sync_timeout_seconds, "how long to wait for the informer caches")
      ->check(CLI::PositiveNumber);
  app.add_option("--expectations-timeout-seconds", expectations_timeout_seconds,
                 "give up waiting to observe own creates/deletes after this long")
      ->check(CLI::PositiveNumber);
  app.add_option("--drain-timeout-seconds", drain_timeout_seconds, "release a deleted DataService after this long")
      ->check(CLI::PositiveNumber);
  CLI11_PARSE(app, argc, argv);

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
      std::fprintf(stderr, "sluice-operator: signal %d, stopping\n", sig);
      stop.request_stop();
    }
  });
  auto finish = [&](int code) {
    pthread_kill(signal_thread.native_handle(), SIGUSR1);
    signal_thread.join();
    return code;
  };
  auto wait_for_stop = [&] {
    std::mutex mu;
    std::condition_variable_any cv;
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, stop.get_token(), [] { return false; });
  };

  absl::StatusOr<sluice::kube::Config> config = sluice::kube::LoadDefaultConfig(kubeconfig, context);
  if (!config.ok()) {
    std::fprintf(stderr, "sluice-operator: %s\n", std::string(config.status().message()).c_str());
    return finish(2);
  }
  absl::StatusOr<std::unique_ptr<sluice::kube::Client>> client = sluice::kube::Client::Create(*config);
  if (!client.ok()) {
    std::fprintf(stderr, "sluice-operator: %s\n", std::string(client.status().message()).c_str());
    return finish(2);
  }

  sluice::op::OperatorOptions options;
  options.watch_namespace = watch_namespace;
  options.workers = workers;
  options.resync_period = absl::Seconds(resync_seconds);
  options.reporting_instance = identity;
  options.reconcile.expectations_timeout = absl::Seconds(expectations_timeout_seconds);
  options.reconcile.drain_timeout = absl::Seconds(drain_timeout_seconds);
  sluice::op::DataServiceController controller(client->get(), options);

  auto run = [&]() -> int {
    absl::Status started = controller.Start(absl::Seconds(sync_timeout_seconds));
    if (!started.ok()) {
      std::fprintf(stderr, "sluice-operator: %s\n", std::string(started.message()).c_str());
      return 1;
    }
    std::fprintf(stderr, "sluice-operator: running (%s)\n",
                 watch_namespace.empty() ? "all namespaces" : ("namespace " + watch_namespace).c_str());
    wait_for_stop();
    controller.Stop();
    return 0;
  };

  if (!leader_elect) return finish(run());

  sluice::kube::LeaderElectionConfig le;
  le.lease_namespace = lease_namespace.empty() ? config->ns : lease_namespace;
  le.lease_name = lease_name;
  le.identity = identity;
  std::atomic<int> code{0};
  std::thread leader_thread;
  le.on_started_leading = [&] {
    leader_thread = std::thread([&] {
      code = run();
      stop.request_stop();
    });
  };
  le.on_stopped_leading = [&] {
    if (!stop.stop_requested()) {
      std::fprintf(stderr, "sluice-operator: lost the leader Lease, exiting\n");
      code = 1;
      stop.request_stop();  // ends run(); the process exits so a new leader takes over cleanly
    }
  };
  sluice::kube::LeaderElector elector(client->get(), le);
  if (absl::Status valid = elector.Validate(); !valid.ok()) {
    std::fprintf(stderr, "sluice-operator: %s\n", std::string(valid.message()).c_str());
    return finish(2);
  }
  absl::Status ran = elector.Run(stop.get_token());
  if (!ran.ok()) std::fprintf(stderr, "sluice-operator: leader election: %s\n", std::string(ran.message()).c_str());
  stop.request_stop();
  if (leader_thread.joinable()) leader_thread.join();
  return finish(ran.ok() ? code.load() : 1);
}
