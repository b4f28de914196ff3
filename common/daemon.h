// Daemon: the process skeleton of Sluice's controller daemons (sluice-operator, and the coming
// sluice-autoscaler), so each main() only wires its own parts:
//  - signals: SIGTERM and SIGINT are blocked in the constructing thread — and so in every thread
//    started after it — and taken by a thread of the Daemon's own with sigwait; each requests
//    stop() once (logged: "signal received, stopping"). Construct the Daemon in main() before
//    starting any other thread.
//  - admin servers: /metrics (the daemon's registry) with /healthz and /readyz, and optionally a
//    second server with /healthz and /readyz only, on their own addresses; logged as
//    "listening metrics_port=… health_port=…". /readyz answers from the phase: starting (not
//    ready, with a reason), standby (ready: a healthy replica waiting for the leader Lease),
//    running (ready), stopping (not ready).
//  - exit: Finish(code) stops the signal thread and logs "exiting code=…".
// Plus the helpers every daemon's flags need: ParseLogLevel and DefaultIdentity.
//
// Threading: SetPhase, phase(), RequestStop and the stop token may be used from any thread;
// ServeAdmin and Finish from the main thread. The readiness check runs on the admin servers'
// threads and only reads the phase.
#ifndef SLUICE_COMMON_DAEMON_H_
#define SLUICE_COMMON_DAEMON_H_

#include <signal.h>

#include <atomic>
#include <memory>
#include <optional>
#include <stop_token>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "common/admin_server.h"
#include "common/log.h"
#include "prometheus/registry.h"

namespace sluice {

enum class DaemonPhase { kStarting, kStandby, kRunning, kStopping };
const char* DaemonPhaseName(DaemonPhase phase);  // "starting", "standby", "running", "stopping"

// What /readyz says in each phase: OK for standby and running; Unavailable with
// `starting_reason` while starting and "stopping" while stopping.
absl::Status ReadinessOf(DaemonPhase phase, absl::string_view starting_reason);

struct DaemonAdminOptions {
  std::optional<std::string> metrics_address;  // "host:port" (port 0 picks one); nullopt: no /metrics server
  std::optional<std::string> health_address;   // nullopt: none; equal to metrics_address: served by that one
  std::shared_ptr<prometheus::Registry> registry;  // what /metrics serves
  std::string starting_reason = "starting";    // /readyz's reason while starting
};

class Daemon {
 public:
  Daemon();
  // Finish(0) if it was not called.
  ~Daemon();
  Daemon(const Daemon&) = delete;
  Daemon& operator=(const Daemon&) = delete;

  // Starts the admin servers and logs the "listening" line. An error (the address is taken, or
  // malformed) is logged ("cannot serve metrics" / "cannot serve health probes") and returned.
  absl::Status ServeAdmin(const DaemonAdminOptions& options);
  // The ports actually bound (-1: no such server); health_port() is metrics_port() when the probes
  // are served by the metrics server.
  int metrics_port() const;
  int health_port() const;

  void SetPhase(DaemonPhase phase) { phase_ = phase; }
  DaemonPhase phase() const { return phase_.load(); }

  // Requested on SIGTERM/SIGINT; any part of the daemon may request it too (e.g. on lost leadership).
  std::stop_source& stop_source() { return stop_; }
  std::stop_token stop_token() const { return stop_.get_token(); }
  void RequestStop() { stop_.request_stop(); }
  // Blocks until a stop is requested.
  void WaitForStop();

  // Stops and joins the signal thread, logs "exiting code=<code>" and returns `code` (for
  // `return daemon.Finish(code);` in main). Idempotent.
  int Finish(int code);

 private:
  sigset_t signals_;
  std::stop_source stop_;
  std::atomic<DaemonPhase> phase_{DaemonPhase::kStarting};
  std::string starting_reason_;
  std::unique_ptr<AdminServer> metrics_server_;
  std::unique_ptr<AdminServer> health_server_;
  std::thread signal_thread_;
  bool finished_ = false;
};

// Blocks until a stop is requested on `token`.
void WaitUntilStopRequested(std::stop_token token);

// debug, info, warning, error (any case); nullopt for anything else.
std::optional<log::Level> ParseLogLevel(absl::string_view name);

// This replica's identity for leader election and Events: $POD_NAME, else the host name, else
// `fallback`.
std::string DefaultIdentity(absl::string_view fallback);

}  // namespace sluice

#endif  // SLUICE_COMMON_DAEMON_H_
