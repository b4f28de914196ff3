#include "kube/client.h"

#include <openssl/bio.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include <cpprest/http_client.h>

#include <algorithm>
#include <exception>
#include <istream>
#include <random>
#include <streambuf>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "kube/errors.h"
#include "kube/list_reader.h"

namespace sluice::kube {
namespace {

using nlohmann::json;
namespace http = web::http;
namespace http_client = web::http::client;

absl::Status CheckPem(const std::string& pem, bool is_key, absl::string_view field) {
  BIO* bio = BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size()));
  if (bio == nullptr) return absl::InternalError("BIO_new_mem_buf failed");
  bool ok = false;
  if (is_key) {
    EVP_PKEY* key = PEM_read_bio_PrivateKey(bio, nullptr, nullptr, nullptr);
    ok = key != nullptr;
    EVP_PKEY_free(key);
  } else {
    X509* cert = PEM_read_bio_X509(bio, nullptr, nullptr, nullptr);
    ok = cert != nullptr;
    X509_free(cert);
  }
  BIO_free(bio);
  if (!ok) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ": not a PEM ", is_key ? "private key" : "certificate"));
  }
  return absl::OkStatus();
}

std::string HeaderValue(const http::http_headers& headers, const char* name) {
  auto it = headers.find(name);
  return it == headers.end() ? std::string() : utility::conversions::to_utf8string(it->second);
}

// A std::streambuf over a response body as cpprestsdk receives it, so that a parser can read the
// body while it arrives instead of from one string holding all of it. Reads block; a transport
// failure is thrown (as cpprestsdk throws it) from underflow(). Keeps the body's first bytes for
// error messages.
class ResponseStreamBuf : public std::streambuf {
 public:
  explicit ResponseStreamBuf(concurrency::streams::streambuf<uint8_t> body) : body_(std::move(body)) {}

  const std::string& start() const { return start_; }

 protected:
  int_type underflow() override {
    if (gptr() < egptr()) return traits_type::to_int_type(*gptr());
    // As in Watch: cpprestsdk's getn(count) only completes once `count` bytes are there, so wait
    // for one byte and then take whatever else has arrived.
    using body_traits = concurrency::streams::streambuf<uint8_t>::traits;
    auto first = body_.bumpc().get();
    if (first == body_traits::eof()) return traits_type::eof();
    buffer_[0] = static_cast<char>(first);
    size_t n = 1;
    size_t available = body_.in_avail();
    if (available > 0) {
      n += body_.getn(reinterpret_cast<uint8_t*>(buffer_) + 1, std::min(available, sizeof(buffer_) - 1)).get();
    }
    if (start_.size() < kBodyStartBytes) start_.append(buffer_, std::min(n, kBodyStartBytes - start_.size()));
    setg(buffer_, buffer_, buffer_ + n);
    return traits_type::to_int_type(buffer_[0]);
  }

 private:
  concurrency::streams::streambuf<uint8_t> body_;
  char buffer_[16 * 1024];
  std::string start_;
};

}  // namespace

absl::string_view WatchEventTypeName(WatchEvent::Type type) {
  switch (type) {
    case WatchEvent::Type::kAdded: return "ADDED";
    case WatchEvent::Type::kModified: return "MODIFIED";
    case WatchEvent::Type::kDeleted: return "DELETED";
    case WatchEvent::Type::kBookmark: return "BOOKMARK";
    case WatchEvent::Type::kError: return "ERROR";
  }
  return "?";
}

absl::StatusOr<WatchEvent> ParseWatchLine(absl::string_view line) {
  json doc = json::parse(line.begin(), line.end(), nullptr, false);
  std::string excerpt(line.substr(0, 120));
  if (doc.is_discarded() || !doc.is_object()) {
    return absl::DataLossError(absl::StrCat("watch stream: line is not a JSON object: ", excerpt));
  }
  auto type = doc.find("type");
  auto object = doc.find("object");
  if (type == doc.end() || !type->is_string()) {
    return absl::DataLossError(absl::StrCat("watch stream: event without a string \"type\": ", excerpt));
  }
  if (object == doc.end() || !object->is_object()) {
    return absl::DataLossError(absl::StrCat("watch stream: event without an \"object\": ", excerpt));
  }
  WatchEvent event;
  const std::string& name = type->get_ref<const std::string&>();
  if (name == "ADDED") event.type = WatchEvent::Type::kAdded;
  else if (name == "MODIFIED") event.type = WatchEvent::Type::kModified;
  else if (name == "DELETED") event.type = WatchEvent::Type::kDeleted;
  else if (name == "BOOKMARK") event.type = WatchEvent::Type::kBookmark;
  else if (name == "ERROR") event.type = WatchEvent::Type::kError;
  else return absl::DataLossError(absl::StrCat("watch stream: unknown event type \"", name, "\""));
  event.object = std::move(*object);
  return event;
}

absl::Status LineSplitter::Feed(absl::string_view data,
                                const std::function<absl::Status(absl::string_view)>& on_line) {
  pending_.append(data.data(), data.size());
  size_t start = 0;
  absl::Status status;
  while (status.ok()) {
    size_t newline = pending_.find('\n', start);
    if (newline == std::string::npos) break;
    absl::string_view line(pending_.data() + start, newline - start);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    start = newline + 1;
    if (!line.empty()) status = on_line(line);
  }
  pending_.erase(0, start);
  return status;
}

std::string LineSplitter::TakeRemainder() {
  std::string out;
  out.swap(pending_);
  return out;
}

struct Client::Impl {
  Config config;
  ClientOptions options;
  std::shared_ptr<TokenSource> tokens;
  std::unique_ptr<TokenBucket> bucket;
  std::unique_ptr<http_client::http_client> http;
  std::atomic<int64_t> requests{0};
  absl::Mutex rng_mu;
  std::mt19937_64 rng ABSL_GUARDED_BY(rng_mu){std::random_device{}()};

  double Random01() {
    absl::MutexLock lock(&rng_mu);
    return std::uniform_real_distribution<double>(0.0, 1.0)(rng);
  }

  http_client::http_client_config MakeHttpConfig(absl::Duration timeout) const {
    http_client::http_client_config cfg;
    cfg.set_timeout(std::chrono::milliseconds(absl::ToInt64Milliseconds(timeout)));
    cfg.set_validate_certificates(!config.insecure_skip_tls_verify);
    std::string ca = config.ca_pem, cert = config.client_cert_pem, key = config.client_key_pem;
    if (!ca.empty() || !cert.empty()) {
      cfg.set_ssl_context_callback([ca, cert, key](boost::asio::ssl::context& ctx) {
        boost::system::error_code ec;  // PEM was validated in Create(); errors here are ignored
        if (!ca.empty()) ctx.add_certificate_authority(boost::asio::buffer(ca), ec);
        if (!cert.empty()) {
          ctx.use_certificate_chain(boost::asio::buffer(cert), ec);
          ctx.use_private_key(boost::asio::buffer(key), boost::asio::ssl::context::pem, ec);
        }
      });
    }
    return cfg;
  }

  // A request ready to send, rebuilt for each attempt (cpprestsdk consumes the body stream).
  http::http_request BuildRequest(absl::string_view method, absl::string_view path_and_query,
                                  const std::optional<std::string>& body, absl::string_view content_type,
                                  const std::string& token) const {
    http::http_request request{http::method(std::string(method))};
    request.set_request_uri(web::uri(std::string(path_and_query)));
    request.headers().add("Accept", "application/json");
    request.headers().add("User-Agent", options.user_agent);
    if (!token.empty()) request.headers().add("Authorization", "Bearer " + token);
    if (body) request.set_body(*body, std::string(content_type));
    return request;
  }

  absl::StatusOr<std::string> CurrentToken() {
    if (!tokens) return std::string();
    return tokens->Token();
  }

  // Reads a 2xx answer's body as it arrives, in place of HttpResponse::body (which stays empty).
  // Called once per attempt (a retried request calls it again from the start).
  using BodyReader = std::function<absl::Status(std::istream& body, const std::function<std::string()>& start)>;

  // One attempt. Transport problems come back as Unavailable.
  absl::StatusOr<HttpResponse> SendOnce(absl::string_view method, absl::string_view path_and_query,
                                        const std::optional<std::string>& body, absl::string_view content_type,
                                        const std::string& token, std::stop_token stop, const BodyReader* reader) {
    pplx::cancellation_token_source cancel;
    std::stop_callback on_stop(stop, [&cancel] { cancel.cancel(); });
    try {
      ++requests;
      http::http_response response =
          http->request(BuildRequest(method, path_and_query, body, content_type, token), cancel.get_token()).get();
      HttpResponse out;
      out.status = response.status_code();
      out.content_type = HeaderValue(response.headers(), "Content-Type");
      out.retry_after = HeaderValue(response.headers(), "Retry-After");
      if (reader != nullptr && out.status >= 200 && out.status < 300) {
        ResponseStreamBuf streambuf(response.body().streambuf());
        std::istream in(&streambuf);
        absl::Status read = (*reader)(in, [&streambuf] { return streambuf.start(); });
        if (!read.ok()) return read;
        return out;
      }
      out.body = response.extract_utf8string(true).get();
      return out;
    } catch (const pplx::task_canceled&) {
      return absl::CancelledError(absl::StrCat(method, " ", path_and_query, ": cancelled"));
    } catch (const std::exception& e) {
      if (stop.stop_requested()) return absl::CancelledError(absl::StrCat(method, " ", path_and_query, ": cancelled"));
      return absl::UnavailableError(absl::StrCat(method, " ", config.server, path_and_query, ": ", e.what()));
    } catch (...) {
      return absl::UnavailableError(absl::StrCat(method, " ", config.server, path_and_query, ": unknown error"));
    }
  }

  absl::StatusOr<HttpResponse> Send(absl::string_view method, absl::string_view path_and_query,
                                    const std::optional<std::string>& body, absl::string_view content_type,
                                    std::stop_token stop, const BodyReader* reader = nullptr) {
    bool refreshed_token = false;
    for (int attempt = 1;; ++attempt) {
      if (!bucket->Acquire(stop)) return absl::CancelledError("request cancelled while rate limited");
      auto token = CurrentToken();
      if (!token.ok()) return token.status();
      auto response = SendOnce(method, path_and_query, body, content_type, *token, stop, reader);
      std::optional<absl::Duration> delay;
      if (!response.ok()) {
        // Transport failures (Unavailable) may be retried; cancellation and a body reader's verdict not.
        if (!absl::IsUnavailable(response.status())) return response.status();
        delay = RetryDelay(options.retry, method, 0, "", attempt, Random01());
        if (!delay) return response.status();
      } else {
        if (response->status == 401 && tokens && !refreshed_token && tokens->Invalidate()) {
          // The token may have rotated or expired: fetch a fresh one and try once more.
          refreshed_token = true;
          --attempt;
          continue;
        }
        if (response->status < 400) return response;
        delay = RetryDelay(options.retry, method, response->status, response->retry_after, attempt, Random01());
        if (!delay) return response;
      }
      if (!options.clock->SleepFor(*delay, stop)) return absl::CancelledError("request cancelled during retry backoff");
    }
  }
};

Client::Client(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Client::~Client() = default;

absl::StatusOr<std::unique_ptr<Client>> Client::Create(const Config& config, ClientOptions options) {
  if (config.server.empty()) return absl::InvalidArgumentError("kube client: Config.server is empty");
  if (!absl::StartsWith(config.server, "https://") && !absl::StartsWith(config.server, "http://")) {
    return absl::InvalidArgumentError(
        absl::StrCat("kube client: server \"", config.server, "\" must start with https:// or http://"));
  }
  std::string origin = config.origin.empty() ? "config" : config.origin;
  if (!config.ca_pem.empty()) {
    if (auto s = CheckPem(config.ca_pem, false, origin + ": certificate-authority"); !s.ok()) return s;
  }
  if (!config.client_cert_pem.empty()) {
    if (auto s = CheckPem(config.client_cert_pem, false, origin + ": client-certificate"); !s.ok()) return s;
    if (auto s = CheckPem(config.client_key_pem, true, origin + ": client-key"); !s.ok()) return s;
  }
  auto impl = std::make_unique<Impl>();
  impl->config = config;
  impl->options = options;
  impl->tokens = options.token_source ? options.token_source
                                      : std::shared_ptr<TokenSource>(MakeTokenSource(config, options.clock));
  impl->bucket = std::make_unique<TokenBucket>(options.qps, options.burst, options.clock);
  try {
    impl->http = std::make_unique<http_client::http_client>(web::uri(config.server),
                                                             impl->MakeHttpConfig(options.request_timeout));
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("kube client: server \"", config.server, "\": ", e.what()));
  }
  return std::unique_ptr<Client>(new Client(std::move(impl)));
}

const Config& Client::config() const { return impl_->config; }
int64_t Client::requests_sent() const { return impl_->requests.load(); }

absl::StatusOr<HttpResponse> Client::Send(absl::string_view method, absl::string_view path_and_query,
                                          std::optional<std::string> body, absl::string_view content_type,
                                          std::stop_token stop) {
  return impl_->Send(method, path_and_query, body, content_type, stop);
}

absl::StatusOr<json> Client::RequestJson(absl::string_view method, absl::string_view path, const QueryParams& query,
                                         const json* body, absl::string_view content_type, std::stop_token stop) {
  std::string target = absl::StrCat(path, BuildQuery(query));
  std::optional<std::string> payload;
  if (body != nullptr) {
    try {
      payload = body->dump();
    } catch (const std::exception& e) {
      return absl::InvalidArgumentError(absl::StrCat(method, " ", path, ": body cannot be serialised: ", e.what()));
    }
  }
  auto response = impl_->Send(method, target, payload, content_type, stop);
  if (!response.ok()) return response.status();
  std::string what = absl::StrCat(method, " ", path);
  if (response->status < 200 || response->status >= 300) {
    return StatusFromResponse(response->status, response->body, what);
  }
  if (response->body.empty()) return json(nullptr);
  json parsed = json::parse(response->body, nullptr, false);
  if (parsed.is_discarded()) {
    return absl::DataLossError(absl::StrCat(what, ": response is not JSON: ", response->body.substr(0, 200)));
  }
  return parsed;
}

absl::StatusOr<json> Client::Get(const ResourceRef& ref, absl::string_view ns, absl::string_view name,
                                 absl::string_view subresource) {
  return RequestJson("GET", ref.ObjectPath(ns, name, subresource));
}

absl::StatusOr<json> Client::List(const ResourceRef& ref, absl::string_view ns, const ListOptions& options,
                                  std::stop_token stop) {
  return RequestJson("GET", ref.CollectionPath(ns), options.ToQuery(), nullptr, "application/json", stop);
}

absl::StatusOr<json> Client::ListAll(const ResourceRef& ref, absl::string_view ns, const ListOptions& options,
                                     std::stop_token stop, const std::function<json(json&&)>& item_transform) {
  const std::string path = ref.CollectionPath(ns);
  const std::string what = absl::StrCat("GET ", path);
  bool restarted = false;
  ListOptions page_options = options;
  json merged;
  json items = json::array();
  while (true) {
    // Each page is read as it arrives, item by item (kube/list_reader.h): neither the body nor the
    // page as a JSON tree is ever held whole, only the (transformed) items.
    json head;
    json page_items = json::array();
    Impl::BodyReader reader = [&](std::istream& body, const std::function<std::string()>& start) {
      head = json();
      page_items = json::array();  // a retried attempt starts over
      return ReadList(
          body, what,
          [&](size_t index, json&& item) {
            if (!item_transform) {
              page_items.push_back(std::move(item));
              return absl::OkStatus();
            }
            // A transform that throws is a bug of the caller's, not a transport failure: not retried.
            try {
              page_items.push_back(item_transform(std::move(item)));
            } catch (const std::exception& e) {
              return absl::InternalError(absl::StrCat(what, ": items[", index, "]: the transform failed: ", e.what()));
            }
            return absl::OkStatus();
          },
          &head, start);
    };
    auto response =
        impl_->Send("GET", absl::StrCat(path, BuildQuery(page_options.ToQuery())), std::nullopt, "application/json",
                    stop, &reader);
    absl::Status status = response.status();
    if (status.ok() && (response->status < 200 || response->status >= 300)) {
      status = StatusFromResponse(response->status, response->body, what);
    }
    if (!status.ok()) {
      if (IsGone(status) && !page_options.continue_token.empty() && !restarted) {
        // The continue token expired: start over with a consistent list.
        restarted = true;
        page_options = options;
        page_options.continue_token.clear();
        page_options.resource_version.reset();
        page_options.resource_version_match.clear();
        items = json::array();
        continue;
      }
      return status;
    }
    if (items.empty()) {
      items = std::move(page_items);
    } else {
      for (json& item : page_items) items.push_back(std::move(item));
    }
    page_items = json();
    std::string next;
    if (head.contains("metadata") && head["metadata"].is_object()) {
      const json& meta = head["metadata"];
      if (meta.contains("continue") && meta["continue"].is_string()) next = meta["continue"].get<std::string>();
    }
    merged = std::move(head);
    if (next.empty()) break;
    page_options.continue_token = next;
  }
  merged["items"] = std::move(items);
  if (merged.contains("metadata") && merged["metadata"].is_object()) merged["metadata"].erase("continue");
  return merged;
}

absl::StatusOr<json> Client::Create(const ResourceRef& ref, absl::string_view ns, const json& body,
                                    const WriteOptions& options, absl::string_view subresource_of,
                                    absl::string_view subresource) {
  std::string path = subresource_of.empty() ? ref.CollectionPath(ns) : ref.ObjectPath(ns, subresource_of, subresource);
  return RequestJson("POST", path, options.ToQuery(), &body);
}

absl::StatusOr<json> Client::Replace(const ResourceRef& ref, absl::string_view ns, absl::string_view name,
                                     const json& body, const WriteOptions& options, absl::string_view subresource) {
  return RequestJson("PUT", ref.ObjectPath(ns, name, subresource), options.ToQuery(), &body);
}

absl::StatusOr<json> Client::Patch(const ResourceRef& ref, absl::string_view ns, absl::string_view name,
                                   PatchType type, const json& patch, const WriteOptions& options,
                                   absl::string_view subresource) {
  return RequestJson("PATCH", ref.ObjectPath(ns, name, subresource), options.ToQuery(), &patch,
                     PatchContentType(type));
}

absl::StatusOr<json> Client::Delete(const ResourceRef& ref, absl::string_view ns, absl::string_view name,
                                    const DeleteOptions& options) {
  json body = options.ToBody();
  return RequestJson("DELETE", ref.ObjectPath(ns, name), {}, body.is_null() ? nullptr : &body);
}

absl::Status Client::Watch(const ResourceRef& ref, absl::string_view ns, const WatchOptions& options,
                           const std::function<absl::Status(WatchEvent&&)>& on_event, std::stop_token stop) {
  std::string path = ref.CollectionPath(ns);
  std::string target = absl::StrCat(path, BuildQuery(options.ToQuery()));
  std::string what = absl::StrCat("WATCH ", path);
  if (!impl_->bucket->Acquire(stop)) return absl::CancelledError(what + ": cancelled");
  auto token = impl_->CurrentToken();
  if (!token.ok()) return token.status();
  // A dedicated connection whose inactivity timeout outlasts the server-side watch timeout.
  absl::Duration timeout = options.timeout_seconds > 0 ? absl::Seconds(options.timeout_seconds + 60) : absl::Hours(1);
  pplx::cancellation_token_source cancel;
  std::stop_callback on_stop(stop, [&cancel] { cancel.cancel(); });
  auto cancelled = [&] { return absl::CancelledError(what + ": cancelled"); };
  try {
    http_client::http_client watch_http(web::uri(impl_->config.server), impl_->MakeHttpConfig(timeout));
    ++impl_->requests;
    http::http_response response =
        watch_http.request(impl_->BuildRequest("GET", target, std::nullopt, "", *token), cancel.get_token()).get();
    if (response.status_code() != 200) {
      std::string body = response.extract_utf8string(true).get();
      if (response.status_code() == 401 && impl_->tokens) impl_->tokens->Invalidate();
      return StatusFromResponse(response.status_code(), body, what);
    }
    concurrency::streams::istream stream = response.body();
    LineSplitter splitter;
    auto handle_line = [&](absl::string_view line) -> absl::Status {
      auto event = ParseWatchLine(line);
      if (!event.ok()) return event.status();
      if (event->type == WatchEvent::Type::kError) return StatusFromStatusObject(event->object, 500, what);
      return on_event(std::move(*event));
    };
    // cpprestsdk's response buffer only completes a getn(count) once `count` bytes are there (or
    // the stream ends), so a large read would sit on a quiet watch. Wait for one byte, then take
    // whatever else has already arrived.
    concurrency::streams::streambuf<uint8_t> body = stream.streambuf();
    std::string buffer(16 * 1024, '\0');
    using traits = concurrency::streams::streambuf<uint8_t>::traits;
    while (true) {
      if (stop.stop_requested()) return cancelled();
      auto first = body.bumpc().get();
      if (first == traits::eof()) break;  // the server ended the stream
      buffer[0] = static_cast<char>(first);
      size_t n = 1;
      size_t available = body.in_avail();
      if (available > 0) {
        n += body.getn(reinterpret_cast<uint8_t*>(buffer.data()) + 1, std::min(available, buffer.size() - 1)).get();
      }
      absl::Status status = splitter.Feed(absl::string_view(buffer.data(), n), handle_line);
      if (!status.ok()) return status;
    }
    std::string rest = splitter.TakeRemainder();
    if (!absl::StripAsciiWhitespace(rest).empty()) {
      absl::Status status = handle_line(rest);
      if (!status.ok()) return status;
    }
    if (stop.stop_requested()) return cancelled();
    return absl::OkStatus();
  } catch (const pplx::task_canceled&) {
    return cancelled();
  } catch (const std::exception& e) {
    if (stop.stop_requested()) return cancelled();
    return absl::UnavailableError(absl::StrCat(what, ": ", e.what()));
  } catch (...) {
    if (stop.stop_requested()) return cancelled();
    return absl::UnavailableError(absl::StrCat(what, ": unknown error"));
  }
}

}  // namespace sluice::kube
