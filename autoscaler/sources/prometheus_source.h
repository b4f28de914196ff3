// PrometheusSource: the autoscaler's signals from a Prometheus server's HTTP API (instant queries,
// GET /api/v1/query). The default PromQL is the one docs/metrics.md gives ("What the autoscaler
// uses"); each DataService may override any query by name (spec.autoscaling.metrics.prometheus.queries).
//
// Default queries are run once per Prometheus URL for every DataService together
// (`sum by (namespace, dataservice) (...)`) and the answer is kept for `cache_for`, so a thousand
// DataServices cost ten queries per period, not ten thousand. Overridden queries run per DataService.
//
// Answers are validated: a non-JSON or non-Prometheus answer, a failed query, a string or matrix
// result, several series where one is expected, labels missing — each is an error naming the query
// and what to do; an empty answer is a missing value ("no series"), NaN and infinities are missing
// values, and the signals' time is that of the dispatcher's last scrape (so the policy sees stale
// data as stale). Nothing unknown ever becomes zero.
//
// Thread-safe: Observe may be called from several reconcile threads at once; HTTP requests are
// made without holding the cache lock (concurrent callers of one URL wait for one fetch).
#ifndef SLUICE_AUTOSCALER_SOURCES_PROMETHEUS_SOURCE_H_
#define SLUICE_AUTOSCALER_SOURCES_PROMETHEUS_SOURCE_H_

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "autoscaler/policy/signals.h"
#include "autoscaler/sources/http_fetch.h"

namespace sluice::autoscaler {

// The query names a DataService may override, in the order they are documented.
const std::vector<std::string>& SignalQueryNames();

struct PromSeries {
  std::map<std::string, std::string> labels;
  double value = 0;  // may be NaN or infinite
  double timestamp = 0;
};

// A parsed instant-query answer: a vector (or a scalar, as one series without labels).
struct PromAnswer {
  std::vector<PromSeries> series;
};

// Parses the HTTP answer to an instant query named `name` (for messages). Errors say what is wrong
// and what to do.
absl::StatusOr<PromAnswer> ParsePromAnswer(const HttpResult& result, const std::string& name, const std::string& url);

// The one value of an answer expected to hold at most one series: missing when empty, NaN or
// infinite; an error when it holds several series.
absl::StatusOr<Measurement> SingleValue(const PromAnswer& answer, const std::string& name);

struct PrometheusOptions {
  HttpAuthOptions auth;
  absl::Duration window = absl::Minutes(1);  // the rate window W
  std::string namespace_label = "namespace";  // "" when the series carry no namespace label
  std::string dataservice_label = "dataservice";
  absl::Duration cache_for = absl::Seconds(5);  // default-query answers reused this long
};

// The PromQL of a signal for one DataService (default or `overrides`), with {{dataservice}},
// {{namespace}}, {{window}} and {{selector}} substituted.
std::string QueryFor(const std::string& name, const std::map<std::string, std::string>& overrides,
                     const std::string& ns, const std::string& dataservice, const PrometheusOptions& options);
// The batched form of a default query (grouped by the namespace and dataservice labels).
std::string BatchedQuery(const std::string& name, const PrometheusOptions& options);

struct PrometheusTarget {
  std::string url;  // Prometheus base URL
  std::string ns;
  std::string dataservice;
  std::map<std::string, std::string> overrides;  // query name -> PromQL
};

// Signals plus the problems that deserve a condition and an Event (a broken query, a URL that is
// not Prometheus): `errors` is empty when every query answered sensibly, even with no data.
struct Observation {
  Signals signals;
  std::vector<std::string> errors;
};

class PrometheusSource {
 public:
  explicit PrometheusSource(PrometheusOptions options);
  ~PrometheusSource();

  Observation Observe(const PrometheusTarget& target, absl::Time now);

  int64_t queries_sent() const;

 private:
  struct Snapshot {
    absl::Time taken = absl::InfinitePast();
    bool fetching = false;
    // query name -> (namespace, dataservice) -> value; or the error of that query.
    std::map<std::string, std::map<std::pair<std::string, std::string>, Measurement>> values;
    std::map<std::string, std::string> errors;
  };
  absl::StatusOr<const HttpFetcher*> FetcherFor(const std::string& url);
  absl::StatusOr<PromAnswer> Query(const HttpFetcher& fetcher, const std::string& name, const std::string& promql);
  // The default-query answers of `url`, fresh within cache_for.
  std::shared_ptr<const Snapshot> SnapshotFor(const std::string& url, absl::Time now);
  std::shared_ptr<Snapshot> TakeSnapshot(const std::string& url, absl::Time now);

  const PrometheusOptions options_;
  mutable absl::Mutex mu_;
  std::map<std::string, std::unique_ptr<HttpFetcher>> fetchers_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::shared_ptr<const Snapshot>> snapshots_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, bool> fetching_ ABSL_GUARDED_BY(mu_);
  int64_t queries_sent_ ABSL_GUARDED_BY(mu_) = 0;
};

// Signals from one value per query name (as the Prometheus source and the direct scrape produce
// them). `at` is now - freshness (the age of the dispatcher's last scrape): the policy judges
// staleness. Without a known freshness every measurement is missing (nothing says the data is live).
Signals SignalsFromValues(const std::map<std::string, Measurement>& values, absl::Time now, absl::Duration window);

}  // namespace sluice::autoscaler

#endif  // SLUICE_AUTOSCALER_SOURCES_PROMETHEUS_SOURCE_H_
