// HttpFetcher: GETs from one HTTP(S) base URL (a Prometheus server, a daemon's /metrics) with a
// timeout, optional bearer token (read from a file at each request, so a rotated token is picked
// up), basic auth and TLS options. cpprestsdk's exceptions are caught here and become statuses.
//
// Thread-safe: Get may be called from several threads at once.
#ifndef SLUICE_AUTOSCALER_SOURCES_HTTP_FETCH_H_
#define SLUICE_AUTOSCALER_SOURCES_HTTP_FETCH_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace sluice::autoscaler {

struct HttpAuthOptions {
  std::string bearer_token_file;      // "Authorization: Bearer <file contents, trimmed>"
  std::string basic_auth_user;        // with basic_auth_password_file: basic auth
  std::string basic_auth_password_file;
  std::string ca_file;                // PEM CA bundle to verify the server with (https)
  std::string client_cert_file;       // PEM client certificate and key (mutual TLS)
  std::string client_key_file;
  bool insecure_skip_verify = false;
  absl::Duration timeout = absl::Seconds(5);
};

struct HttpResult {
  int status = 0;
  std::string content_type;
  std::string body;
};

class HttpFetcher {
 public:
  // `base_url`: scheme, host, port and an optional path prefix ("http://prometheus:9090",
  // "https://monitoring.example/prometheus"). Files named in `auth` are checked here.
  static absl::StatusOr<std::unique_ptr<HttpFetcher>> Create(const std::string& base_url, HttpAuthOptions auth);
  ~HttpFetcher();

  // GET base_url + path_and_query. Transport failures and timeouts are Unavailable/DeadlineExceeded
  // naming the URL; any HTTP status is returned as a result (the caller judges it).
  absl::StatusOr<HttpResult> Get(absl::string_view path_and_query) const;

  const std::string& base_url() const { return base_url_; }

 private:
  struct Impl;
  HttpFetcher(std::string base_url, std::unique_ptr<Impl> impl);
  const std::string base_url_;
  std::unique_ptr<Impl> impl_;
};

// Percent-encodes a query parameter value.
std::string UrlEncode(absl::string_view value);

}  // namespace sluice::autoscaler

#endif  // SLUICE_AUTOSCALER_SOURCES_HTTP_FETCH_H_
