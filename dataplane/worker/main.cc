// sluice-worker: runs the data service's pipelines for the tasks a dispatcher assigns, and streams
// their elements to clients. See docs/dataservice-worker.md.
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <memory>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "common/admin_server.h"
#include "common/log.h"
#include "common/runtime_tuning.h"
#include "dataplane/pipeline/plugin.h"
#include "dataplane/rpc/credentials.h"
#include "dataplane/worker/grpc_worker.h"
#include "dataplane/worker/worker_flags.h"
#include "dataplane/worker/worker_impl.h"

namespace {

using namespace sluice;          // NOLINT
using namespace sluice::worker;  // NOLINT

log::Level ParseLevel(const std::string& level) {
  if (level == "debug") return log::Level::kDebug;
  if (level == "warning") return log::Level::kWarning;
  if (level == "error") return log::Level::kError;
  return log::Level::kInfo;
}

int Fail(const absl::Status& status) {
  SLUICE_LOG(Error, "sluice-worker cannot start").With("error", status.ToString());
  return 1;
}

int Run(int argc, char** argv) {
  TuneRuntime();
  std::vector<std::string> args(argv + 1, argv + argc);
  auto parsed = ParseWorkerFlags(args);
  if (!parsed.ok()) {
    std::fprintf(stderr, "sluice-worker: %s\n(see --help)\n", std::string(parsed.status().message()).c_str());
    return 2;
  }
  if (!parsed->help.empty()) {
    std::fputs(parsed->help.c_str(), stdout);
    return 0;
  }
  const WorkerFlags& flags = parsed->flags;
  log::SetComponent("worker");
  log::SetMinLevel(ParseLevel(flags.log_level));

  // Signals are taken by sigwait below; block them before any thread starts so none receives them.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  // Task pipelines come from the dispatcher (and so from any client): plugins load only from the
  // allowed directories, also where the explicit check could be bypassed.
  if (absl::Status s = pipeline::RestrictPlugins(flags.plugin_dirs, "--plugin_dir"); !s.ok()) return Fail(s);
  const rpc::TlsOptions tls = TlsFromFlags(flags);
  WorkerServerOptions server_options;
  server_options.listen_address = absl::StrCat(flags.listen_host, ":", flags.port);
  server_options.tls = tls;
  server_options.max_message_bytes = flags.max_message_bytes;
  server_options.shm = ShmConfig{flags.shm_dir, static_cast<uint64_t>(flags.shm_ring_bytes)};
  if (absl::Status s = PrepareShmDir(server_options.shm); !s.ok()) {
    SLUICE_LOG(Warning, "shared memory off: same-host clients get elements over the socket")
        .With("shm_dir", flags.shm_dir)
        .With("error", std::string(s.message()));
    server_options.shm = ShmConfig{"", 0};
  }
  auto server = WorkerServer::Start(server_options);
  if (!server.ok()) return Fail(server.status());

  auto config = MakeWorkerConfig(flags, (*server)->port());
  if (!config.ok()) return Fail(config.status());
  auto channel = rpc::MakeChannel(flags.dispatcher_address, tls, flags.max_message_bytes);
  if (!channel.ok()) return Fail(channel.status());
  GrpcDispatcherClient dispatcher(*channel);

  auto registry = std::make_shared<prometheus::Registry>();
  auto metrics = std::make_shared<WorkerMetrics>(
      registry, std::map<std::string, std::string>{{"worker", config->worker_address},
                                                   {"placement", flags.placement},
                                                   {"dataservice", flags.dataservice}});
  auto worker = std::make_unique<WorkerImpl>(*config, &dispatcher, metrics);
  (*server)->service().SetWorker(worker.get());

  std::unique_ptr<AdminServer> admin;
  if (flags.metrics_port >= 0) {
    auto started = AdminServer::Start(absl::StrCat(flags.listen_host, ":", flags.metrics_port), registry);
    if (!started.ok()) return Fail(started.status());
    admin = *std::move(started);
    WorkerImpl* w = worker.get();
    admin->SetReadinessCheck([w]() -> absl::Status {
      if (w->draining()) return absl::UnavailableError("draining");
      if (!w->registered()) return absl::UnavailableError("not registered with the dispatcher yet");
      return absl::OkStatus();
    });
    admin->SetReady(true);
  }

  SLUICE_LOG(Info, "listening")
      .With("port", (*server)->port())
      .With("metrics_port", admin ? admin->port() : -1)
      .With("worker_address", config->worker_address)
      .With("dispatcher_address", flags.dispatcher_address)
      .With("placement", flags.placement)
      .With("worker_host", config->worker_host)
      .With("tls", tls.enabled());
  worker->Start();

  int signal_number = 0;
  sigwait(&signals, &signal_number);
  const absl::Time signalled = absl::Now();
  SLUICE_LOG(Info, "shutting down").With("signal", signal_number == SIGTERM ? "SIGTERM" : "SIGINT");

  // Whatever happens below, the process ends within the budget (plus a margin).
  const absl::Duration budget = absl::Milliseconds(flags.shutdown_timeout_ms);
  absl::Notification finished;
  std::thread watchdog([&finished, budget] {
    if (!finished.WaitForNotificationWithTimeout(budget + absl::Milliseconds(150))) {
      SLUICE_LOG(Error, "shutdown exceeded its budget; exiting now");
      _exit(3);
    }
  });
  (*server)->GracefulShutdown(*worker, budget);
  admin.reset();  // /readyz said "draining" until here
  worker.reset();
  server->reset();
  SLUICE_LOG(Info, "exiting").With("shutdown_ms", absl::ToInt64Milliseconds(absl::Now() - signalled));
  // Everything is stopped and joined, and the log is written unbuffered. End the process here
  // rather than by returning: the dispatcher channel's destructor would then drop gRPC's last
  // library reference, and gRPC 1.51's grpc_shutdown joins its executor thread, which may sit in a
  // poll with a timer deadline ~10 s away (seen: the worker "exiting" and still alive 3 s later, a
  // SIGKILL from the local supervisor). The watchdog above stays armed until this point.
  finished.Notify();
  watchdog.join();
  std::fflush(nullptr);
  _exit(0);
}

}  // namespace

int main(int argc, char** argv) { return Run(argc, argv); }
