#include "common/http_get.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"

namespace sluice {
namespace {

// Closes a file descriptor on scope exit.
struct FdCloser {
  int fd;
  ~FdCloser() {
    if (fd >= 0) ::close(fd);
  }
};

// Waits until `fd` is ready for `events` or the deadline passes.
absl::Status WaitFd(int fd, short events, absl::Time deadline, absl::string_view what) {
  while (true) {
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) return absl::DeadlineExceededError(absl::StrCat("HTTP GET: timed out ", what));
    pollfd p{fd, events, 0};
    const int r = ::poll(&p, 1, static_cast<int>(absl::ToInt64Milliseconds(left)) + 1);
    if (r > 0) return absl::OkStatus();
    if (r < 0 && errno != EINTR) return absl::UnavailableError(absl::StrCat("HTTP GET: poll: ", strerror(errno)));
  }
}

}  // namespace

absl::StatusOr<HttpResponse> HttpGet(const std::string& host, int port, const std::string& path,
                                     absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  if (port <= 0 || port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("HTTP GET: port ", port, " is outside 1-65535"));
  }
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  if (::inet_pton(AF_INET, host == "localhost" ? "127.0.0.1" : host.c_str(), &addr.sin_addr) != 1) {
    return absl::InvalidArgumentError(absl::StrCat("HTTP GET: host '", host, "' is not an IPv4 address"));
  }
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return absl::InternalError(absl::StrCat("HTTP GET: socket: ", strerror(errno)));
  FdCloser closer{fd};
  const std::string where = absl::StrCat(host, ":", port, path);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    if (errno != EINPROGRESS) return absl::UnavailableError(absl::StrCat("HTTP GET ", where, ": ", strerror(errno)));
    if (absl::Status s = WaitFd(fd, POLLOUT, deadline, absl::StrCat("connecting to ", where)); !s.ok()) return s;
    int err = 0;
    socklen_t len = sizeof(err);
    ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
    if (err != 0) return absl::UnavailableError(absl::StrCat("HTTP GET ", where, ": ", strerror(err)));
  }
  const std::string request = absl::StrCat("GET ", path, " HTTP/1.0\r\nHost: ", host, "\r\nConnection: close\r\n\r\n");
  size_t sent = 0;
  while (sent < request.size()) {
    if (absl::Status s = WaitFd(fd, POLLOUT, deadline, absl::StrCat("sending to ", where)); !s.ok()) return s;
    ssize_t n = ::send(fd, request.data() + sent, request.size() - sent, MSG_NOSIGNAL);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (n < 0) return absl::UnavailableError(absl::StrCat("HTTP GET ", where, ": send: ", strerror(errno)));
    sent += static_cast<size_t>(n);
  }
  std::string raw;
  char buf[16384];
  while (true) {
    if (absl::Status s = WaitFd(fd, POLLIN, deadline, absl::StrCat("reading from ", where)); !s.ok()) return s;
    ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (n < 0) return absl::UnavailableError(absl::StrCat("HTTP GET ", where, ": recv: ", strerror(errno)));
    if (n == 0) break;
    raw.append(buf, static_cast<size_t>(n));
  }
  const size_t header_end = raw.find("\r\n\r\n");
  if (header_end == std::string::npos) return absl::DataLossError(absl::StrCat("HTTP GET ", where, ": no header end"));
  const absl::string_view head(raw.data(), header_end);
  HttpResponse response;
  std::vector<absl::string_view> status_line = absl::StrSplit(head.substr(0, head.find("\r\n")), ' ');
  if (status_line.size() < 2 || !absl::StartsWith(status_line[0], "HTTP/") ||
      !absl::SimpleAtoi(status_line[1], &response.status)) {
    return absl::DataLossError(absl::StrCat("HTTP GET ", where, ": malformed status line"));
  }
  if (absl::StrContains(absl::AsciiStrToLower(head), "transfer-encoding: chunked")) {
    return absl::DataLossError(absl::StrCat("HTTP GET ", where, ": chunked answers are not supported"));
  }
  response.body = raw.substr(header_end + 4);
  return response;
}

absl::StatusOr<std::vector<promtext::MetricSample>> ScrapeMetrics(const std::string& host, int port, absl::Duration timeout) {
  auto response = HttpGet(host, port, "/metrics", timeout);
  if (!response.ok()) return response.status();
  if (response->status != 200) {
    return absl::UnavailableError(absl::StrCat("GET ", host, ":", port, "/metrics answered ", response->status));
  }
  auto samples = promtext::ParsePrometheusText(response->body);
  if (!samples.ok()) {
    return absl::Status(samples.status().code(),
                        absl::StrCat("GET ", host, ":", port, "/metrics: ", samples.status().message()));
  }
  return samples;
}

}  // namespace sluice
