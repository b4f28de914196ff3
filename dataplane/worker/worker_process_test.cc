// The real sluice-worker binary against the in-test fake dispatcher: it registers, serves a
// stream, exposes /metrics, /healthz and /readyz, and on SIGTERM drains, deregisters and exits
// cleanly while a stream is open, also when the dispatcher is gone. The binary enforces its 2 s
// shutdown bound itself (it exits with status 3 when over budget), so a clean exit status proves it;
// the test's own deadlines only guard against hangs.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>

#include <regex>
#include <thread>

#include "absl/strings/str_cat.h"
#include "dataplane/rpc/credentials.h"
#include "dataplane/rpc/shm_ring.h"
#include "dataplane/worker/worker_test_util.h"
#include "testing/test_util.h"

extern char** environ;

namespace sluice::worker {
namespace {

using testing::FakeDispatcher;
using testing::FakeDispatcherServer;
using testing::MakeTask;
using testing::WaitUntil;

// A child process with stdout and stderr going to `log_file`; killed if still running at the end.
class ChildProcess {
 public:
  ChildProcess(const std::vector<std::string>& argv, const std::string& log_file) : log_file_(log_file) {
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 1, log_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_adddup2(&actions, 1, 2);
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    REQUIRE(posix_spawn(&pid_, args[0], &actions, nullptr, args.data(), environ) == 0);
    posix_spawn_file_actions_destroy(&actions);
  }
  ~ChildProcess() {
    if (!exited_) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }
  void Signal(int sig) { REQUIRE(kill(pid_, sig) == 0); }
  // Waits for the exit (hang guard: 20 s); the raw wait status.
  std::optional<int> WaitForExit() {
    int status = 0;
    bool done = WaitUntil([&] {
      pid_t r = waitpid(pid_, &status, WNOHANG);
      return r == pid_;
    });
    if (!done) return std::nullopt;
    exited_ = true;
    return status;
  }
  std::string Log() const { return sluice::testing::ReadFile(log_file_); }

 private:
  pid_t pid_ = 0;
  bool exited_ = false;
  std::string log_file_;
};

std::string WorkerBinary() { return sluice::testing::BinaryDir() + "/bin/sluice-worker"; }

// The ports from the worker's "listening" log line.
std::pair<int, int> ListeningPorts(ChildProcess& child) {
  std::smatch m;
  std::string log;
  static const std::regex kLine(R"(msg="?listening"? port=(\d+) metrics_port=(\d+))");
  REQUIRE(WaitUntil([&] {
    log = child.Log();
    return std::regex_search(log, m, kLine);
  }));
  return {std::stoi(m[1]), std::stoi(m[2])};
}

// Waits for the "listening" line of a worker started with --metrics_port=-1.
void ListeningPortsWithoutAdmin(ChildProcess& child) {
  static const std::regex kLine(R"(msg="?listening"? port=(\d+) metrics_port=-1)");
  REQUIRE(WaitUntil([&] { return std::regex_search(child.Log(), kLine); }));
}

// A minimal HTTP/1.0 GET; returns the whole response (status line, headers, body).
std::string HttpGet(int port, const std::string& path) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0);
  std::string request = absl::StrCat("GET ", path, " HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n");
  REQUIRE(send(fd, request.data(), request.size(), 0) == static_cast<ssize_t>(request.size()));
  std::string out;
  char buf[4096];
  ssize_t n;
  while ((n = recv(fd, buf, sizeof(buf), 0)) > 0) out.append(buf, static_cast<size_t>(n));
  close(fd);
  return out;
}

service::GetElementsRequest Request(int64_t task_id) {
  service::GetElementsRequest r;
  r.set_task_id(task_id);
  r.set_consumer_index(-1);
  r.set_max_elements(4);
  return r;
}

TEST_CASE("worker_process: sluice-worker serves, reports metrics, and exits cleanly on SIGTERM with a stream open") {
  sluice::testing::TempDir dir;
  FakeDispatcher fake;
  FakeDispatcherServer dispatcher(&fake);
  const std::string config = dir.File("worker.yaml");
  sluice::testing::WriteFile(config, absl::StrCat("dispatcher_address: ", dispatcher.address(),
                                                  "\nheartbeat_interval_ms: 1000\nplacement: local\ndataservice: imagenet\n"));
  ChildProcess worker({WorkerBinary(), "--config", config, "--port=0", "--metrics_port=0", "--listen_host=127.0.0.1",
                       "--heartbeat_interval_ms=50"},
                      dir.File("worker.log"));
  auto [port, metrics_port] = ListeningPorts(worker);
  const std::string address = absl::StrCat("127.0.0.1:", port);
  REQUIRE(WaitUntil([&] { return !fake.heartbeats().empty(); }));
  auto first = fake.heartbeats().front();
  CHECK(first.worker_address() == address);
  CHECK(first.placement() == service::PLACEMENT_LOCAL);
  REQUIRE(WaitUntil([&] { return HttpGet(metrics_port, "/readyz").find(" 200 ") != std::string::npos; }));
  CHECK(HttpGet(metrics_port, "/healthz").find(" 200 ") != std::string::npos);

  fake.AssignTask(address, MakeTask(1, "source: {range: {stop: 100000000}}\n"));
  auto channel = rpc::MakeChannel(address, rpc::TlsOptions());
  REQUIRE(channel.ok());
  auto stub = service::Worker::NewStub(*channel);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
  context.set_wait_for_ready(true);
  auto reader = stub->GetElements(&context, Request(1));
  service::GetElementsResponse response;
  REQUIRE(reader->Read(&response));
  CHECK(testing::DecodeInt(response.elements(0)) == 0);

  const std::string metrics = HttpGet(metrics_port, "/metrics");
  for (const char* name : {"sluice_worker_elements_produced_total", "sluice_worker_bytes_produced_total",
                           "sluice_worker_busy_seconds_total", "sluice_worker_buffered_elements",
                           "sluice_worker_active_tasks", "sluice_worker_pipeline_runs_total"}) {
    CHECK_THAT(metrics, Catch::Contains(name));
  }
  CHECK_THAT(metrics, Catch::Contains(absl::StrCat("worker=\"", address, "\"")));
  CHECK_THAT(metrics, Catch::Contains("placement=\"local\""));
  CHECK_THAT(metrics, Catch::Contains("dataservice=\"imagenet\""));

  worker.Signal(SIGTERM);
  int64_t received = 1;
  while (reader->Read(&response)) {
    CHECK_FALSE(response.end_of_sequence());
    received += response.elements_size();
  }
  CHECK(reader->Finish().error_code() == grpc::StatusCode::UNAVAILABLE);
  auto status = worker.WaitForExit();
  REQUIRE(status.has_value());
  INFO(worker.Log());
  REQUIRE(WIFEXITED(*status));
  CHECK(WEXITSTATUS(*status) == 0);  // 3 would mean the shutdown overran its budget
  CHECK(fake.deregistered() == std::vector<std::string>{address});
  CHECK(fake.heartbeats_at_deregistration() == static_cast<int64_t>(fake.heartbeats().size()));
  CHECK(fake.heartbeats().back().draining());
  CHECK_THAT(worker.Log(), Catch::Contains("worker stopped"));
  CHECK(received >= 1);
}

TEST_CASE("worker_process: SIGTERM with the dispatcher gone still exits cleanly") {
  sluice::testing::TempDir dir;
  FakeDispatcher fake;
  auto dispatcher = std::make_unique<FakeDispatcherServer>(&fake);
  ChildProcess worker({WorkerBinary(), "--dispatcher_address", dispatcher->address(), "--port=0", "--metrics_port=-1",
                       "--listen_host=127.0.0.1", "--heartbeat_interval_ms=50"},
                      dir.File("worker.log"));
  ListeningPortsWithoutAdmin(worker);
  REQUIRE(WaitUntil([&] { return !fake.heartbeats().empty(); }));
  dispatcher->Shutdown();
  const size_t seen = fake.heartbeats().size();
  worker.Signal(SIGTERM);
  auto status = worker.WaitForExit();
  REQUIRE(status.has_value());
  INFO(worker.Log());
  REQUIRE(WIFEXITED(*status));
  CHECK(WEXITSTATUS(*status) == 0);
  CHECK(fake.heartbeats().size() == seen);
  CHECK_THAT(worker.Log(), Catch::Contains("deregistration failed"));
}

TEST_CASE("worker_process: not ready before it has registered, and still exits cleanly") {
  sluice::testing::TempDir dir;
  // A port nobody listens on: bind one, then close it.
  int probe = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(bind(probe, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0);
  socklen_t len = sizeof(addr);
  REQUIRE(getsockname(probe, reinterpret_cast<sockaddr*>(&addr), &len) == 0);
  const int dead_port = ntohs(addr.sin_port);
  close(probe);
  ChildProcess worker({WorkerBinary(), absl::StrCat("--dispatcher_address=127.0.0.1:", dead_port), "--port=0",
                       "--metrics_port=0", "--listen_host=127.0.0.1", "--heartbeat_interval_ms=50"},
                      dir.File("worker.log"));
  auto [port, metrics_port] = ListeningPorts(worker);
  (void)port;
  CHECK(HttpGet(metrics_port, "/healthz").find(" 200 ") != std::string::npos);
  const std::string ready = HttpGet(metrics_port, "/readyz");
  CHECK(ready.find(" 503 ") != std::string::npos);
  CHECK_THAT(ready, Catch::Contains("not registered"));
  worker.Signal(SIGTERM);
  auto status = worker.WaitForExit();
  REQUIRE(status.has_value());
  INFO(worker.Log());
  REQUIRE(WIFEXITED(*status));
  CHECK(WEXITSTATUS(*status) == 0);
}

TEST_CASE("worker_process: bad flags exit with status 2 and a message naming the flag") {
  sluice::testing::TempDir dir;
  ChildProcess worker({WorkerBinary(), "--dispatcher_address=d:1", "--placement=orbit"}, dir.File("worker.log"));
  auto status = worker.WaitForExit();
  REQUIRE(status.has_value());
  REQUIRE(WIFEXITED(*status));
  CHECK(WEXITSTATUS(*status) == 2);
  CHECK_THAT(worker.Log(), Catch::Contains("--placement"));
}

}  // namespace
}  // namespace sluice::worker

namespace sluice::worker {
namespace {

TEST_CASE("worker_process: an unwritable --shm_dir turns shared memory off with one log line, streams use bytes") {
  sluice::testing::TempDir dir;
  sluice::testing::WriteFile(dir.File("a-file"), "not a directory");
  FakeDispatcher fake;
  FakeDispatcherServer dispatcher(&fake);
  ChildProcess worker({WorkerBinary(), "--dispatcher_address", dispatcher.address(), "--port=0", "--metrics_port=0",
                       "--listen_host=127.0.0.1", "--heartbeat_interval_ms=50", "--shm_dir=" + dir.File("a-file")},
                      dir.File("worker.log"));
  const int port = ListeningPorts(worker).first;
  const std::string address = absl::StrCat("127.0.0.1:", port);
  REQUIRE(WaitUntil([&] { return !fake.heartbeats().empty(); }));
  fake.AssignTask(address, MakeTask(1, "source: {range: {stop: 20}}\nsteps:\n  - map: {ops: [{reshape: {field: value, "
                                       "shape: [1]}}, {pad: {field: value, length: 8192}}]}\n"));
  auto channel = rpc::MakeChannel(address, rpc::TlsOptions());
  REQUIRE(channel.ok());
  auto stub = service::Worker::NewStub(*channel);
  {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
    context.set_wait_for_ready(true);
    service::GetElementsRequest request;
    request.set_task_id(1);
    request.set_consumer_index(-1);
    request.set_compression(service::COMPRESSION_NONE);
    request.set_shm_boot_id(rpc::ShmBootId());
    auto reader = stub->GetElements(&context, request);
    service::GetElementsResponse response;
    int64_t elements = 0;
    while (reader->Read(&response)) {
      CHECK(!response.has_shm_ring());
      for (const auto& e : response.elements()) {
        CHECK(e.shm_size() == 0);
        CHECK(e.data().size() > 8192 * 8);  // 64 KiB payloads, as bytes
        ++elements;
      }
    }
    CHECK(reader->Finish().ok());
    CHECK(elements == 20);
  }
  worker.Signal(SIGTERM);
  REQUIRE(worker.WaitForExit().has_value());
  const std::string log = worker.Log();
  INFO(log);
  size_t lines = 0;
  for (size_t at = log.find("shared memory off"); at != std::string::npos; at = log.find("shared memory off", at + 1)) {
    ++lines;
  }
  CHECK(lines == 1);
  CHECK_THAT(log, Catch::Contains(dir.File("a-file")));
}

}  // namespace
}  // namespace sluice::worker
