// Reading the data service's admin endpoints: a minimal blocking HTTP/1.0 GET (loopback admin
// servers only; no TLS, no redirects) and a parser for the Prometheus text exposition format, so
// tests and `sluice up` can read sluice_worker_* / sluice_client_* metrics.
//
// ParsePrometheusText is a pure function; HttpGet does one blocking request with a deadline.
// Both are thread-safe.
#ifndef SLUICE_E2E_DATAPLANE_METRICS_TEXT_H_
#define SLUICE_E2E_DATAPLANE_METRICS_TEXT_H_

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace sluice::local {

struct MetricSample {
  std::string name;
  std::map<std::string, std::string> labels;
  double value = 0;
};

// Parses the text format (comments and blank lines skipped). Errors name the line number.
absl::StatusOr<std::vector<MetricSample>> ParsePrometheusText(absl::string_view text);

// Sum of the samples named `name` whose labels include every pair of `match`.
double SumSamples(const std::vector<MetricSample>& samples, absl::string_view name,
                  const std::map<std::string, std::string>& match = {});
// Number of samples named `name` (matching `match`).
int CountSamples(const std::vector<MetricSample>& samples, absl::string_view name,
                 const std::map<std::string, std::string>& match = {});

struct HttpResponse {
  int status = 0;
  std::string body;
};
// GET http://host:port/path. Errors: Unavailable (cannot connect), DeadlineExceeded, DataLoss
// (malformed answer).
absl::StatusOr<HttpResponse> HttpGet(const std::string& host, int port, const std::string& path,
                                     absl::Duration timeout = absl::Seconds(10));

// HttpGet of /metrics (status 200 required) and ParsePrometheusText.
absl::StatusOr<std::vector<MetricSample>> ScrapeMetrics(const std::string& host, int port,
                                                         absl::Duration timeout = absl::Seconds(10));

}  // namespace sluice::local

#endif  // SLUICE_E2E_DATAPLANE_METRICS_TEXT_H_
