// MetricsRelay: an HTTP/1.0 relay in front of one daemon's admin endpoint (e.g. the dispatcher's
// /metrics), which can be cut and restored: while cut, its port refuses connections (the listening
// socket is closed; restoring listens on the same port again). The local autoscaler's benchmark and
// tests scrape the dispatcher through it to stage a real metrics outage (connections refused, as
// when a metrics endpoint or the network to it is down) without stopping the data plane.
//
// Each request's first line (GET <path>) is forwarded with common/http_get and the answer written
// back with its status and body; a request it cannot forward is answered 502.
//
// Threading: one accept thread; SetAvailable may be called from any thread.
#ifndef SLUICE_AUTOSCALER_LOCAL_METRICS_RELAY_H_
#define SLUICE_AUTOSCALER_LOCAL_METRICS_RELAY_H_

#include <atomic>
#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

namespace sluice::autoscaler {

class MetricsRelay {
 public:
  // Listens on 127.0.0.1 (a free port) and relays to http://upstream_host:upstream_port.
  static absl::StatusOr<std::unique_ptr<MetricsRelay>> Start(const std::string& upstream_host, int upstream_port);
  ~MetricsRelay();
  MetricsRelay(const MetricsRelay&) = delete;
  MetricsRelay& operator=(const MetricsRelay&) = delete;

  // "http://127.0.0.1:<port>".
  std::string url() const;
  int port() const { return port_; }
  // false: close the listening socket (connections are refused); true: listen again on the port.
  absl::Status SetAvailable(bool available);
  bool available() const;
  int64_t requests() const { return requests_.load(); }

 private:
  MetricsRelay(std::string host, int upstream_port) : upstream_host_(std::move(host)), upstream_port_(upstream_port) {}
  absl::Status Listen();
  void Loop();
  void Serve(int fd);

  const std::string upstream_host_;
  const int upstream_port_;
  int port_ = 0;
  std::atomic<bool> stopping_{false};
  std::atomic<int64_t> requests_{0};
  mutable absl::Mutex mu_;
  int listen_fd_ ABSL_GUARDED_BY(mu_) = -1;
  std::thread thread_;
};

}  // namespace sluice::autoscaler

#endif  // SLUICE_AUTOSCALER_LOCAL_METRICS_RELAY_H_
