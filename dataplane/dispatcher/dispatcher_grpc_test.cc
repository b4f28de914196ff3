// The dispatcher behind a real gRPC server on 127.0.0.1:0, driven with raw stubs: every RPC, hostile
// and malformed requests, message size limits, TLS and mutual TLS, and concurrent split traffic.
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include <catch2/catch.hpp>

#include <atomic>
#include <condition_variable>
#include <limits>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/log.h"
#include "dataplane/dispatcher/dispatcher_test_util.h"
#include "dataplane/dispatcher/grpc_dispatcher.h"
#include "testing/test_util.h"
#include "testing/tls_certificate.h"

namespace sluice::dispatcher {
namespace {

using sluice::testing::TempDir;
using testing::RangePipeline;
using testing::ServiceHarness;

const bool kQuiet = [] {
  log::SetMinLevel(log::Level::kWarning);
  return true;
}();

struct TestServer {
  explicit TestServer(const std::string& journal_dir = "", DispatcherServerOptions options = {},
                      FsyncPolicy fsync = FsyncPolicy::kNever)
      : harness(journal_dir, DispatcherOptions{}, fsync) {
    REQUIRE(harness.start_status().ok());
    options.address = "127.0.0.1:0";
    auto started = DispatcherServer::Start(options, &harness.service());
    INFO(started.status().ToString());
    REQUIRE(started.ok());
    server = std::move(*started);
    address = absl::StrCat("127.0.0.1:", server->port());
  }
  std::unique_ptr<service::Dispatcher::Stub> Stub(const rpc::TlsOptions& tls = {}) {
    auto channel = rpc::MakeChannel(address, tls);
    REQUIRE(channel.ok());
    return service::Dispatcher::NewStub(*channel);
  }
  ServiceHarness harness;
  std::unique_ptr<DispatcherServer> server;
  std::string address;
};

std::unique_ptr<grpc::ClientContext> Ctx() {
  auto ctx = std::make_unique<grpc::ClientContext>();
  ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  return ctx;
}

bool Has(const grpc::Status& s, const std::string& text) { return s.error_message().find(text) != std::string::npos; }

TEST_CASE("every RPC over gRPC, with statuses carried through") {
  TempDir dir;
  TestServer ts(dir.path().string());
  auto stub = ts.Stub();

  service::RegisterDatasetRequest reg;
  service::RegisterDatasetResponse reg_resp;
  grpc::Status s = stub->RegisterDataset(Ctx().get(), reg, &reg_resp);
  CHECK(s.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
  CHECK(Has(s, "pipeline is empty"));
  *reg.mutable_pipeline() = RangePipeline(100, 10);
  reg.mutable_pipeline()->add_steps()->set_kind("no_such_op");
  s = stub->RegisterDataset(Ctx().get(), reg, &reg_resp);
  CHECK(s.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
  CHECK(Has(s, "unknown step 'no_such_op'"));
  *reg.mutable_pipeline() = RangePipeline(100, 10);
  REQUIRE(stub->RegisterDataset(Ctx().get(), reg, &reg_resp).ok());
  CHECK(reg_resp.num_splits() == 10);

  service::WorkerHeartbeatRequest hb;
  service::WorkerHeartbeatResponse hb_resp;
  s = stub->WorkerHeartbeat(Ctx().get(), hb, &hb_resp);
  CHECK(s.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
  hb.set_worker_address("127.0.0.1:9999");
  REQUIRE(stub->WorkerHeartbeat(Ctx().get(), hb, &hb_resp).ok());

  service::GetOrCreateJobRequest job;
  job.mutable_spec()->set_dataset_id("unknown");
  service::GetOrCreateJobResponse job_resp;
  s = stub->GetOrCreateJob(Ctx().get(), job, &job_resp);
  CHECK(s.error_code() == grpc::StatusCode::NOT_FOUND);
  CHECK(Has(s, "spec.dataset_id 'unknown' is not known"));
  job.mutable_spec()->set_dataset_id(reg_resp.dataset_id());
  job.mutable_spec()->set_job_name("train");
  job.mutable_spec()->set_sharding(service::SHARDING_DYNAMIC);
  REQUIRE(stub->GetOrCreateJob(Ctx().get(), job, &job_resp).ok());
  job.mutable_spec()->set_sharding(service::SHARDING_OFF);
  s = stub->GetOrCreateJob(Ctx().get(), job, &job_resp);
  CHECK(s.error_code() == grpc::StatusCode::FAILED_PRECONDITION);
  CHECK(s.error_message() == "job 'train' exists with sharding DYNAMIC, request has OFF");
  job.mutable_spec()->set_sharding(service::SHARDING_DYNAMIC);
  job.mutable_spec()->set_num_epochs(-5);
  CHECK(stub->GetOrCreateJob(Ctx().get(), job, &job_resp).error_code() == grpc::StatusCode::INVALID_ARGUMENT);

  REQUIRE(stub->WorkerHeartbeat(Ctx().get(), hb, &hb_resp).ok());
  REQUIRE(hb_resp.new_tasks_size() == 1);
  const int64_t task = hb_resp.new_tasks(0).task_id();

  service::ClientHeartbeatRequest ch;
  ch.set_job_client_id(17);
  service::ClientHeartbeatResponse ch_resp;
  s = stub->ClientHeartbeat(Ctx().get(), ch, &ch_resp);
  CHECK(s.error_code() == grpc::StatusCode::NOT_FOUND);
  CHECK(s.error_message() == "job_client_id 17 is not known");
  ch.set_job_client_id(job_resp.job_client_id());
  REQUIRE(stub->ClientHeartbeat(Ctx().get(), ch, &ch_resp).ok());
  REQUIRE(ch_resp.tasks_size() == 1);
  CHECK(ch_resp.tasks(0).worker_address() == "127.0.0.1:9999");

  service::GetSplitsRequest gs;
  gs.set_task_id(task);
  gs.set_max_splits(-1);
  service::GetSplitsResponse gs_resp;
  CHECK(stub->GetSplits(Ctx().get(), gs, &gs_resp).error_code() == grpc::StatusCode::INVALID_ARGUMENT);
  gs.set_max_splits(std::numeric_limits<int32_t>::max());
  REQUIRE(stub->GetSplits(Ctx().get(), gs, &gs_resp).ok());
  CHECK(gs_resp.splits_size() == 10);
  gs.set_task_id(12345);
  s = stub->GetSplits(Ctx().get(), gs, &gs_resp);
  CHECK(s.error_code() == grpc::StatusCode::NOT_FOUND);
  CHECK(s.error_message() == "task_id 12345 is not known");

  service::DrainWorkersRequest drain;
  service::DrainWorkersResponse drain_resp;
  s = stub->DrainWorkers(Ctx().get(), drain, &drain_resp);  // names no worker: drains nothing
  CHECK(s.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
  CHECK(s.error_message().find("worker_addresses is empty") != std::string::npos);
  drain.set_all_workers(true);
  REQUIRE(stub->DrainWorkers(Ctx().get(), drain, &drain_resp).ok());
  CHECK(drain_resp.drained_size() == 1);

  service::GetStateResponse state;
  REQUIRE(stub->GetState(Ctx().get(), {}, &state).ok());
  REQUIRE(state.workers_size() == 1);
  CHECK(state.workers(0).draining());
  REQUIRE(state.jobs_size() == 1);
  CHECK(state.jobs(0).splits_served() == 10);

  service::ReleaseJobClientRequest rel;
  rel.set_job_client_id(999);
  service::ReleaseJobClientResponse rel_resp;
  CHECK(stub->ReleaseJobClient(Ctx().get(), rel, &rel_resp).error_code() == grpc::StatusCode::NOT_FOUND);
  rel.set_job_client_id(job_resp.job_client_id());
  CHECK(stub->ReleaseJobClient(Ctx().get(), rel, &rel_resp).ok());

  service::WorkerDeregisterRequest dereg;
  dereg.set_worker_address("nobody:1");
  service::WorkerDeregisterResponse dereg_resp;
  s = stub->WorkerDeregister(Ctx().get(), dereg, &dereg_resp);
  CHECK(s.error_code() == grpc::StatusCode::NOT_FOUND);
  CHECK(s.error_message() == "worker_address 'nobody:1' is not known");
  dereg.set_worker_address("127.0.0.1:9999");
  CHECK(stub->WorkerDeregister(Ctx().get(), dereg, &dereg_resp).ok());
}

TEST_CASE("bytes that are not a request are refused and the server keeps serving") {
  TestServer ts;
  auto channel = grpc::CreateChannel(ts.address, grpc::InsecureChannelCredentials());
  grpc::GenericStub generic(channel);
  for (const char* method : {"/sluice.service.Dispatcher/GetSplits", "/sluice.service.Dispatcher/RegisterDataset",
                             "/sluice.service.Dispatcher/NoSuchMethod"}) {
    const std::string garbage = "\xff\xff\xff\xff\x0f\x08\x96";
    grpc::Slice slice(garbage);
    grpc::ByteBuffer request(&slice, 1);
    grpc::ByteBuffer response;
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
    grpc::Status status;
    generic.UnaryCall(&ctx, method, grpc::StubOptions(), &request, &response, [&](grpc::Status s) {
      std::lock_guard<std::mutex> lock(mu);
      status = s;
      done = true;
      cv.notify_one();
    });
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return done; });
    INFO(method << ": " << status.error_message());
    CHECK(!status.ok());
  }
  auto stub = ts.Stub();
  service::GetStateResponse state;
  CHECK(stub->GetState(Ctx().get(), {}, &state).ok());
}

TEST_CASE("messages over the size limit are refused") {
  DispatcherServerOptions options;
  options.max_message_bytes = 64 << 10;
  TestServer ts("", options);
  auto stub = ts.Stub();
  service::RegisterDatasetRequest reg;
  *reg.mutable_pipeline() = RangePipeline(10, 1);
  reg.mutable_pipeline()->set_name(std::string(100 << 10, 'x'));
  service::RegisterDatasetResponse resp;
  grpc::Status s = stub->RegisterDataset(Ctx().get(), reg, &resp);
  CHECK(s.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED);
  reg.mutable_pipeline()->set_name("small");
  CHECK(stub->RegisterDataset(Ctx().get(), reg, &resp).ok());
}

// A self-signed certificate for 127.0.0.1 that also serves as its own CA.
rpc::TlsOptions SelfSigned(const TempDir& dir, const std::string& name) {
  const sluice::testing::TestCertificate cert = sluice::testing::MakeSelfSignedCertificate(dir, name);
  rpc::TlsOptions tls;
  tls.cert_file = cert.cert_file;
  tls.key_file = cert.key_file;
  return tls;
}

bool CanGetState(service::Dispatcher::Stub& stub) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  service::GetStateResponse state;
  return stub.GetState(&ctx, {}, &state).ok();
}

TEST_CASE("TLS and mutual TLS") {
  TempDir dir;
  const rpc::TlsOptions server_cert = SelfSigned(dir, "dispatcher");
  const rpc::TlsOptions client_cert = SelfSigned(dir, "client");
  rpc::TlsOptions trust_server;
  trust_server.ca_file = server_cert.cert_file;

  SECTION("server TLS") {
    DispatcherServerOptions options;
    options.tls = server_cert;
    TestServer ts("", options);
    CHECK(CanGetState(*ts.Stub(trust_server)));
    CHECK(!CanGetState(*ts.Stub()));  // plaintext client
  }
  SECTION("mutual TLS") {
    DispatcherServerOptions options;
    options.tls = server_cert;
    options.tls.ca_file = client_cert.cert_file;
    options.tls.require_client_cert = true;
    TestServer ts("", options);
    CHECK(!CanGetState(*ts.Stub(trust_server)));  // no client certificate
    rpc::TlsOptions with_cert = trust_server;
    with_cert.cert_file = client_cert.cert_file;
    with_cert.key_file = client_cert.key_file;
    CHECK(CanGetState(*ts.Stub(with_cert)));
    rpc::TlsOptions wrong_cert = trust_server;
    wrong_cert.cert_file = server_cert.cert_file;  // not signed by the CA the server trusts
    wrong_cert.key_file = server_cert.key_file;
    CHECK(!CanGetState(*ts.Stub(wrong_cert)));
  }
  SECTION("bad certificate files fail at start with the flag name") {
    DispatcherServerOptions options;
    options.tls.cert_file = dir.File("missing.crt");
    options.tls.key_file = server_cert.key_file;
    ServiceHarness h("");
    auto started = DispatcherServer::Start(options, &h.service());
    REQUIRE(!started.ok());
    CHECK(std::string(started.status().message()).find("--tls_cert") != std::string::npos);
  }
}

TEST_CASE("concurrent workers never receive the same split twice (journal with fsync=always)") {
  TempDir dir;
  TestServer ts(dir.path().string(), {}, FsyncPolicy::kAlways);
  auto stub = ts.Stub();
  service::RegisterDatasetRequest reg;
  *reg.mutable_pipeline() = RangePipeline(600, 1);
  service::RegisterDatasetResponse reg_resp;
  REQUIRE(stub->RegisterDataset(Ctx().get(), reg, &reg_resp).ok());
  service::GetOrCreateJobRequest job;
  job.mutable_spec()->set_dataset_id(reg_resp.dataset_id());
  job.mutable_spec()->set_sharding(service::SHARDING_DYNAMIC);
  job.mutable_spec()->set_num_epochs(2);
  service::GetOrCreateJobResponse job_resp;
  REQUIRE(stub->GetOrCreateJob(Ctx().get(), job, &job_resp).ok());
  constexpr int kWorkers = 4;
  std::vector<int64_t> tasks;
  for (int w = 0; w < kWorkers; ++w) {
    service::WorkerHeartbeatRequest hb;
    hb.set_worker_address(absl::StrCat("127.0.0.1:", 7000 + w));
    service::WorkerHeartbeatResponse hb_resp;
    REQUIRE(stub->WorkerHeartbeat(Ctx().get(), hb, &hb_resp).ok());
    REQUIRE(hb_resp.new_tasks_size() == 1);
    tasks.push_back(hb_resp.new_tasks(0).task_id());
  }
  std::mutex mu;
  std::map<std::pair<int64_t, uint64_t>, int> handed;  // (epoch, split) -> times
  std::atomic<int> errors{0};
  std::vector<std::thread> threads;
  for (int w = 0; w < kWorkers; ++w) {
    threads.emplace_back([&, w] {
      auto my_stub = ts.Stub();
      int64_t epoch = 0;
      std::vector<uint64_t> held;
      int calls = 0;
      while (epoch < 2 && calls++ < 200000) {  // waits are polls without sleeping
        service::GetSplitsRequest req;
        req.set_task_id(tasks[w]);
        req.set_max_splits(8);
        req.set_epoch(epoch);
        for (auto i : held) req.add_started_split_indices(i);
        service::GetSplitsResponse resp;
        grpc::ClientContext ctx;
        ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
        if (!my_stub->GetSplits(&ctx, req, &resp).ok()) {
          ++errors;
          return;
        }
        held.clear();
        {
          std::lock_guard<std::mutex> lock(mu);
          for (const auto& s : resp.splits()) {
            held.push_back(s.index());
            ++handed[{epoch, s.index()}];
          }
        }
        if (resp.end_of_splits()) ++epoch;
      }
    });
  }
  for (auto& t : threads) t.join();
  CHECK(errors == 0);
  CHECK(handed.size() == 2 * 600);
  int duplicates = 0;
  for (const auto& [key, times] : handed) duplicates += times != 1;
  CHECK(duplicates == 0);
  // And the journal replays to the same state.
  const std::string before = ts.harness.service().StateDebugString();
  ts.server.reset();
  ts.harness.Restart();
  CHECK(ts.harness.service().StateDebugString() == before);
}

}  // namespace
}  // namespace sluice::dispatcher
