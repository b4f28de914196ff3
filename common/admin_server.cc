#include "common/admin_server.h"

#include <CivetServer.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "prometheus/text_serializer.h"

namespace sluice {

absl::StatusOr<std::pair<std::string, int>> SplitHostPort(const std::string& address) {
  auto colon = address.rfind(':');
  int port = 0;
  if (colon == std::string::npos || !absl::SimpleAtoi(address.substr(colon + 1), &port) || port < 0 || port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("'", address, "' is not host:port (e.g. 127.0.0.1:9090)"));
  }
  return std::make_pair(address.substr(0, colon), port);
}

class AdminServer::Impl {
 public:
  class Handler : public CivetHandler {
   public:
    Handler(AdminServer* owner, std::string path) : owner_(owner), path_(std::move(path)) {}
    bool handleGet(CivetServer*, struct mg_connection* conn) override {
      int code = 200;
      std::string body;
      std::string type = "text/plain; charset=utf-8";
      if (path_ == "/metrics") {
        prometheus::TextSerializer serializer;
        body = serializer.Serialize(owner_->impl_->registry->Collect());
        type = "text/plain; version=0.0.4; charset=utf-8";
      } else if (path_ == "/healthz") {
        body = "ok\n";
      } else {
        absl::Status s = owner_->Readiness();
        code = s.ok() ? 200 : 503;
        body = s.ok() ? "ready\n" : absl::StrCat("not ready: ", s.message(), "\n");
      }
      mg_printf(conn, "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\nConnection: close\r\n\r\n", code,
                code == 200 ? "OK" : "Service Unavailable", type.c_str(), body.size());
      mg_write(conn, body.data(), body.size());
      return true;
    }

   private:
    AdminServer* owner_;
    std::string path_;
  };

  std::shared_ptr<prometheus::Registry> registry;
  std::string host;
  std::unique_ptr<CivetServer> server;
  std::vector<std::unique_ptr<Handler>> handlers;
  absl::Mutex mu;
  ReadinessCheck check ABSL_GUARDED_BY(mu);
};

absl::StatusOr<std::unique_ptr<AdminServer>> AdminServer::Start(const std::string& address,
                                                                std::shared_ptr<prometheus::Registry> registry) {
  auto hp = SplitHostPort(address);
  if (!hp.ok()) return hp.status();
  std::unique_ptr<AdminServer> s(new AdminServer());
  s->impl_ = std::make_unique<Impl>();
  s->impl_->registry = std::move(registry);
  s->impl_->host = hp->first;
  std::vector<std::string> options = {"listening_ports", absl::StrCat(hp->first, ":", hp->second), "num_threads", "2"};
  try {
    s->impl_->server = std::make_unique<CivetServer>(options);
  } catch (const std::exception& e) {
    return absl::UnavailableError(absl::StrCat("cannot serve /metrics on ", address, ": ", e.what(),
                                               " (is the port in use?)"));
  }
  for (const char* path : {"/metrics", "/healthz", "/readyz"}) {
    s->impl_->handlers.push_back(std::make_unique<Impl::Handler>(s.get(), path));
    s->impl_->server->addHandler(path, s->impl_->handlers.back().get());
  }
  std::vector<int> ports = s->impl_->server->getListeningPorts();
  s->port_ = ports.empty() ? hp->second : ports[0];
  return s;
}

namespace {

// Opens and closes a connection to wake civetweb's listener thread.
void Poke(const std::string& host, int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  if (::inet_pton(AF_INET, host.empty() || host == "0.0.0.0" ? "127.0.0.1" : host.c_str(), &addr.sin_addr) != 1) {
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  }
  (void)::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  ::close(fd);
}

}  // namespace

AdminServer::~AdminServer() {
  if (!impl_ || !impl_->server) return;
  // civetweb's stop waits for its listener's poll period (up to 2 s); a connection wakes it at
  // once, so a daemon's shutdown is not held up by its admin endpoint.
  absl::Notification stopped;
  std::thread closer([this, &stopped] {
    impl_->server->close();
    stopped.Notify();
  });
  while (!stopped.WaitForNotificationWithTimeout(absl::Milliseconds(20))) Poke(impl_->host, port_);
  closer.join();
}

void AdminServer::SetReadinessCheck(ReadinessCheck check) {
  absl::MutexLock lock(&impl_->mu);
  impl_->check = std::move(check);
}

absl::Status AdminServer::Readiness() {
  if (!ready_) return absl::UnavailableError("starting");
  ReadinessCheck check;
  {
    absl::MutexLock lock(&impl_->mu);
    check = impl_->check;
  }
  return check ? check() : absl::OkStatus();
}

}  // namespace sluice
