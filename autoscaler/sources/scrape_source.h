// ScrapeSource: the autoscaler's signals without Prometheus — it scrapes the dispatcher's and the
// workers' /metrics itself (the embedded default of `sluice up` and of small clusters) and computes
// the rates Prometheus would: per series, the increase over the rate window (a counter that went
// down was reset: its new value is the increase since), summed, over the window's span.
//
//   stall ratio  = increase(client wait) / increase(client step)       (dispatcher)
//   demand       = increase(client elements) / span                    (dispatcher)
//   supply, CPU  = increase(produced), increase(busy seconds) / span    (each worker, summed)
//   buffered     = sum of the workers' buffered gauges at the last scrape
//   churn        = increase(worker removals, reason "heartbeat timeout") (dispatcher)
//   workers      = workers scraped in both the window's first and last scrape (so supply per
//                  worker divides like by like); local ones by their placement label
//
// Until a DataService has two scrapes a minimum span apart, its rates are missing ("warming up").
// A dispatcher that cannot be scraped is an error and leaves every signal missing; a worker that
// cannot be scraped leaves the window's sums (it is not counted), and is named in `errors` when no
// worker answers at all.
//
// Thread-safe: Observe may be called from several threads (for different DataServices, or the
// same one); HTTP requests are made without holding the lock.
#ifndef SLUICE_AUTOSCALER_SOURCES_SCRAPE_SOURCE_H_
#define SLUICE_AUTOSCALER_SOURCES_SCRAPE_SOURCE_H_

#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "autoscaler/sources/http_fetch.h"
#include "autoscaler/sources/signal_provider.h"
#include "common/prometheus_text.h"

namespace sluice::autoscaler {

// The counters and gauges of one scrape of one DataService's processes.
struct ScrapeSnapshot {
  absl::Time at;
  bool dispatcher_ok = false;
  // Dispatcher totals (summed over jobs and series).
  double client_wait = 0, client_step = 0, client_elements = 0, heartbeat_removals = 0;
  // Per worker (by name): produced, busy seconds, buffered, placement.
  struct Worker {
    double produced = 0, busy = 0, buffered = 0;
    bool local = false;
  };
  std::map<std::string, Worker> workers;
};

// Reads a snapshot's numbers from parsed pages (pure). `dataservice` filters on the label of that
// name when non-empty (a process serving several data services is not expected, but possible).
void AddDispatcherPage(const std::vector<promtext::MetricSample>& samples, ScrapeSnapshot* snap);
void AddWorkerPage(const std::string& worker, const std::vector<promtext::MetricSample>& samples,
                   ScrapeSnapshot* snap);

// Signals over the snapshots within `window` before the last one (pure).
Signals SignalsFromSnapshots(const std::deque<ScrapeSnapshot>& snapshots, absl::Duration window,
                             absl::Duration min_span);

struct ScrapeOptions {
  absl::Duration window = absl::Minutes(1);
  absl::Duration min_span = absl::Seconds(5);  // the least window span that gives a rate
  absl::Duration timeout = absl::Seconds(2);   // per scrape
};

class ScrapeSource {
 public:
  explicit ScrapeSource(ScrapeOptions options) : options_(options) {}
  Observation Observe(const ObserveRequest& request, absl::Time now);
  void Forget(const std::string& ns, const std::string& name);
  // HTTP clients kept (one per address a DataService's last observation scraped).
  size_t http_clients();

 private:
  using Fetcher = std::shared_ptr<const HttpFetcher>;  // shared: a scrape in flight keeps its client
  static absl::StatusOr<std::vector<promtext::MetricSample>> Scrape(const absl::StatusOr<Fetcher>& fetcher,
                                                                    const std::string& base_url);

  const ScrapeOptions options_;
  absl::Mutex mu_;
  std::map<std::string, std::deque<ScrapeSnapshot>> history_ ABSL_GUARDED_BY(mu_);  // by "ns/name"
  // By "ns/name", then base URL: the clients of the pods the DataService's last observation
  // scraped. Pods come and go with new addresses; the clients of those gone go with them.
  std::map<std::string, std::map<std::string, absl::StatusOr<Fetcher>>> fetchers_ ABSL_GUARDED_BY(mu_);
};

// Prometheus when the DataService has a URL, the direct scrape otherwise.
class RoutingSignalProvider final : public SignalProvider {
 public:
  RoutingSignalProvider(PrometheusSource* prometheus, ScrapeSource* scrape) : prometheus_(prometheus), scrape_(scrape) {}
  Observation Observe(const ObserveRequest& request, absl::Time now) override;
  void Forget(const std::string& ns, const std::string& name) override;

 private:
  PrometheusSource* const prometheus_;
  ScrapeSource* const scrape_;
};

}  // namespace sluice::autoscaler

#endif  // SLUICE_AUTOSCALER_SOURCES_SCRAPE_SOURCE_H_
