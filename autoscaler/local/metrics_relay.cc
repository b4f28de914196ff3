#include "autoscaler/local/metrics_relay.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/http_get.h"

namespace sluice::autoscaler {

namespace {

void WriteAll(int fd, const std::string& data) {
  size_t off = 0;
  while (off < data.size()) {
    const ssize_t n = ::send(fd, data.data() + off, data.size() - off, MSG_NOSIGNAL);
    if (n <= 0) {
      if (n < 0 && errno == EINTR) continue;
      return;
    }
    off += static_cast<size_t>(n);
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<MetricsRelay>> MetricsRelay::Start(const std::string& upstream_host, int upstream_port) {
  std::unique_ptr<MetricsRelay> relay(new MetricsRelay(upstream_host, upstream_port));
  if (absl::Status s = relay->Listen(); !s.ok()) return s;
  relay->thread_ = std::thread([r = relay.get()] { r->Loop(); });
  return relay;
}

MetricsRelay::~MetricsRelay() {
  stopping_ = true;
  if (thread_.joinable()) thread_.join();
  absl::MutexLock lock(&mu_);
  if (listen_fd_ >= 0) ::close(listen_fd_);
}

std::string MetricsRelay::url() const { return absl::StrCat("http://127.0.0.1:", port_); }

bool MetricsRelay::available() const {
  absl::MutexLock lock(&mu_);
  return listen_fd_ >= 0;
}

absl::Status MetricsRelay::Listen() {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::InternalError(absl::StrCat("socket: ", std::strerror(errno)));
  const int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port_));
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 || ::listen(fd, 16) != 0) {
    const std::string why = std::strerror(errno);
    ::close(fd);
    return absl::UnavailableError(absl::StrCat("metrics relay: cannot listen on 127.0.0.1:", port_, ": ", why));
  }
  socklen_t len = sizeof(addr);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  port_ = ntohs(addr.sin_port);
  absl::MutexLock lock(&mu_);
  listen_fd_ = fd;
  return absl::OkStatus();
}

absl::Status MetricsRelay::SetAvailable(bool available) {
  {
    absl::MutexLock lock(&mu_);
    if (available == (listen_fd_ >= 0)) return absl::OkStatus();
    if (!available) {
      ::close(listen_fd_);
      listen_fd_ = -1;
      return absl::OkStatus();
    }
  }
  return Listen();
}

void MetricsRelay::Loop() {
  while (!stopping_) {
    int fd;
    {
      absl::MutexLock lock(&mu_);
      fd = listen_fd_;
    }
    if (fd < 0) {
      ::usleep(50 * 1000);
      continue;
    }
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 50) <= 0) continue;
    int conn;
    {
      absl::MutexLock lock(&mu_);
      if (listen_fd_ != fd) continue;  // cut meanwhile
      conn = ::accept4(fd, nullptr, nullptr, SOCK_CLOEXEC);
    }
    if (conn < 0) continue;
    Serve(conn);
    ::close(conn);
  }
}

void MetricsRelay::Serve(int fd) {
  ++requests_;
  std::string request;
  char buf[4096];
  while (request.find("\r\n\r\n") == std::string::npos && request.size() < 65536) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 2000) <= 0) return;
    const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) return;
    request.append(buf, static_cast<size_t>(n));
  }
  const std::vector<std::string> first = absl::StrSplit(request.substr(0, request.find("\r\n")), ' ');
  if (first.size() < 2 || first[0] != "GET") {
    WriteAll(fd, "HTTP/1.0 405 Method Not Allowed\r\nContent-Length: 0\r\n\r\n");
    return;
  }
  auto answer = HttpGet(upstream_host_, upstream_port_, first[1], absl::Seconds(5));
  if (!answer.ok()) {
    const std::string body = std::string(answer.status().message());
    WriteAll(fd, absl::StrCat("HTTP/1.0 502 Bad Gateway\r\nContent-Length: ", body.size(), "\r\n\r\n", body));
    return;
  }
  WriteAll(fd, absl::StrCat("HTTP/1.0 ", answer->status, " Relayed\r\nContent-Type: text/plain; version=0.0.4\r\n",
                            "Content-Length: ", answer->body.size(), "\r\nConnection: close\r\n\r\n", answer->body));
}

}  // namespace sluice::autoscaler
