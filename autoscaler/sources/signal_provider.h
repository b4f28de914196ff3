// SignalProvider: where the autoscaler's controllers get one observation of a DataService's
// metrics. RoutingSignalProvider sends each DataService to its Prometheus (spec.autoscaling.metrics
// .prometheus.url, or the autoscaler's --prometheus-url) or, without one, to the direct scrape of
// its dispatcher's and workers' /metrics.
//
// Thread-safe: Observe is called from several reconcile threads at once.
#ifndef SLUICE_AUTOSCALER_SOURCES_SIGNAL_PROVIDER_H_
#define SLUICE_AUTOSCALER_SOURCES_SIGNAL_PROVIDER_H_

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "autoscaler/sources/prometheus_source.h"

namespace sluice::autoscaler {

struct ObserveRequest {
  std::string ns;
  std::string name;
  std::optional<std::string> prometheus_url;     // none: direct scrape
  std::map<std::string, std::string> queries;    // Prometheus query overrides
  std::string dispatcher_metrics_url;            // direct scrape: http://host:port (no path)
  std::map<std::string, std::string> worker_metrics_urls;  // direct scrape: worker name -> http://host:port
};

class SignalProvider {
 public:
  virtual ~SignalProvider() = default;
  virtual Observation Observe(const ObserveRequest& request, absl::Time now) = 0;
  // The DataService is gone: drop what is kept for it.
  virtual void Forget(const std::string& /*ns*/, const std::string& /*name*/) {}
};

}  // namespace sluice::autoscaler

#endif  // SLUICE_AUTOSCALER_SOURCES_SIGNAL_PROVIDER_H_
