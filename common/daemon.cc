#include "common/daemon.h"

#include <pthread.h>
#include <unistd.h>

#include <condition_variable>
#include <cstdlib>
#include <mutex>

#include "absl/strings/ascii.h"

namespace sluice {

const char* DaemonPhaseName(DaemonPhase phase) {
  switch (phase) {
    case DaemonPhase::kStarting: return "starting";
    case DaemonPhase::kStandby: return "standby";
    case DaemonPhase::kRunning: return "running";
    case DaemonPhase::kStopping: return "stopping";
  }
  return "unknown";
}

absl::Status ReadinessOf(DaemonPhase phase, absl::string_view starting_reason) {
  switch (phase) {
    case DaemonPhase::kRunning: return absl::OkStatus();
    case DaemonPhase::kStandby: return absl::OkStatus();  // a standby replica is healthy and ready to take over
    case DaemonPhase::kStarting: return absl::UnavailableError(starting_reason);
    case DaemonPhase::kStopping: return absl::UnavailableError("stopping");
  }
  return absl::OkStatus();
}

Daemon::Daemon() {
  // Signals are taken by one thread with sigwait; every other thread inherits the blocked mask.
  // SIGUSR1 only wakes that thread up at exit.
  sigemptyset(&signals_);
  sigaddset(&signals_, SIGTERM);
  sigaddset(&signals_, SIGINT);
  sigaddset(&signals_, SIGUSR1);
  pthread_sigmask(SIG_BLOCK, &signals_, nullptr);
  signal_thread_ = std::thread([this] {
    int sig = 0;
    sigwait(&signals_, &sig);
    if (sig == SIGTERM || sig == SIGINT) {
      SLUICE_LOG(Info, "signal received, stopping").With("signal", sig);
      stop_.request_stop();
    }
  });
}

Daemon::~Daemon() { Finish(0); }

absl::Status Daemon::ServeAdmin(const DaemonAdminOptions& options) {
  starting_reason_ = options.starting_reason;
  auto registry = options.registry != nullptr ? options.registry : std::make_shared<prometheus::Registry>();
  if (options.metrics_address.has_value()) {
    auto started = AdminServer::Start(*options.metrics_address, registry);
    if (!started.ok()) {
      SLUICE_LOG(Error, "cannot serve metrics").With("error", started.status().message());
      return started.status();
    }
    metrics_server_ = *std::move(started);
  }
  if (options.health_address.has_value() && options.health_address != options.metrics_address) {
    auto started = AdminServer::Start(*options.health_address, std::make_shared<prometheus::Registry>());
    if (!started.ok()) {
      SLUICE_LOG(Error, "cannot serve health probes").With("error", started.status().message());
      return started.status();
    }
    health_server_ = *std::move(started);
  }
  for (AdminServer* server : {metrics_server_.get(), health_server_.get()}) {
    if (server == nullptr) continue;
    server->SetReadinessCheck([this] { return ReadinessOf(phase_.load(), starting_reason_); });
    server->SetReady(true);  // the check decides
  }
  SLUICE_LOG(Info, "listening").With("metrics_port", metrics_port()).With("health_port", health_port());
  return absl::OkStatus();
}

int Daemon::metrics_port() const { return metrics_server_ ? metrics_server_->port() : -1; }

int Daemon::health_port() const { return health_server_ ? health_server_->port() : metrics_port(); }

void WaitUntilStopRequested(std::stop_token token) {
  std::mutex mu;
  std::condition_variable_any cv;
  std::unique_lock<std::mutex> lock(mu);
  cv.wait(lock, token, [] { return false; });
}

void Daemon::WaitForStop() { WaitUntilStopRequested(stop_.get_token()); }

int Daemon::Finish(int code) {
  if (finished_) return code;
  finished_ = true;
  pthread_kill(signal_thread_.native_handle(), SIGUSR1);
  signal_thread_.join();
  SLUICE_LOG(Info, "exiting").With("code", code);
  return code;
}

std::optional<log::Level> ParseLogLevel(absl::string_view name) {
  const std::string l = absl::AsciiStrToLower(name);
  if (l == "debug") return log::Level::kDebug;
  if (l == "info") return log::Level::kInfo;
  if (l == "warning") return log::Level::kWarning;
  if (l == "error") return log::Level::kError;
  return std::nullopt;
}

std::string DefaultIdentity(absl::string_view fallback) {
  if (const char* pod = std::getenv("POD_NAME"); pod != nullptr && *pod != '\0') return pod;
  char host[256] = {};
  if (gethostname(host, sizeof(host) - 1) == 0 && host[0] != '\0') return host;
  return std::string(fallback);
}

}  // namespace sluice
