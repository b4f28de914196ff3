// Draining through the dispatcher's RPC interface: the pure verdict (EvaluateDrain), the gRPC client
// against an in-test fake Dispatcher service (what it sends, errors, deadlines), and — when the
// build has it — against the real sluice-dispatcher binary with workers registered over RPC.
#include "operator/dispatcher_drainer.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <grpcpp/grpcpp.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <memory>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "dataservice.grpc.pb.h"
#include "testing/test_util.h"

namespace sluice::op {
namespace {

service::WorkerInfo Worker(const std::string& address, bool draining, int tasks) {
  service::WorkerInfo w;
  w.set_address(address);
  w.set_draining(draining);
  for (int i = 0; i < tasks; ++i) w.add_task_ids(i + 1);
  return w;
}

TEST_CASE("EvaluateDrain: complete only when every worker drains with no task left") {
  service::GetStateResponse state;
  DrainProgress none = EvaluateDrain(state);
  CHECK(none.complete);
  CHECK(none.message == "the dispatcher has no workers left");

  *state.add_workers() = Worker("10.0.0.2:5051", true, 0);
  *state.add_workers() = Worker("10.0.0.3:5051", false, 0);
  *state.add_workers() = Worker("10.0.0.4:5051", true, 2);
  DrainProgress waiting = EvaluateDrain(state);
  CHECK(!waiting.complete);
  CHECK(waiting.message ==
        "waiting for 2 of 3 workers and 0 jobs: worker 10.0.0.3:5051 (not draining yet), worker 10.0.0.4:5051 (2 tasks)");

  state.mutable_workers(1)->set_draining(true);
  state.mutable_workers(2)->clear_task_ids();
  // Tasks done, but a client still reads what the workers buffered.
  service::JobInfo* job = state.add_jobs();
  job->set_job_id(4);
  job->mutable_spec()->set_job_name("train");
  job->set_finished(true);
  job->set_num_clients(2);
  DrainProgress reading = EvaluateDrain(state);
  CHECK(!reading.complete);
  CHECK(reading.message == "waiting for 0 of 3 workers and 1 jobs: job 4 'train' (2 clients reading)");

  job->set_num_clients(0);
  DrainProgress done = EvaluateDrain(state);
  CHECK(done.complete);
  CHECK(done.message == "the dispatcher reports 3 workers drained, no tasks and no clients left");

  service::GetStateResponse many;
  for (int i = 0; i < 8; ++i) *many.add_workers() = Worker(absl::StrCat("w", i, ":1"), true, 1);
  DrainProgress crowded = EvaluateDrain(many);
  CHECK(!crowded.complete);
  CHECK(absl::StrContains(crowded.message, "waiting for 8 of 8 workers and 0 jobs: worker w0:1 (1 task), "));
  CHECK(absl::EndsWith(crowded.message, "worker w4:1 (1 task) and 3 more"));
}

// A Dispatcher service with just DrainWorkers and GetState: workers drain when asked and lose
// their tasks when the test says their jobs finished.
class FakeDispatcher final : public service::Dispatcher::Service {
 public:
  void AddWorker(const std::string& address, int tasks) {
    absl::MutexLock lock(&mu_);
    *state_.add_workers() = Worker(address, false, tasks);
  }
  // The dispatcher's verdict for a draining worker: clients received everything, no split held.
  void ReportDrained(const std::string& address) {
    absl::MutexLock lock(&mu_);
    for (auto& w : *state_.mutable_workers()) {
      if (w.address() == address && w.draining()) w.set_drained(true);
    }
  }
  void SetBlocker(const std::string& address, const std::string& blocker) {
    absl::MutexLock lock(&mu_);
    for (auto& w : *state_.mutable_workers()) {
      if (w.address() == address) w.set_drain_blocker(blocker);
    }
  }
  void FinishJobs() {
    absl::MutexLock lock(&mu_);
    for (auto& w : *state_.mutable_workers()) w.clear_task_ids();
  }
  void FailGetState(grpc::StatusCode code) {
    absl::MutexLock lock(&mu_);
    get_state_error_ = code;
  }
  std::vector<service::DrainWorkersRequest> drain_requests() {
    absl::MutexLock lock(&mu_);
    return drain_requests_;
  }

  grpc::Status DrainWorkers(grpc::ServerContext*, const service::DrainWorkersRequest* request,
                            service::DrainWorkersResponse* response) override {
    absl::MutexLock lock(&mu_);
    drain_requests_.push_back(*request);
    std::set<std::string> named(request->worker_addresses().begin(), request->worker_addresses().end());
    for (auto& w : *state_.mutable_workers()) {
      if (!request->all_workers() && !named.count(w.address())) continue;
      w.set_draining(true);
      response->add_drained(w.address());
    }
    return grpc::Status::OK;
  }
  grpc::Status GetState(grpc::ServerContext*, const service::GetStateRequest*,
                        service::GetStateResponse* response) override {
    absl::MutexLock lock(&mu_);
    if (get_state_error_ != grpc::StatusCode::OK) return grpc::Status(get_state_error_, "injected");
    *response = state_;
    return grpc::Status::OK;
  }

 private:
  absl::Mutex mu_;
  service::GetStateResponse state_ ABSL_GUARDED_BY(mu_);
  std::vector<service::DrainWorkersRequest> drain_requests_ ABSL_GUARDED_BY(mu_);
  grpc::StatusCode get_state_error_ ABSL_GUARDED_BY(mu_) = grpc::StatusCode::OK;
};

class FakeDispatcherServer {
 public:
  FakeDispatcherServer() {
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
    builder.RegisterService(&service_);
    server_ = builder.BuildAndStart();
    REQUIRE(server_ != nullptr);
    REQUIRE(port_ > 0);
  }
  ~FakeDispatcherServer() { server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2)); }
  std::string address() const { return absl::StrCat("127.0.0.1:", port_); }
  FakeDispatcher& service() { return service_; }

 private:
  FakeDispatcher service_;
  int port_ = 0;
  std::unique_ptr<grpc::Server> server_;
};

TEST_CASE("GrpcWorkerDrainer drains every worker of the dispatcher and reports their progress") {
  FakeDispatcherServer server;
  server.service().AddWorker("10.0.0.2:5051", 1);
  server.service().AddWorker("10.0.0.3:5051", 0);
  GrpcWorkerDrainer drainer(GrpcWorkerDrainerOptions{});
  DrainWorkers drain;
  drain.dispatcher_address = "ds-dispatcher.ml.svc:5050";  // not resolvable here: the pod endpoint is dialled
  drain.dispatcher_endpoint = server.address();
  drain.workers = {"ds-worker-remote-0", "ds-worker-remote-1"};

  absl::StatusOr<DrainProgress> first = drainer.Drain(drain);
  REQUIRE(first.ok());
  CHECK(!first->complete);
  CHECK(first->message == "waiting for 1 of 2 workers and 0 jobs: worker 10.0.0.2:5051 (1 task)");
  REQUIRE(server.service().drain_requests().size() == 1);
  CHECK(server.service().drain_requests()[0].worker_addresses_size() == 0);
  CHECK(server.service().drain_requests()[0].all_workers());  // all of them, said explicitly

  server.service().FinishJobs();
  absl::StatusOr<DrainProgress> second = drainer.Drain(drain);
  REQUIRE(second.ok());
  CHECK(second->complete);
  CHECK(server.service().drain_requests().size() == 2);  // each round asks again (restarted workers)

  SECTION("without a pod endpoint the Service address is dialled") {
    DrainWorkers by_service;
    by_service.dispatcher_address = server.address();
    absl::StatusOr<DrainProgress> r = drainer.Drain(by_service);
    REQUIRE(r.ok());
    CHECK(r->complete);
  }
  SECTION("a failing GetState is an error naming the call and the dispatcher") {
    server.service().FailGetState(grpc::StatusCode::UNAVAILABLE);
    absl::StatusOr<DrainProgress> r = drainer.Drain(drain);
    REQUIRE(!r.ok());
    CHECK(r.status().code() == absl::StatusCode::kUnavailable);
    CHECK(absl::StrContains(r.status().message(), absl::StrCat("GetState at dispatcher ", server.address())));
  }
}

TEST_CASE("EvaluateWorkersDrain: the dispatcher's verdict per worker a scale-down drains") {
  service::GetStateResponse state;
  *state.add_workers() = Worker("10.0.0.2:5051", true, 1);  // draining, verdict pending
  state.mutable_workers(0)->set_drain_blocker("12 elements produced and not yet received by clients");
  *state.add_workers() = Worker("10.0.0.3:5051", true, 1);  // draining and drained
  state.mutable_workers(1)->set_drained(true);
  *state.add_workers() = Worker("10.0.0.4:5051", false, 1);  // not draining yet
  *state.add_workers() = Worker("10.0.0.5:5051", true, 0);  // draining, no task left

  DrainProgress p = EvaluateWorkersDrain(state, {"10.0.0.2:5051", "10.0.0.3:5051", "10.0.0.4:5051", "10.0.0.5:5051",
                                                 "10.0.0.9:5051"});
  CHECK(!p.complete);
  REQUIRE(p.workers.size() == 5);
  CHECK(!p.workers.at("10.0.0.2:5051").drained);
  CHECK(p.workers.at("10.0.0.2:5051").message ==
        "draining, 1 task: 12 elements produced and not yet received by clients");
  CHECK(p.workers.at("10.0.0.3:5051").drained);
  CHECK(!p.workers.at("10.0.0.4:5051").drained);
  CHECK(p.workers.at("10.0.0.5:5051").drained);
  CHECK(p.workers.at("10.0.0.9:5051").drained);  // no longer registered: nothing left to drain
  CHECK(p.workers.at("10.0.0.9:5051").message == "no longer registered with the dispatcher");
  CHECK(absl::StartsWith(p.message, "waiting for 2 of 5 workers: 10.0.0.2:5051 (draining, 1 task: 12 elements"));

  DrainProgress done = EvaluateWorkersDrain(state, {"10.0.0.3:5051", "10.0.0.5:5051"});
  CHECK(done.complete);
  CHECK(done.message ==
        "the dispatcher reports 2 workers drained: 10.0.0.3:5051 (draining, 1 task drained: clients received all it "
        "produced and it holds no split), 10.0.0.5:5051 (draining, no task left)");
}

TEST_CASE("GrpcWorkerDrainer, scale-down: drains exactly the workers named and reports each one's verdict") {
  FakeDispatcherServer server;
  server.service().AddWorker("10.0.0.2:5051", 1);
  server.service().AddWorker("10.0.0.3:5051", 1);
  server.service().SetBlocker("10.0.0.3:5051", "3 splits not finished");
  GrpcWorkerDrainer drainer(GrpcWorkerDrainerOptions{});
  DrainWorkers drain;
  drain.scope = DrainScope::kScaleDown;
  drain.dispatcher_address = "ds-dispatcher.ml.svc:5050";
  drain.dispatcher_endpoint = server.address();
  drain.workers = {"ds-worker-remote-1"};
  drain.worker_uids = {"uid-1"};
  drain.worker_addresses = {"10.0.0.3:5051"};

  absl::StatusOr<DrainProgress> first = drainer.Drain(drain);
  REQUIRE(first.ok());
  CHECK(!first->complete);
  REQUIRE(first->workers.count("10.0.0.3:5051") == 1);
  CHECK(!first->workers.at("10.0.0.3:5051").drained);
  CHECK(first->workers.at("10.0.0.3:5051").message == "draining, 1 task: 3 splits not finished");
  REQUIRE(server.service().drain_requests().size() == 1);
  const service::DrainWorkersRequest sent = server.service().drain_requests()[0];
  CHECK(!sent.all_workers());
  REQUIRE(sent.worker_addresses_size() == 1);
  CHECK(sent.worker_addresses(0) == "10.0.0.3:5051");

  server.service().SetBlocker("10.0.0.3:5051", "");
  server.service().ReportDrained("10.0.0.3:5051");
  absl::StatusOr<DrainProgress> second = drainer.Drain(drain);
  REQUIRE(second.ok());
  CHECK(second->complete);
  CHECK(second->workers.at("10.0.0.3:5051").drained);

  DrainWorkers empty = drain;
  empty.worker_addresses.clear();
  CHECK(drainer.Drain(empty).status().code() == absl::StatusCode::kInvalidArgument);
}

TEST_CASE("GrpcWorkerDrainer: bad targets are errors, never hangs") {
  GrpcWorkerDrainerOptions options;
  options.rpc_timeout = absl::Milliseconds(300);
  GrpcWorkerDrainer drainer(options);
  CHECK(drainer.Drain(DrainWorkers{}).status().code() == absl::StatusCode::kInvalidArgument);

  // A port nothing listens on (bound, then closed).
  std::string dead;
  {
    FakeDispatcherServer gone;
    dead = gone.address();
  }
  DrainWorkers drain;
  drain.dispatcher_endpoint = dead;
  absl::StatusOr<DrainProgress> r = drainer.Drain(drain);
  REQUIRE(!r.ok());
  CHECK((r.status().code() == absl::StatusCode::kUnavailable ||
         r.status().code() == absl::StatusCode::kDeadlineExceeded));
  CHECK(absl::StrContains(r.status().message(), "DrainWorkers at dispatcher " + dead));
}

#ifdef SLUICE_DISPATCHER_BINARY
// The real dispatcher binary as a child process; killed and reaped on destruction.
class DispatcherProcess {
 public:
  DispatcherProcess() {
    log_ = dir_.File("dispatcher.log");
    pid_ = fork();
    if (pid_ == 0) {
      int fd = open(log_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      dup2(fd, 1);
      dup2(fd, 2);
      const char* binary = std::getenv("SLUICE_DISPATCHER_BINARY");  // override of the build's binary
      if (binary == nullptr || *binary == '\0') binary = SLUICE_DISPATCHER_BINARY;
      execl(binary, "sluice-dispatcher", "--port=0", "--metrics_port=-1",
            "--listen_host=127.0.0.1", "--worker_timeout_ms=60000", static_cast<char*>(nullptr));
      _exit(127);
    }
    REQUIRE(pid_ > 0);
    absl::Time deadline = absl::Now() + absl::Seconds(30);
    std::regex listening(R"(msg=listening port=(\d+))");
    while (port_ == 0 && absl::Now() < deadline) {
      std::ifstream in(log_);
      std::stringstream text;
      text << in.rdbuf();
      std::string s = text.str();
      std::smatch m;
      if (std::regex_search(s, m, listening)) port_ = std::stoi(m[1]);
      if (port_ == 0) std::this_thread::sleep_for(std::chrono::milliseconds(20));  // polling for the log line
    }
    REQUIRE(port_ > 0);
  }
  ~DispatcherProcess() {
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
  std::string address() const { return absl::StrCat("127.0.0.1:", port_); }

 private:
  sluice::testing::TempDir dir_;
  std::string log_;
  pid_t pid_ = -1;
  int port_ = 0;
};

TEST_CASE("GrpcWorkerDrainer against the real sluice-dispatcher", "[integration]") {
  DispatcherProcess dispatcher;
  auto channel = grpc::CreateChannel(dispatcher.address(), grpc::InsecureChannelCredentials());
  auto stub = service::Dispatcher::NewStub(channel);
  for (const char* address : {"127.0.0.1:7001", "127.0.0.1:7002"}) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    service::WorkerHeartbeatRequest heartbeat;
    heartbeat.set_worker_address(address);
    heartbeat.set_worker_host("127.0.0.1");
    service::WorkerHeartbeatResponse response;
    grpc::Status s = stub->WorkerHeartbeat(&context, heartbeat, &response);
    INFO(s.error_message());
    REQUIRE(s.ok());
  }
  GrpcWorkerDrainer drainer(GrpcWorkerDrainerOptions{});
  DrainWorkers drain;
  drain.dispatcher_endpoint = dispatcher.address();
  absl::StatusOr<DrainProgress> progress = drainer.Drain(drain);
  REQUIRE(progress.ok());
  CHECK(progress->complete);  // registered, no jobs: nothing to wait for
  CHECK(progress->message == "the dispatcher reports 2 workers drained, no tasks and no clients left");

  grpc::ClientContext context;
  service::GetStateResponse state;
  REQUIRE(stub->GetState(&context, service::GetStateRequest(), &state).ok());
  REQUIRE(state.workers_size() == 2);
  for (const auto& w : state.workers()) CHECK(w.draining());
}

TEST_CASE("GrpcWorkerDrainer, scale-down, against the real sluice-dispatcher: only the named worker drains",
          "[integration]") {
  DispatcherProcess dispatcher;
  auto channel = grpc::CreateChannel(dispatcher.address(), grpc::InsecureChannelCredentials());
  auto stub = service::Dispatcher::NewStub(channel);
  for (const char* address : {"127.0.0.1:7001", "127.0.0.1:7002"}) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    service::WorkerHeartbeatRequest heartbeat;
    heartbeat.set_worker_address(address);
    heartbeat.set_worker_host("127.0.0.1");
    service::WorkerHeartbeatResponse response;
    REQUIRE(stub->WorkerHeartbeat(&context, heartbeat, &response).ok());
  }
  GrpcWorkerDrainer drainer(GrpcWorkerDrainerOptions{});
  DrainWorkers drain;
  drain.scope = DrainScope::kScaleDown;
  drain.dispatcher_endpoint = dispatcher.address();
  drain.workers = {"w-2"};
  drain.worker_uids = {"uid-2"};
  drain.worker_addresses = {"127.0.0.1:7002"};
  absl::StatusOr<DrainProgress> progress = drainer.Drain(drain);
  REQUIRE(progress.ok());
  CHECK(progress->complete);  // no jobs: drained at once
  CHECK(progress->workers.at("127.0.0.1:7002").message == "draining, no task left");

  grpc::ClientContext context;
  service::GetStateResponse state;
  REQUIRE(stub->GetState(&context, service::GetStateRequest(), &state).ok());
  REQUIRE(state.workers_size() == 2);
  for (const auto& w : state.workers()) CHECK(w.draining() == (w.address() == "127.0.0.1:7002"));
}
#endif

}  // namespace
}  // namespace sluice::op
