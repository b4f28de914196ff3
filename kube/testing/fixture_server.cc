#include "kube/testing/fixture_server.h"

#include <arpa/inet.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <csignal>
#include <cerrno>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace sluice::kube::testing {
namespace {

using nlohmann::json;

std::string ReasonPhrase(int status) {
  switch (status) {
    case 200: return "OK";
    case 201: return "Created";
    case 202: return "Accepted";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 409: return "Conflict";
    case 410: return "Gone";
    case 422: return "Unprocessable Entity";
    case 429: return "Too Many Requests";
    case 500: return "Internal Server Error";
    case 503: return "Service Unavailable";
    default: return "Status";
  }
}

std::string PercentDecode(absl::string_view in) {
  std::string out;
  for (size_t i = 0; i < in.size(); ++i) {
    if (in[i] == '%' && i + 2 < in.size()) {
      int value = 0;
      if (absl::SimpleHexAtoi(in.substr(i + 1, 2), &value)) {
        out.push_back(static_cast<char>(value));
        i += 2;
        continue;
      }
    }
    out.push_back(in[i] == '+' ? ' ' : in[i]);
  }
  return out;
}

std::string BioToString(BIO* bio) {
  char* data = nullptr;
  long size = BIO_get_mem_data(bio, &data);
  return std::string(data, static_cast<size_t>(size));
}

bool AddExtension(X509* cert, int nid, const char* value) {
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, cert, cert, nullptr, nullptr, 0);
  X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &ctx, nid, value);
  if (ext == nullptr) return false;
  bool ok = X509_add_ext(cert, ext, -1) == 1;
  X509_EXTENSION_free(ext);
  return ok;
}

}  // namespace

// One accepted connection, plain or TLS.
struct FixtureServer::Connection {
  int fd = -1;
  SSL* ssl = nullptr;

  ssize_t Read(char* buf, size_t size) {
    if (ssl != nullptr) return SSL_read(ssl, buf, static_cast<int>(size));
    return recv(fd, buf, size, 0);
  }
  bool WriteAll(absl::string_view data) {
    while (!data.empty()) {
      ssize_t n = ssl != nullptr ? SSL_write(ssl, data.data(), static_cast<int>(data.size()))
                                 : send(fd, data.data(), data.size(), MSG_NOSIGNAL);
      if (n < 0 && ssl == nullptr && errno == EINTR) continue;
      if (n <= 0) return false;
      data.remove_prefix(static_cast<size_t>(n));
    }
    return true;
  }
};

absl::StatusOr<TestCertificate> MakeSelfSignedCertificate(absl::string_view common_name) {
  EVP_PKEY* key = EVP_EC_gen("P-256");
  if (key == nullptr) return absl::InternalError("EC key generation failed");
  X509* cert = X509_new();
  TestCertificate out;
  bool ok = cert != nullptr && X509_set_version(cert, 2) == 1;
  static std::atomic<long> serial{1};
  ok = ok && ASN1_INTEGER_set(X509_get_serialNumber(cert), serial++) == 1;
  ok = ok && X509_gmtime_adj(X509_getm_notBefore(cert), -3600) != nullptr;
  ok = ok && X509_gmtime_adj(X509_getm_notAfter(cert), 86400) != nullptr;
  ok = ok && X509_set_pubkey(cert, key) == 1;
  std::string cn(common_name);
  X509_NAME* name = ok ? X509_get_subject_name(cert) : nullptr;
  ok = ok && X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, reinterpret_cast<const unsigned char*>(cn.c_str()),
                                        -1, -1, 0) == 1;
  ok = ok && X509_set_issuer_name(cert, name) == 1;
  std::string san = absl::StrCat("IP:127.0.0.1,DNS:localhost,DNS:", cn);
  ok = ok && AddExtension(cert, NID_subject_alt_name, san.c_str());
  ok = ok && AddExtension(cert, NID_basic_constraints, "critical,CA:TRUE");
  ok = ok && AddExtension(cert, NID_key_usage, "critical,digitalSignature,keyCertSign");
  ok = ok && X509_sign(cert, key, EVP_sha256()) > 0;
  if (ok) {
    BIO* cert_bio = BIO_new(BIO_s_mem());
    BIO* key_bio = BIO_new(BIO_s_mem());
    ok = PEM_write_bio_X509(cert_bio, cert) == 1 &&
         PEM_write_bio_PrivateKey(key_bio, key, nullptr, nullptr, 0, nullptr, nullptr) == 1;
    out.cert_pem = BioToString(cert_bio);
    out.key_pem = BioToString(key_bio);
    BIO_free(cert_bio);
    BIO_free(key_bio);
  }
  X509_free(cert);
  EVP_PKEY_free(key);
  if (!ok) return absl::InternalError("building a self-signed certificate failed");
  return out;
}

json RecordedRequest::JsonBody() const { return json::parse(body, nullptr, false, false); }

Reply Reply::Json(int status, const json& body) {
  Reply reply;
  reply.status = status;
  reply.body = body.dump();
  return reply;
}

Reply Reply::Status(int code, absl::string_view reason, absl::string_view message) {
  return Json(code, json{{"apiVersion", "v1"},
                         {"kind", "Status"},
                         {"metadata", json::object()},
                         {"status", "Failure"},
                         {"reason", std::string(reason)},
                         {"message", std::string(message)},
                         {"code", code}});
}

Reply Reply::Watch(const std::vector<json>& events, bool hold_open) {
  Reply reply;
  reply.chunked = true;
  reply.hold_open = hold_open;
  for (const json& event : events) reply.lines.push_back(event.dump());
  return reply;
}

Reply Reply::FromExchange(const json& exchange) {
  const json& response = exchange.at("response");
  Reply reply;
  reply.status = response.value("status", 200);
  if (response.contains("content_type") && response["content_type"].is_string()) {
    reply.content_type = response["content_type"].get<std::string>();
  }
  if (response.contains("events")) {
    reply.chunked = true;
    for (const json& event : response["events"]) reply.lines.push_back(event.dump());
  } else if (response.contains("body")) {
    const json& body = response["body"];
    reply.body = body.is_string() ? body.get<std::string>() : body.dump();
  }
  return reply;
}

std::string FixturesDir() {
  if (const char* dir = std::getenv("SLUICE_KUBE_FIXTURES"); dir != nullptr && *dir != '\0') return dir;
#ifdef SLUICE_KUBE_DEFAULT_FIXTURES_DIR
  return SLUICE_KUBE_DEFAULT_FIXTURES_DIR;
#else
  if (const char* src = std::getenv("SLUICE_SOURCE_DIR"); src != nullptr && *src != '\0') {
    return absl::StrCat(src, "/testing/kube-fixtures");
  }
  return "testing/kube-fixtures";
#endif
}

absl::StatusOr<json> LoadFixture(absl::string_view name) {
  std::string path = absl::StrCat(FixturesDir(), "/", name, ".json");
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("fixture ", path, " not found (set SLUICE_KUBE_FIXTURES)"));
  std::stringstream buffer;
  buffer << in.rdbuf();
  json doc = json::parse(buffer.str(), nullptr, false);
  if (doc.is_discarded() || !doc.contains("exchanges")) {
    return absl::DataLossError(absl::StrCat("fixture ", path, ": not a fixture document"));
  }
  return doc;
}

json FixtureExchange(absl::string_view name, size_t index) {
  auto doc = LoadFixture(name);
  if (!doc.ok() || index >= (*doc)["exchanges"].size()) {
    std::fprintf(stderr, "missing fixture %s[%zu]: %s\n", std::string(name).c_str(), index,
                 doc.ok() ? "index out of range" : std::string(doc.status().message()).c_str());
    std::abort();
  }
  return (*doc)["exchanges"][index];
}

FixtureServer::FixtureServer() = default;
FixtureServer::~FixtureServer() {
  Stop();
  if (ssl_ctx_ != nullptr) SSL_CTX_free(static_cast<SSL_CTX*>(ssl_ctx_));
}

std::string FixtureServer::url() const {
  return absl::StrCat(ssl_ctx_ != nullptr ? "https" : "http", "://127.0.0.1:", port_);
}

absl::Status FixtureServer::StartTls(const TlsOptions& tls) {
  // SSL_write on a socket the client closed would raise SIGPIPE; tests want an error instead.
  signal(SIGPIPE, SIG_IGN);
  SSL_CTX* ctx = SSL_CTX_new(TLS_server_method());
  if (ctx == nullptr) return absl::InternalError("SSL_CTX_new failed");
  ssl_ctx_ = ctx;
  BIO* cert_bio = BIO_new_mem_buf(tls.server.cert_pem.data(), static_cast<int>(tls.server.cert_pem.size()));
  X509* cert = PEM_read_bio_X509(cert_bio, nullptr, nullptr, nullptr);
  BIO_free(cert_bio);
  BIO* key_bio = BIO_new_mem_buf(tls.server.key_pem.data(), static_cast<int>(tls.server.key_pem.size()));
  EVP_PKEY* key = PEM_read_bio_PrivateKey(key_bio, nullptr, nullptr, nullptr);
  BIO_free(key_bio);
  bool ok = cert != nullptr && key != nullptr && SSL_CTX_use_certificate(ctx, cert) == 1 &&
            SSL_CTX_use_PrivateKey(ctx, key) == 1;
  X509_free(cert);
  EVP_PKEY_free(key);
  if (!ok) return absl::InvalidArgumentError("fixture server: bad TLS certificate or key");
  if (!tls.client_ca_pem.empty()) {
    BIO* ca_bio = BIO_new_mem_buf(tls.client_ca_pem.data(), static_cast<int>(tls.client_ca_pem.size()));
    X509* ca = PEM_read_bio_X509(ca_bio, nullptr, nullptr, nullptr);
    BIO_free(ca_bio);
    if (ca == nullptr) return absl::InvalidArgumentError("fixture server: bad client CA");
    X509_STORE_add_cert(SSL_CTX_get_cert_store(ctx), ca);
    X509_free(ca);
    SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, nullptr);
  }
  return Start();
}

absl::Status FixtureServer::Start() {
  listen_fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (listen_fd_ < 0) return absl::InternalError("socket failed");
  int one = 1;
  setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  if (bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 || listen(listen_fd_, 64) != 0) {
    close(listen_fd_);
    listen_fd_ = -1;
    return absl::InternalError("bind/listen on 127.0.0.1 failed");
  }
  socklen_t len = sizeof(addr);
  getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len);
  port_ = ntohs(addr.sin_port);
  accept_thread_ = std::thread([this] { AcceptLoop(); });
  return absl::OkStatus();
}

void FixtureServer::Stop() {
  {
    absl::MutexLock lock(&mu_);
    if (stopping_ || listen_fd_ < 0) return;
    stopping_ = true;
    for (int fd : connections_) shutdown(fd, SHUT_RDWR);
  }
  shutdown(listen_fd_, SHUT_RDWR);
  if (accept_thread_.joinable()) accept_thread_.join();
  close(listen_fd_);
  std::vector<std::thread> threads;
  {
    absl::MutexLock lock(&mu_);
    for (int fd : connections_) shutdown(fd, SHUT_RDWR);
    threads.swap(connection_threads_);
  }
  for (std::thread& t : threads) t.join();
}

void FixtureServer::AcceptLoop() {
  while (true) {
    int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR) continue;
      return;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    absl::MutexLock lock(&mu_);
    if (stopping_) {
      close(fd);
      return;
    }
    connections_.push_back(fd);
    connection_threads_.emplace_back([this, fd] { ServeConnection(fd); });
  }
}

void FixtureServer::Expect(std::string method, std::string path, Reply reply, std::map<std::string, std::string> query) {
  absl::MutexLock lock(&mu_);
  expectations_.push_back(Expectation{std::move(method), std::move(path), std::move(query), std::move(reply)});
}

void FixtureServer::ExpectExchange(const json& exchange) {
  const json& request = exchange.at("request");
  std::map<std::string, std::string> query;
  if (request.contains("query") && request["query"].is_object()) {
    for (auto it = request["query"].begin(); it != request["query"].end(); ++it) {
      // Watch timeouts are randomised by the client; match the rest.
      if (it.key() == "timeoutSeconds") continue;
      query[it.key()] = it.value().get<std::string>();
    }
  }
  Expect(request.at("method").get<std::string>(), request.at("path").get<std::string>(),
         Reply::FromExchange(exchange), std::move(query));
}

void FixtureServer::SetFallback(Handler handler) {
  absl::MutexLock lock(&mu_);
  fallback_ = std::move(handler);
}

size_t FixtureServer::PendingExpectations() const {
  absl::MutexLock lock(&mu_);
  return expectations_.size();
}

std::vector<RecordedRequest> FixtureServer::Requests() const {
  absl::MutexLock lock(&mu_);
  return requests_;
}

size_t FixtureServer::RequestCount() const {
  absl::MutexLock lock(&mu_);
  return requests_.size();
}

bool FixtureServer::WaitForRequests(size_t n, absl::Duration timeout) const {
  absl::MutexLock lock(&mu_);
  auto enough = [this, n]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return requests_.size() >= n; };
  return mu_.AwaitWithTimeout(absl::Condition(&enough), timeout);
}

size_t FixtureServer::OpenHeldStreams() const {
  absl::MutexLock lock(&mu_);
  return held_open_;
}

bool FixtureServer::WaitForOpenHeldStreams(size_t n, absl::Duration timeout) const {
  absl::MutexLock lock(&mu_);
  auto enough = [this, n]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return held_open_ >= n; };
  return mu_.AwaitWithTimeout(absl::Condition(&enough), timeout);
}

void FixtureServer::ReleaseHeld() {
  absl::MutexLock lock(&mu_);
  ++release_generation_;
}

Reply FixtureServer::Answer(const RecordedRequest& request) {
  Handler fallback;
  {
    absl::MutexLock lock(&mu_);
    for (auto it = expectations_.begin(); it != expectations_.end(); ++it) {
      if (it->method != request.method || it->path != request.path) continue;
      bool match = true;
      for (const auto& [key, value] : it->query) {
        auto q = request.query.find(key);
        if (q == request.query.end() || q->second != value) {
          match = false;
          break;
        }
      }
      if (!match) continue;
      Reply reply = std::move(it->reply);
      expectations_.erase(it);
      return reply;
    }
    fallback = fallback_;
  }
  if (fallback) {
    if (std::optional<Reply> reply = fallback(request)) return *reply;
  }
  return Reply::Status(404, "NotFound", absl::StrCat("no fixture for ", request.method, " ", request.path));
}

bool FixtureServer::WriteReply(Connection& conn, const Reply& reply) {
  std::string head = absl::StrCat("HTTP/1.1 ", reply.status, " ", ReasonPhrase(reply.status), "\r\n",
                                  "Content-Type: ", reply.content_type, "\r\n");
  for (const auto& [name, value] : reply.headers) absl::StrAppend(&head, name, ": ", value, "\r\n");
  if (!reply.chunked) {
    absl::StrAppend(&head, "Content-Length: ", reply.body.size(), "\r\n\r\n");
    return conn.WriteAll(head) && conn.WriteAll(reply.body);
  }
  absl::StrAppend(&head, "Transfer-Encoding: chunked\r\n\r\n");
  uint64_t generation = 0;
  if (reply.hold_open) {
    // Counted from before the first byte, so a client that saw any event knows it is held.
    absl::MutexLock lock(&mu_);
    generation = release_generation_;
    ++held_open_;
  }
  bool ok = WriteChunks(conn, head, reply);
  if (reply.hold_open) {
    absl::MutexLock lock(&mu_);
    auto released = [this, generation]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return stopping_ || release_generation_ != generation;
    };
    if (ok) mu_.Await(absl::Condition(&released));
    --held_open_;
  }
  return ok && conn.WriteAll("0\r\n\r\n");
}

bool FixtureServer::WriteChunks(Connection& conn, const std::string& head, const Reply& reply) {
  if (!conn.WriteAll(head)) return false;
  for (const std::string& line : reply.lines) {
    std::string chunk = absl::StrCat(absl::Hex(line.size() + 1), "\r\n", line, "\n\r\n");
    if (!conn.WriteAll(chunk)) return false;
  }
  return true;
}

void FixtureServer::ServeConnection(int fd) {
  Connection conn;
  conn.fd = fd;
  std::string client_cn;
  bool open = true;
  if (ssl_ctx_ != nullptr) {
    conn.ssl = SSL_new(static_cast<SSL_CTX*>(ssl_ctx_));
    SSL_set_fd(conn.ssl, fd);
    if (SSL_accept(conn.ssl) != 1) {
      open = false;
    } else if (X509* peer = SSL_get1_peer_certificate(conn.ssl); peer != nullptr) {
      char cn[256] = {0};
      X509_NAME_get_text_by_NID(X509_get_subject_name(peer), NID_commonName, cn, sizeof(cn));
      client_cn = cn;
      X509_free(peer);
    }
  }
  std::string buffer;
  char chunk[8192];
  auto fill = [&]() {
    ssize_t n = conn.Read(chunk, sizeof(chunk));
    if (n <= 0) return false;
    buffer.append(chunk, static_cast<size_t>(n));
    return true;
  };
  while (open) {
    size_t header_end;
    while ((header_end = buffer.find("\r\n\r\n")) == std::string::npos) {
      if (!fill()) {
        open = false;
        break;
      }
    }
    if (!open) break;
    std::string head = buffer.substr(0, header_end);
    buffer.erase(0, header_end + 4);
    std::vector<std::string> lines = absl::StrSplit(head, "\r\n");
    RecordedRequest request;
    std::vector<std::string> first = absl::StrSplit(lines[0], ' ');
    if (first.size() < 2) break;
    request.method = first[0];
    std::string target = first[1];
    size_t q = target.find('?');
    request.path = PercentDecode(target.substr(0, q));
    if (q != std::string::npos) {
      for (absl::string_view pair : absl::StrSplit(target.substr(q + 1), '&', absl::SkipEmpty())) {
        size_t eq = pair.find('=');
        request.query[PercentDecode(pair.substr(0, eq))] =
            eq == absl::string_view::npos ? "" : PercentDecode(pair.substr(eq + 1));
      }
    }
    for (size_t i = 1; i < lines.size(); ++i) {
      size_t colon = lines[i].find(':');
      if (colon == std::string::npos) continue;
      request.headers[absl::AsciiStrToLower(lines[i].substr(0, colon))] =
          std::string(absl::StripAsciiWhitespace(lines[i].substr(colon + 1)));
    }
    size_t length = 0;
    if (auto it = request.headers.find("content-length"); it != request.headers.end()) {
      absl::SimpleAtoi(it->second, &length);
      while (buffer.size() < length && fill()) {
      }
      if (buffer.size() < length) break;
      request.body = buffer.substr(0, length);
      buffer.erase(0, length);
    } else if (auto te = request.headers.find("transfer-encoding");
               te != request.headers.end() && absl::AsciiStrToLower(te->second) == "chunked") {
      while (true) {
        size_t eol;
        while ((eol = buffer.find("\r\n")) == std::string::npos && fill()) {
        }
        if (eol == std::string::npos) break;
        size_t size = 0;
        absl::SimpleHexAtoi(buffer.substr(0, eol), &size);
        buffer.erase(0, eol + 2);
        while (buffer.size() < size + 2 && fill()) {
        }
        if (buffer.size() < size + 2) break;
        request.body.append(buffer, 0, size);
        buffer.erase(0, size + 2);
        if (size == 0) break;
      }
    }
    if (!client_cn.empty()) request.headers["x-client-cn"] = client_cn;
    {
      absl::MutexLock lock(&mu_);
      requests_.push_back(request);
    }
    Reply reply = Answer(request);
    if (!WriteReply(conn, reply)) break;
    if (auto c = request.headers.find("connection"); c != request.headers.end() &&
                                                     absl::AsciiStrToLower(c->second) == "close") {
      break;
    }
  }
  {
    absl::MutexLock lock(&mu_);
    for (auto it = connections_.begin(); it != connections_.end(); ++it) {
      if (*it == fd) {
        connections_.erase(it);
        break;
      }
    }
  }
  if (conn.ssl != nullptr) SSL_free(conn.ssl);
  close(fd);
}

}  // namespace sluice::kube::testing
