#include "autoscaler/sources/http_fetch.h"

#include <cpprest/http_client.h>

#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace sluice::autoscaler {

namespace http = web::http;
namespace http_client = web::http::client;

namespace {

absl::StatusOr<std::string> ReadFile(const std::string& path, absl::string_view what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::FailedPreconditionError(absl::StrCat(what, ": cannot read '", path, "'"));
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

}  // namespace

std::string UrlEncode(absl::string_view value) {
  std::string out;
  for (unsigned char c : value) {
    if (absl::ascii_isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      out.push_back(static_cast<char>(c));
    } else {
      out += absl::StrFormat("%%%02X", c);
    }
  }
  return out;
}

struct HttpFetcher::Impl {
  HttpAuthOptions auth;
  std::string ca_pem, cert_pem, key_pem;
  std::unique_ptr<http_client::http_client> client;
};

HttpFetcher::HttpFetcher(std::string base_url, std::unique_ptr<Impl> impl)
    : base_url_(std::move(base_url)), impl_(std::move(impl)) {}
HttpFetcher::~HttpFetcher() = default;

absl::StatusOr<std::unique_ptr<HttpFetcher>> HttpFetcher::Create(const std::string& base_url, HttpAuthOptions auth) {
  if (!absl::StartsWith(base_url, "http://") && !absl::StartsWith(base_url, "https://")) {
    return absl::InvalidArgumentError(
        absl::StrCat("URL '", base_url, "' must start with http:// or https:// (for example http://prometheus:9090)"));
  }
  auto impl = std::make_unique<Impl>();
  impl->auth = auth;
  if (!auth.ca_file.empty()) {
    auto pem = ReadFile(auth.ca_file, "CA file");
    if (!pem.ok()) return pem.status();
    impl->ca_pem = *pem;
  }
  if (auth.client_cert_file.empty() != auth.client_key_file.empty()) {
    return absl::InvalidArgumentError("a client certificate needs both a certificate file and a key file");
  }
  if (!auth.client_cert_file.empty()) {
    auto cert = ReadFile(auth.client_cert_file, "client certificate");
    if (!cert.ok()) return cert.status();
    auto key = ReadFile(auth.client_key_file, "client key");
    if (!key.ok()) return key.status();
    impl->cert_pem = *cert;
    impl->key_pem = *key;
  }
  if (!auth.bearer_token_file.empty()) {
    if (auto token = ReadFile(auth.bearer_token_file, "bearer token file"); !token.ok()) return token.status();
  }
  if (!auth.basic_auth_user.empty()) {
    if (auto pw = ReadFile(auth.basic_auth_password_file, "basic auth password file"); !pw.ok()) return pw.status();
  }
  http_client::http_client_config cfg;
  cfg.set_timeout(std::chrono::milliseconds(absl::ToInt64Milliseconds(auth.timeout)));
  cfg.set_validate_certificates(!auth.insecure_skip_verify);
  if (!impl->ca_pem.empty() || !impl->cert_pem.empty()) {
    std::string ca = impl->ca_pem, cert = impl->cert_pem, key = impl->key_pem;
    cfg.set_ssl_context_callback([ca, cert, key](boost::asio::ssl::context& ctx) {
      boost::system::error_code ec;  // a bad PEM shows as a handshake failure naming the URL
      if (!ca.empty()) ctx.add_certificate_authority(boost::asio::buffer(ca), ec);
      if (!cert.empty()) {
        ctx.use_certificate_chain(boost::asio::buffer(cert), ec);
        ctx.use_private_key(boost::asio::buffer(key), boost::asio::ssl::context::pem, ec);
      }
    });
  }
  try {
    impl->client = std::make_unique<http_client::http_client>(web::uri(base_url), cfg);
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("URL '", base_url, "': ", e.what()));
  }
  return std::unique_ptr<HttpFetcher>(new HttpFetcher(base_url, std::move(impl)));
}

absl::StatusOr<HttpResult> HttpFetcher::Get(absl::string_view path_and_query) const {
  const std::string url = absl::StrCat(base_url_, path_and_query);
  http::http_request request(http::methods::GET);
  std::string authorization;
  if (!impl_->auth.bearer_token_file.empty()) {
    auto token = ReadFile(impl_->auth.bearer_token_file, "bearer token file");
    if (!token.ok()) return token.status();
    authorization = absl::StrCat("Bearer ", absl::StripAsciiWhitespace(*token));
  } else if (!impl_->auth.basic_auth_user.empty()) {
    auto password = ReadFile(impl_->auth.basic_auth_password_file, "basic auth password file");
    if (!password.ok()) return password.status();
    authorization = absl::StrCat(
        "Basic ", absl::Base64Escape(absl::StrCat(impl_->auth.basic_auth_user, ":",
                                                  absl::StripTrailingAsciiWhitespace(*password))));
  }
  try {
    request.set_request_uri(web::uri(std::string(path_and_query)));
    request.headers().add("Accept", "application/json, text/plain;version=0.0.4;q=0.9, */*;q=0.1");
    request.headers().add("User-Agent", "sluice-autoscaler/0.1");
    if (!authorization.empty()) request.headers().add("Authorization", authorization);
    http::http_response response = impl_->client->request(request).get();
    HttpResult out;
    out.status = response.status_code();
    auto it = response.headers().find("Content-Type");
    if (it != response.headers().end()) out.content_type = it->second;
    out.body = response.extract_utf8string(true).get();
    return out;
  } catch (const http::http_exception& e) {
    const std::string what = e.what();
    if (absl::StrContains(what, "timed out") || e.error_code() == std::errc::timed_out) {
      return absl::DeadlineExceededError(
          absl::StrCat("GET ", url, ": no answer within ", absl::FormatDuration(impl_->auth.timeout)));
    }
    return absl::UnavailableError(absl::StrCat("GET ", url, ": ", what));
  } catch (const std::exception& e) {
    return absl::UnavailableError(absl::StrCat("GET ", url, ": ", e.what()));
  } catch (...) {
    return absl::UnavailableError(absl::StrCat("GET ", url, ": unknown error"));
  }
}

}  // namespace sluice::autoscaler
