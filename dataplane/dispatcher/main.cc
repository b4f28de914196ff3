// sluice-dispatcher: replays its journal, serves the Dispatcher gRPC service and the admin endpoint
// (/metrics, /healthz, /readyz: ready once the journal is replayed and while it can be written),
// runs the periodic checks, and shuts down within --shutdown_timeout_ms of SIGTERM or SIGINT.
//
// Threads: main (start-up, then waits for a signal, then shutdown), the tick thread, the journal's
// batch-fsync thread, and gRPC's and the admin server's own threads. Signals are blocked in every
// thread and taken synchronously by main with sigwait.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "common/admin_server.h"
#include "common/log.h"
#include "common/runtime_tuning.h"
#include "dataplane/dispatcher/clock.h"
#include "dataplane/dispatcher/dispatcher_flags.h"
#include "dataplane/dispatcher/dispatcher_impl.h"
#include "dataplane/dispatcher/dispatcher_metrics.h"
#include "dataplane/dispatcher/grpc_dispatcher.h"
#include "dataplane/dispatcher/journal.h"
#include "dataplane/pipeline/plugin.h"
#include "prometheus/registry.h"

namespace sluice::dispatcher {
namespace {

log::Level LevelFromName(const std::string& name) {
  if (name == "debug") return log::Level::kDebug;
  if (name == "warning") return log::Level::kWarning;
  if (name == "error") return log::Level::kError;
  return log::Level::kInfo;
}

// Connects to host:port and hangs up at once (wakes a server blocked in poll).
void Poke(const std::string& host, int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  if (host.empty() || host == "0.0.0.0" || ::inet_pton(AF_INET, host.c_str(), &addr.sin_addr) != 1) {
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  }
  (void)::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  ::close(fd);
}

// Stopping civetweb waits for its listener's poll period (up to 2 s); connections wake it early.
// (Better done inside AdminServer itself.)
void StopAdminServer(std::unique_ptr<AdminServer> admin, const std::string& host) {
  if (admin == nullptr) return;
  const int port = admin->port();
  absl::Notification stopped;
  std::thread stopper([&] {
    admin.reset();
    stopped.Notify();
  });
  while (!stopped.WaitForNotificationWithTimeout(absl::Milliseconds(20))) Poke(host, port);
  stopper.join();
}

int Fail(const absl::Status& status, absl::string_view what) {
  SLUICE_LOG(Error, what).With("error", status.ToString());
  return 1;
}

int Run(const DispatcherFlags& flags, const sigset_t& signals) {
  log::SetComponent("dispatcher");
  log::SetMinLevel(LevelFromName(flags.log_level));
  // Pipelines come from clients: plugins load only from the allowed directories (the service
  // refuses others with FAILED_PRECONDITION first; this also covers every other path to dlopen).
  if (absl::Status s = pipeline::RestrictPlugins(flags.plugin_dirs, "--plugin_dir"); !s.ok()) {
    return Fail(s, "bad --plugin_dir");
  }
  // The default pipeline is read (and its plugins checked) before anything else starts, so a bad
  // one stops the dispatcher at once with the source named.
  auto default_pipeline = LoadDefaultPipeline(flags);
  if (!default_pipeline.ok()) return Fail(default_pipeline.status(), "cannot load the default pipeline");

  auto registry = std::make_shared<prometheus::Registry>();
  DispatcherMetrics metrics(*registry, flags.dataservice);
  std::unique_ptr<AdminServer> admin;
  if (flags.metrics_port >= 0) {
    auto started = AdminServer::Start(absl::StrCat(flags.listen_host, ":", flags.metrics_port), registry);
    if (!started.ok()) return Fail(started.status(), "cannot start the admin server");
    admin = std::move(*started);
  }

  std::unique_ptr<Journal> journal;
  JournalContents recovered;
  if (!flags.journal_dir.empty()) {
    auto opened = Journal::Open(JournalOptionsFromFlags(flags), &recovered);
    if (!opened.ok()) return Fail(opened.status(), "cannot open the journal");
    journal = std::move(*opened);
    if (!recovered.torn_file.empty()) {
      SLUICE_LOG(Warning, "journal had a torn tail (a crash mid-write); dropped it")
          .With("file", recovered.torn_file)
          .With("offset", recovered.torn_offset)
          .With("dropped_bytes", recovered.dropped_bytes)
          .With("reason", recovered.torn_reason);
    }
  } else {
    SLUICE_LOG(Warning, "no --journal_dir: the dispatcher's state is lost when it restarts");
  }
  RealClock clock;
  DispatcherService service(ServiceOptionsFromFlags(flags), &clock, journal.get(), &metrics);
  if (absl::Status s = service.Recover(recovered); !s.ok()) return Fail(s, "cannot replay the journal");
  if (default_pipeline->has_value()) {
    auto id = service.SetDefaultPipeline((*default_pipeline)->def);
    if (!id.ok()) {
      return Fail(absl::Status(id.status().code(), absl::StrCat((*default_pipeline)->source, ": ", id.status().message())),
                  "cannot register the default pipeline");
    }
    SLUICE_LOG(Info, "default pipeline registered")
        .With("source", (*default_pipeline)->source)
        .With("dataset_id", *id);
  }
  if (journal != nullptr) {
    SLUICE_LOG(Info, "journal replayed")
        .With("dir", flags.journal_dir)
        .With("snapshot", recovered.snapshot_file)
        .With("updates", static_cast<int64_t>(recovered.updates.size()))
        .With("last_sequence", recovered.last_sequence)
        .With("fsync", flags.fsync);
  }

  auto server = DispatcherServer::Start(ServerOptionsFromFlags(flags), &service);
  if (!server.ok()) return Fail(server.status(), "cannot start the gRPC server");

  absl::Notification stop_ticking;
  std::thread ticker([&] {
    const absl::Duration interval = TickInterval(flags);
    while (!stop_ticking.WaitForNotificationWithTimeout(interval)) service.Tick();
  });
  if (admin != nullptr) {
    Journal* j = journal.get();
    admin->SetReadinessCheck([j]() -> absl::Status { return j == nullptr ? absl::OkStatus() : j->health(); });
    admin->SetReady(true);
  }
  SLUICE_LOG(Info, "listening")
      .With("port", (*server)->port())
      .With("metrics_port", admin != nullptr ? admin->port() : -1)
      .With("dataservice", flags.dataservice)
      .With("sharing", flags.sharing);

  int signal_number = 0;
  sigwait(&signals, &signal_number);
  SLUICE_LOG(Info, "shutting down").With("signal", signal_number);
  if (admin != nullptr) admin->SetReady(false);
  (*server)->Shutdown(absl::Now() + absl::Milliseconds(flags.shutdown_timeout_ms));
  stop_ticking.Notify();
  ticker.join();
  if (journal != nullptr) {
    if (absl::Status s = journal->Close(); !s.ok()) SLUICE_LOG(Error, "journal close").With("error", s.ToString());
  }
  server->reset();
  StopAdminServer(std::move(admin), flags.listen_host);
  SLUICE_LOG(Info, "stopped");
  return 0;
}

}  // namespace
}  // namespace sluice::dispatcher

int main(int argc, char** argv) {
  sluice::TuneRuntime();
  // Block the shutdown signals before any thread starts, so every thread inherits the mask and
  // main receives them with sigwait.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  signal(SIGPIPE, SIG_IGN);

  std::vector<std::string> args(argv + 1, argv + argc);
  auto parsed = sluice::dispatcher::ParseDispatcherFlags(args);
  if (!parsed.ok()) {
    std::fprintf(stderr, "sluice-dispatcher: %s\n", std::string(parsed.status().message()).c_str());
    return 2;
  }
  if (!parsed->help.empty()) {
    std::fputs(parsed->help.c_str(), stdout);
    return 0;
  }
  return sluice::dispatcher::Run(parsed->flags, signals);
}
