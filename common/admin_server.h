// The HTTP endpoint every Sluice daemon exposes: /metrics (Prometheus text format from a
// prometheus-cpp registry), /healthz (the process is alive) and /readyz (it can serve: a check
// function decides). Served by civetweb on its own threads.
//
// Thread-safe: SetReady and the readiness check may be called from any thread.
#ifndef SLUICE_COMMON_ADMIN_SERVER_H_
#define SLUICE_COMMON_ADMIN_SERVER_H_

#include <atomic>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "prometheus/registry.h"

namespace sluice {

class AdminServer {
 public:
  // Returns OK when ready, or a reason why not (shown in /readyz's body).
  using ReadinessCheck = std::function<absl::Status()>;

  // Listens on `address` ("host:port"; port 0 picks a free port).
  static absl::StatusOr<std::unique_ptr<AdminServer>> Start(const std::string& address,
                                                            std::shared_ptr<prometheus::Registry> registry);
  ~AdminServer();

  // The port actually bound.
  int port() const { return port_; }
  // Readiness: not ready until SetReady(true), and then only if the check (if any) passes.
  void SetReady(bool ready) { ready_ = ready; }
  void SetReadinessCheck(ReadinessCheck check);

  class Impl;
  absl::Status Readiness();

 private:
  AdminServer() = default;
  std::unique_ptr<Impl> impl_;
  int port_ = 0;
  std::atomic<bool> ready_{false};
};

// Splits "host:port"; errors name the flag value.
absl::StatusOr<std::pair<std::string, int>> SplitHostPort(const std::string& address);

}  // namespace sluice

#endif  // SLUICE_COMMON_ADMIN_SERVER_H_
