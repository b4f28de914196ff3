// The real sluice-dispatcher binary: start it on a journal directory, take splits over raw gRPC,
// kill -9 it, restart it, and check that the job and its split positions resumed and that no
// started split is handed out again. Also: admin endpoints, SIGTERM, bad flags, corrupt journals.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>

#include <chrono>
#include <filesystem>
#include <mutex>
#include <set>
#include <thread>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "dataplane/dispatcher/dispatcher_test_util.h"
#include "dataplane/rpc/credentials.h"
#include "dataservice.grpc.pb.h"
#include "testing/test_util.h"

namespace sluice::dispatcher {
namespace {

namespace fs = std::filesystem;
using sluice::testing::TempDir;
using testing::RangePipeline;

std::string Binary() { return sluice::testing::BinaryDir() + "/bin/sluice-dispatcher"; }

// Runs the binary with its stderr captured; kills it (SIGKILL) on destruction if still running.
class DispatcherProcess {
 public:
  explicit DispatcherProcess(std::vector<std::string> args) {
    int pipe_fds[2];
    REQUIRE(pipe2(pipe_fds, O_CLOEXEC) == 0);
    std::vector<std::string> argv_storage = {Binary()};
    argv_storage.insert(argv_storage.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (auto& a : argv_storage) argv.push_back(a.data());
    argv.push_back(nullptr);
    pid_ = fork();
    REQUIRE(pid_ >= 0);
    if (pid_ == 0) {
      dup2(pipe_fds[1], STDERR_FILENO);
      execv(argv[0], argv.data());
      _exit(127);
    }
    close(pipe_fds[1]);
    reader_ = std::thread([this, fd = pipe_fds[0]] {
      char buf[4096];
      std::string partial;
      while (true) {
        ssize_t n = read(fd, buf, sizeof(buf));
        if (n <= 0) break;
        partial.append(buf, static_cast<size_t>(n));
        size_t nl;
        while ((nl = partial.find('\n')) != std::string::npos) {
          absl::MutexLock lock(&mu_);
          lines_.push_back(partial.substr(0, nl));
          partial.erase(0, nl + 1);
        }
      }
      close(fd);
      absl::MutexLock lock(&mu_);
      if (!partial.empty()) lines_.push_back(partial);
      eof_ = true;
    });
  }
  ~DispatcherProcess() {
    if (pid_ > 0 && !exited_) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    reader_.join();
  }

  // Waits for a stderr line containing `text`; returns it ("" at the deadline or EOF).
  std::string WaitForLine(const std::string& text, absl::Duration timeout = absl::Seconds(20)) {
    absl::MutexLock lock(&mu_);
    auto found = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      for (const auto& l : lines_) {
        if (l.find(text) != std::string::npos) return true;
      }
      return eof_;
    };
    mu_.AwaitWithTimeout(absl::Condition(&found), timeout);
    for (const auto& l : lines_) {
      if (l.find(text) != std::string::npos) return l;
    }
    return "";
  }
  std::string Output() {
    absl::MutexLock lock(&mu_);
    std::string out;
    for (const auto& l : lines_) absl::StrAppend(&out, l, "\n");
    return out;
  }
  // The number after " key=" in the "listening" line.
  int ListeningPort(const std::string& key) {
    const std::string line = WaitForLine("msg=listening");
    INFO(Output());
    REQUIRE(!line.empty());
    const std::string marker = " " + key + "=";
    auto at = line.find(marker);
    REQUIRE(at != std::string::npos);
    auto end = line.find(' ', at + marker.size());
    int port = 0;
    REQUIRE(absl::SimpleAtoi(line.substr(at + marker.size(), end - at - marker.size()), &port));
    return port;
  }
  void Signal(int sig) { kill(pid_, sig); }
  pid_t pid() const { return pid_; }
  // Waits for the process to exit; returns its wait status, or -1 at the deadline.
  int Wait(absl::Duration timeout = absl::Seconds(20)) {
    const absl::Time deadline = absl::Now() + timeout;
    while (absl::Now() < deadline) {
      int status = 0;
      pid_t r = waitpid(pid_, &status, WNOHANG);
      if (r == pid_) {
        exited_ = true;
        return status;
      }
      // Wait for output or EOF instead of sleeping; the pipe closes when the process exits.
      absl::MutexLock lock(&mu_);
      const size_t seen = lines_.size();
      auto changed = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return eof_ || lines_.size() != seen; };
      mu_.AwaitWithTimeout(absl::Condition(&changed), absl::Milliseconds(50));
    }
    return -1;
  }

 private:
  pid_t pid_ = -1;
  bool exited_ = false;
  std::thread reader_;
  absl::Mutex mu_;
  std::vector<std::string> lines_ ABSL_GUARDED_BY(mu_);
  bool eof_ ABSL_GUARDED_BY(mu_) = false;
};

std::vector<std::string> Flags(const std::string& journal_dir) {
  return {"--port=0", "--metrics_port=0", "--listen_host=127.0.0.1", "--journal_dir=" + journal_dir, "--fsync=always",
          "--worker_timeout_ms=60000", "--heartbeat_interval_ms=200", "--log_level=info"};
}

std::unique_ptr<service::Dispatcher::Stub> Connect(int port) {
  auto channel = rpc::MakeChannel(absl::StrCat("127.0.0.1:", port), rpc::TlsOptions{});
  REQUIRE(channel.ok());
  return service::Dispatcher::NewStub(*channel);
}

std::unique_ptr<grpc::ClientContext> Ctx() {
  auto ctx = std::make_unique<grpc::ClientContext>();
  ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  ctx->set_wait_for_ready(true);
  return ctx;
}

// GET http://127.0.0.1:port/path; returns "<status code> <body>".
std::string HttpGet(int port, const std::string& path) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0);
  const std::string request = absl::StrCat("GET ", path, " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n");
  REQUIRE(write(fd, request.data(), request.size()) == static_cast<ssize_t>(request.size()));
  std::string response;
  char buf[4096];
  ssize_t n;
  while ((n = read(fd, buf, sizeof(buf))) > 0) response.append(buf, static_cast<size_t>(n));
  close(fd);
  const auto space = response.find(' ');
  const auto body = response.find("\r\n\r\n");
  if (space == std::string::npos || body == std::string::npos) return response;
  return response.substr(space + 1, 3) + " " + response.substr(body + 4);
}

std::vector<uint64_t> TakeSplits(service::Dispatcher::Stub& stub, int64_t task, int max,
                                 const std::vector<uint64_t>& started, const std::string& worker) {
  service::GetSplitsRequest req;
  req.set_task_id(task);
  req.set_worker_address(worker);
  req.set_max_splits(max);
  for (auto i : started) req.add_started_split_indices(i);
  service::GetSplitsResponse resp;
  grpc::Status s = stub.GetSplits(Ctx().get(), req, &resp);
  INFO(s.error_message());
  REQUIRE(s.ok());
  std::vector<uint64_t> out;
  for (const auto& split : resp.splits()) out.push_back(split.index());
  return out;
}

int64_t RegisterWorker(service::Dispatcher::Stub& stub, const std::string& address, std::vector<int64_t> listed = {}) {
  service::WorkerHeartbeatRequest hb;
  hb.set_worker_address(address);
  for (int64_t t : listed) hb.add_tasks()->set_task_id(t);
  service::WorkerHeartbeatResponse resp;
  REQUIRE(stub.WorkerHeartbeat(Ctx().get(), hb, &resp).ok());
  return resp.new_tasks_size() > 0 ? resp.new_tasks(0).task_id() : 0;
}

TEST_CASE("kill -9 and restart: the job and its split positions resume, no started split is handed out again") {
  TempDir dir;
  const std::string journal = dir.File("journal");
  int64_t job_id = 0;
  int64_t task = 0;
  std::multiset<uint64_t> handed;
  const std::set<uint64_t> started = {0, 1, 2, 3};
  {
    DispatcherProcess first(Flags(journal));
    const int port = first.ListeningPort("port");
    const int metrics_port = first.ListeningPort("metrics_port");
    auto stub = Connect(port);
    service::RegisterDatasetRequest reg;
    *reg.mutable_pipeline() = RangePipeline(100, 10);
    service::RegisterDatasetResponse reg_resp;
    REQUIRE(stub->RegisterDataset(Ctx().get(), reg, &reg_resp).ok());
    REQUIRE(reg_resp.num_splits() == 10);
    RegisterWorker(*stub, "127.0.0.1:7001");
    service::GetOrCreateJobRequest job;
    job.mutable_spec()->set_dataset_id(reg_resp.dataset_id());
    job.mutable_spec()->set_job_name("train");
    job.mutable_spec()->set_sharding(service::SHARDING_DYNAMIC);
    service::GetOrCreateJobResponse job_resp;
    REQUIRE(stub->GetOrCreateJob(Ctx().get(), job, &job_resp).ok());
    job_id = job_resp.job_id();
    task = RegisterWorker(*stub, "127.0.0.1:7001");
    REQUIRE(task > 0);
    for (auto i : TakeSplits(*stub, task, 3, {}, "127.0.0.1:7001")) handed.insert(i);
    for (auto i : TakeSplits(*stub, task, 2, {0, 1}, "127.0.0.1:7001")) handed.insert(i);
    CHECK(handed == std::multiset<uint64_t>{0, 1, 2, 3, 4});

    CHECK(HttpGet(metrics_port, "/readyz").rfind("200", 0) == 0);
    CHECK(HttpGet(metrics_port, "/healthz").rfind("200", 0) == 0);
    const std::string metrics = HttpGet(metrics_port, "/metrics");
    CHECK(metrics.find("sluice_dispatcher_splits_served_total{dataservice=\"\",job=\"train\"} 5") != std::string::npos);
    first.Signal(SIGKILL);
    CHECK(first.Wait() != -1);
  }
  DispatcherProcess second(Flags(journal));
  const int port = second.ListeningPort("port");
  CHECK(!second.WaitForLine("journal replayed").empty());
  auto stub = Connect(port);
  service::GetStateResponse state;
  REQUIRE(stub->GetState(Ctx().get(), {}, &state).ok());
  REQUIRE(state.jobs_size() == 1);
  CHECK(state.jobs(0).job_id() == job_id);
  CHECK(state.jobs(0).spec().job_name() == "train");
  CHECK(state.jobs(0).splits_served() == 5);
  REQUIRE(state.workers_size() == 1);
  CHECK(state.workers(0).address() == "127.0.0.1:7001");
  // The same worker (it kept running) continues where it was: 2 and 3 started now.
  for (auto i : TakeSplits(*stub, task, 2, {2, 3}, "127.0.0.1:7001")) handed.insert(i);
  CHECK(handed == std::multiset<uint64_t>{0, 1, 2, 3, 4, 5, 6});
  // It leaves; its unstarted splits (4, 5, 6) go to the next worker first. Started ones never return.
  service::WorkerDeregisterRequest dereg;
  dereg.set_worker_address("127.0.0.1:7001");
  service::WorkerDeregisterResponse dereg_resp;
  REQUIRE(stub->WorkerDeregister(Ctx().get(), dereg, &dereg_resp).ok());
  const int64_t task2 = RegisterWorker(*stub, "127.0.0.1:7002");
  REQUIRE(task2 > 0);
  const std::vector<uint64_t> rest = TakeSplits(*stub, task2, 100, {}, "127.0.0.1:7002");
  CHECK(rest == std::vector<uint64_t>{4, 5, 6, 7, 8, 9});
  for (auto i : rest) CHECK(started.count(i) == 0);
  // The same job, shared by name, after the restart.
  service::GetOrCreateJobRequest job;
  job.mutable_spec()->set_dataset_id(state.jobs(0).spec().dataset_id());
  job.mutable_spec()->set_job_name("train");
  job.mutable_spec()->set_sharding(service::SHARDING_DYNAMIC);
  service::GetOrCreateJobResponse job_resp;
  REQUIRE(stub->GetOrCreateJob(Ctx().get(), job, &job_resp).ok());
  CHECK(job_resp.job_id() == job_id);

  // SIGTERM: a clean, prompt exit.
  second.Signal(SIGTERM);
  const int status = second.Wait();
  INFO(second.Output());
  REQUIRE(status != -1);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  CHECK(!second.WaitForLine("msg=stopped").empty());
}

TEST_CASE("bad flags exit with status 2 and say why") {
  DispatcherProcess p({"--fsync=sometimes"});
  const int status = p.Wait();
  REQUIRE(status != -1);
  CHECK(WEXITSTATUS(status) == 2);
  CHECK(!p.WaitForLine("--fsync: 'sometimes' is not one of always, batch, never").empty());
}

TEST_CASE("a corrupt journal stops the start with the file and offset") {
  TempDir dir;
  const std::string journal = dir.File("journal");
  {
    DispatcherProcess p(Flags(journal));
    auto stub = Connect(p.ListeningPort("port"));
    for (int i = 0; i < 3; ++i) RegisterWorker(*stub, absl::StrCat("127.0.0.1:", 7100 + i));
    p.Signal(SIGTERM);
    REQUIRE(p.Wait() != -1);
  }
  std::string segment;
  for (const auto& e : fs::directory_iterator(journal)) segment = e.path().string();
  std::string data = sluice::testing::ReadFile(segment);
  data[22] ^= 0x01;  // inside the first record's data
  sluice::testing::WriteFile(segment, data);
  DispatcherProcess p(Flags(journal));
  const int status = p.Wait();
  REQUIRE(status != -1);
  CHECK(WEXITSTATUS(status) == 1);
  INFO(p.Output());
  CHECK(!p.WaitForLine("cannot open the journal").empty());
  CHECK(p.Output().find("offset 8: record data checksum mismatch") != std::string::npos);
}

// The resident set of process `pid` in KiB (VmRSS of /proc/<pid>/status).
int64_t ResidentKiB(pid_t pid) {
  const std::string status = sluice::testing::ReadFile(absl::StrCat("/proc/", pid, "/status"));
  const auto at = status.find("VmRSS:");
  REQUIRE(at != std::string::npos);
  const auto end = status.find("kB", at);
  int64_t kib = 0;
  REQUIRE(absl::SimpleAtoi(absl::StripAsciiWhitespace(status.substr(at + 6, end - at - 6)), &kib));
  return kib;
}

TEST_CASE("a one-line spec with 2^30 splits is refused before any is listed - the client reads why") {
  TempDir dir;
  std::vector<std::string> flags = Flags(dir.File("journal"));
  flags.push_back("--max_dataset_splits=1000");
  DispatcherProcess p(flags);
  auto stub = Connect(p.ListeningPort("port"));
  // Warm up (the first registration loads what the pipeline code needs), then measure.
  service::RegisterDatasetRequest small;
  *small.mutable_pipeline() = RangePipeline(1000 * 10, 10);  // exactly at the limit: accepted
  service::RegisterDatasetResponse small_resp;
  REQUIRE(stub->RegisterDataset(Ctx().get(), small, &small_resp).ok());
  CHECK(small_resp.num_splits() == 1000);
  const int64_t before = ResidentKiB(p.pid());

  service::RegisterDatasetRequest huge;
  *huge.mutable_pipeline() = RangePipeline(int64_t{1} << 40, 1024);  // 2^30 splits: ~240 GiB if listed
  service::RegisterDatasetResponse resp;
  grpc::Status s = stub->RegisterDataset(Ctx().get(), huge, &resp);  // Ctx(): a 10 s deadline
  INFO(s.error_message());
  CHECK(s.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
  CHECK(s.error_message().find("source range") != std::string::npos);
  CHECK(s.error_message().find("1073741824 splits") != std::string::npos);
  CHECK(s.error_message().find("limit of 1000") != std::string::npos);
  CHECK(s.error_message().find("split_size") != std::string::npos);
  CHECK(s.error_message().find("--max_dataset_splits") != std::string::npos);
  // One above the limit is refused too.
  service::RegisterDatasetRequest over;
  *over.mutable_pipeline() = RangePipeline(1000 * 10 + 1, 10);
  CHECK(stub->RegisterDataset(Ctx().get(), over, &resp).error_code() == grpc::StatusCode::INVALID_ARGUMENT);
  // Nothing was built: listing 2^30 splits would take hundreds of GiB; 64 MiB is far above noise.
  const int64_t after = ResidentKiB(p.pid());
  INFO("resident before " << before << " KiB, after " << after << " KiB");
  CHECK(after - before < 64 * 1024);
  // The dispatcher still serves.
  REQUIRE(stub->RegisterDataset(Ctx().get(), small, &small_resp).ok());
}

TEST_CASE("a max_dataset_splits of 0 or below is a bad flag: exit status 2") {
  for (const char* flag : {"--max_dataset_splits=0", "--max_dataset_splits=-5"}) {
    DispatcherProcess p({flag});
    const int status = p.Wait();
    REQUIRE(status != -1);
    CHECK(WEXITSTATUS(status) == 2);
    CHECK(!p.WaitForLine("--max_dataset_splits: must be > 0").empty());
  }
}

}  // namespace
}  // namespace sluice::dispatcher
