// Reading a daemon's admin endpoints (/metrics, /healthz, /readyz) over plain HTTP: a minimal
// blocking HTTP/1.0 GET with a deadline (IPv4 literal hosts and "localhost"; no TLS, no redirects,
// no chunked answers), and ScrapeMetrics = GET /metrics + the Prometheus text parser. Used by
// `sluice up`, the local process supervisor, the multi-process tests and the autoscaler's direct
// scrape of the dispatcher and workers.
//
// Thread-safe: no shared state; each call opens its own connection and blocks its caller until
// the answer is complete or the deadline passes.
#ifndef SLUICE_COMMON_HTTP_GET_H_
#define SLUICE_COMMON_HTTP_GET_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/prometheus_text.h"

namespace sluice {

struct HttpResponse {
  int status = 0;
  std::string body;
};

// GET http://host:port/path. Errors: InvalidArgument (host is not an IPv4 address), Unavailable
// (cannot connect, connection reset), DeadlineExceeded, DataLoss (malformed or chunked answer).
absl::StatusOr<HttpResponse> HttpGet(const std::string& host, int port, const std::string& path,
                                     absl::Duration timeout = absl::Seconds(10));

// HttpGet of /metrics (status 200 required, else Unavailable naming the status) and
// promtext::ParsePrometheusText (its InvalidArgument names the line).
absl::StatusOr<std::vector<promtext::MetricSample>> ScrapeMetrics(const std::string& host, int port,
                                                                   absl::Duration timeout = absl::Seconds(10));

}  // namespace sluice

#endif  // SLUICE_COMMON_HTTP_GET_H_
