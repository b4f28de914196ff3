// Malformed and hostile requests against the real binaries over raw gRPC: unknown ids, mismatched
// job parameters, invalid enum values, garbage element requests, undecodable bytes and oversize
// messages. Each gets a clear error naming the field; afterwards both processes still serve a job.
#include <catch2/catch.hpp>

#include <grpcpp/generic/generic_stub.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "dataplane/rpc/credentials.h"
#include "dataservice.grpc.pb.h"
#include "e2e_dataplane/e2e_test_util.h"

namespace sluice::e2e {
namespace {

constexpr int kMaxMessageBytes = 1 << 20;

struct Outcome {
  grpc::StatusCode code;
  std::string message;
};

// Sends `bytes` as the request of `method` (no protobuf encoding), as a broken or hostile peer would.
Outcome RawCall(const std::shared_ptr<grpc::Channel>& channel, const std::string& method, const std::string& bytes) {
  grpc::GenericStub stub(channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
  grpc::Slice slice(bytes);
  grpc::ByteBuffer request(&slice, 1), response;
  absl::Notification done;
  grpc::Status result;
  stub.UnaryCall(&ctx, method, grpc::StubOptions(), &request, &response, [&](grpc::Status s) {
    result = std::move(s);
    done.Notify();
  });
  done.WaitForNotification();
  return {result.error_code(), result.error_message()};
}

template <typename Call>
Outcome Unary(Call call) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
  grpc::Status s = call(&ctx);
  return {s.error_code(), s.error_message()};
}

// The first GetElements response (or the stream's status).
Outcome StreamFirst(service::Worker::Stub& worker, const service::GetElementsRequest& request) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
  auto reader = worker.GetElements(&ctx, request);
  service::GetElementsResponse response;
  while (reader->Read(&response)) {
  }
  grpc::Status s = reader->Finish();
  return {s.error_code(), s.error_message()};
}

#define CHECK_OUTCOME(outcome, want_code, want_text)             \
  do {                                                           \
    const Outcome o_ = (outcome);                                \
    INFO("code " << o_.code << ": " << o_.message);              \
    CHECK(o_.code == (want_code));                               \
    CHECK(absl::StrContains(o_.message, (want_text)));           \
  } while (false)

TEST_CASE("Hostile requests against the real dispatcher and worker get clear errors - both keep serving") {
  auto options = TestServiceOptions();
  options.dispatcher_flags.push_back(absl::StrCat("--max_message_bytes=", kMaxMessageBytes));
  options.worker_flags = {absl::StrCat("--max_message_bytes=", kMaxMessageBytes), "--task_wait_ms=300"};
  auto service = StartService(1, options);
  // Channels that allow sending more than the servers accept.
  auto dispatcher_channel = rpc::MakeChannel(service->dispatcher_address(), rpc::TlsOptions{}, 64 << 20);
  auto worker_channel = rpc::MakeChannel(service->worker(0).address, rpc::TlsOptions{}, 64 << 20);
  REQUIRE(dispatcher_channel.ok());
  REQUIRE(worker_channel.ok());
  auto dispatcher = service::Dispatcher::NewStub(*dispatcher_channel);
  auto worker = service::Worker::NewStub(*worker_channel);

  // A real dataset and a dynamic job "train" to aim at.
  service::RegisterDatasetRequest reg;
  *reg.mutable_pipeline() = RangePipeline(500, 50);
  service::RegisterDatasetResponse registered;
  REQUIRE(Unary([&](grpc::ClientContext* c) { return dispatcher->RegisterDataset(c, reg, &registered); }).code ==
          grpc::StatusCode::OK);
  service::GetOrCreateJobRequest job;
  job.mutable_spec()->set_job_name("train");
  job.mutable_spec()->set_dataset_id(registered.dataset_id());
  job.mutable_spec()->set_sharding(service::SHARDING_DYNAMIC);
  service::GetOrCreateJobResponse created;
  REQUIRE(Unary([&](grpc::ClientContext* c) { return dispatcher->GetOrCreateJob(c, job, &created); }).code ==
          grpc::StatusCode::OK);

  SECTION("dispatcher: unknown ids") {
    service::ClientHeartbeatRequest hb;
    hb.set_job_client_id(17);
    service::ClientHeartbeatResponse hb_response;
    CHECK_OUTCOME(Unary([&](grpc::ClientContext* c) { return dispatcher->ClientHeartbeat(c, hb, &hb_response); }),
                  grpc::StatusCode::NOT_FOUND, "job_client_id 17 is not known");
    service::ReleaseJobClientRequest release;
    release.set_job_client_id(123456);
    service::ReleaseJobClientResponse release_response;
    CHECK_OUTCOME(Unary([&](grpc::ClientContext* c) { return dispatcher->ReleaseJobClient(c, release, &release_response); }),
                  grpc::StatusCode::NOT_FOUND, "job_client_id 123456 is not known");
    service::GetOrCreateJobRequest unknown = job;
    unknown.mutable_spec()->set_job_name("other");
    unknown.mutable_spec()->set_dataset_id("no-such-dataset");
    service::GetOrCreateJobResponse r;
    CHECK_OUTCOME(Unary([&](grpc::ClientContext* c) { return dispatcher->GetOrCreateJob(c, unknown, &r); }),
                  grpc::StatusCode::NOT_FOUND, "spec.dataset_id 'no-such-dataset' is not known");
    service::GetSplitsRequest splits;
    splits.set_task_id(999999);
    splits.set_max_splits(4);
    service::GetSplitsResponse splits_response;
    CHECK_OUTCOME(Unary([&](grpc::ClientContext* c) { return dispatcher->GetSplits(c, splits, &splits_response); }),
                  grpc::StatusCode::NOT_FOUND, "task_id 999999 is not known");
  }

  SECTION("dispatcher: mismatched and invalid job parameters") {
    service::GetOrCreateJobRequest other = job;
    other.mutable_spec()->set_sharding(service::SHARDING_OFF);
    service::GetOrCreateJobResponse r;
    CHECK_OUTCOME(Unary([&](grpc::ClientContext* c) { return dispatcher->GetOrCreateJob(c, other, &r); }),
                  grpc::StatusCode::FAILED_PRECONDITION, "job 'train' exists with sharding DYNAMIC, request has OFF");
    other = job;
    other.mutable_spec()->set_num_epochs(3);
    CHECK_OUTCOME(Unary([&](grpc::ClientContext* c) { return dispatcher->GetOrCreateJob(c, other, &r); }),
                  grpc::StatusCode::FAILED_PRECONDITION, "num_epochs");
    other = job;
    other.mutable_spec()->set_sharding(static_cast<service::ShardingPolicy>(99));
    CHECK_OUTCOME(Unary([&](grpc::ClientContext* c) { return dispatcher->GetOrCreateJob(c, other, &r); }),
                  grpc::StatusCode::INVALID_ARGUMENT, "spec.sharding 99");
    other = job;
    other.mutable_spec()->set_job_name("coordinated");
    other.mutable_spec()->set_num_consumers(2);
    CHECK_OUTCOME(Unary([&](grpc::ClientContext* c) { return dispatcher->GetOrCreateJob(c, other, &r); }),
                  grpc::StatusCode::INVALID_ARGUMENT, "needs sharding SHARDING_OFF");
    other.mutable_spec()->set_num_consumers(-1);
    CHECK_OUTCOME(Unary([&](grpc::ClientContext* c) { return dispatcher->GetOrCreateJob(c, other, &r); }),
                  grpc::StatusCode::INVALID_ARGUMENT, "spec.num_consumers is -1");
    service::WorkerHeartbeatRequest whb;  // no worker_address
    service::WorkerHeartbeatResponse whb_response;
    CHECK_OUTCOME(Unary([&](grpc::ClientContext* c) { return dispatcher->WorkerHeartbeat(c, whb, &whb_response); }),
                  grpc::StatusCode::INVALID_ARGUMENT, "worker_address is empty");
    service::GetSplitsRequest splits;
    splits.set_max_splits(-3);
    service::GetSplitsResponse splits_response;
    CHECK_OUTCOME(Unary([&](grpc::ClientContext* c) { return dispatcher->GetSplits(c, splits, &splits_response); }),
                  grpc::StatusCode::INVALID_ARGUMENT, "max_splits is -3");
    service::RegisterDatasetRequest missing_file;
    *missing_file.mutable_pipeline() = Pipeline("source: {jsonl: {files: /nonexistent/sluice-e2e/*.jsonl}}\n");
    service::RegisterDatasetResponse missing_response;
    const Outcome o = Unary([&](grpc::ClientContext* c) {
      return dispatcher->RegisterDataset(c, missing_file, &missing_response);
    });
    INFO(o.message);
    CHECK(o.code != grpc::StatusCode::OK);
    CHECK(absl::StrContains(o.message, "/nonexistent/sluice-e2e"));
  }

  SECTION("dispatcher: undecodable and oversize requests") {
    CHECK(RawCall(*dispatcher_channel, "/sluice.service.Dispatcher/GetOrCreateJob", "\xff\xff\xff\xff garbage").code !=
          grpc::StatusCode::OK);
    service::RegisterDatasetRequest huge;
    *huge.mutable_pipeline() = RangePipeline(10, 5);
    huge.mutable_pipeline()->set_name(std::string(2 * kMaxMessageBytes, 'x'));
    service::RegisterDatasetResponse r;
    CHECK(Unary([&](grpc::ClientContext* c) { return dispatcher->RegisterDataset(c, huge, &r); }).code ==
          grpc::StatusCode::RESOURCE_EXHAUSTED);
  }

  SECTION("worker: garbage element requests") {
    service::GetElementsRequest unknown;
    unknown.set_task_id(424242);
    CHECK_OUTCOME(StreamFirst(*worker, unknown), grpc::StatusCode::NOT_FOUND, "task_id 424242 is not known");
    // The job's real task.
    service::ClientHeartbeatRequest hb;
    hb.set_job_client_id(created.job_client_id());
    service::ClientHeartbeatResponse tasks;
    REQUIRE(Unary([&](grpc::ClientContext* c) { return dispatcher->ClientHeartbeat(c, hb, &tasks); }).code ==
            grpc::StatusCode::OK);
    REQUIRE(tasks.tasks_size() == 1);
    service::GetElementsRequest bad;
    bad.set_task_id(tasks.tasks(0).task_id());
    bad.set_max_elements(-5);
    CHECK_OUTCOME(StreamFirst(*worker, bad), grpc::StatusCode::INVALID_ARGUMENT, "max_elements must be >= 0");
    bad.set_max_elements(0);
    bad.set_compression(static_cast<service::Compression>(77));
    CHECK_OUTCOME(StreamFirst(*worker, bad), grpc::StatusCode::INVALID_ARGUMENT, "77");
    bad.set_compression(service::COMPRESSION_AUTO);
    bad.set_round(-1);
    bad.set_consumer_index(0);
    service::GetElementsResponse one;
    CHECK_OUTCOME(Unary([&](grpc::ClientContext* c) { return worker->GetElement(c, bad, &one); }),
                  grpc::StatusCode::INVALID_ARGUMENT, "round must be >= 0");
    bad.set_round(0);
    CHECK_OUTCOME(Unary([&](grpc::ClientContext* c) { return worker->GetElement(c, bad, &one); }),
                  grpc::StatusCode::FAILED_PRECONDITION, "not a coordinated-read task");
    CHECK(RawCall(*worker_channel, "/sluice.service.Worker/GetElement", "\x08\xff\xff\xff").code != grpc::StatusCode::OK);
    // An oversize request: a valid message padded with an unknown field past the worker's limit.
    std::string oversize;
    service::GetElementsRequest small;
    small.set_task_id(1);
    small.SerializeToString(&oversize);
    const std::string padding(2 * kMaxMessageBytes, 'p');
    auto append_varint = [&](uint64_t v) {
      while (v >= 0x80) {
        oversize.push_back(static_cast<char>((v & 0x7f) | 0x80));
        v >>= 7;
      }
      oversize.push_back(static_cast<char>(v));
    };
    append_varint(100 << 3 | 2);  // field 100, length-delimited
    append_varint(padding.size());
    oversize += padding;
    CHECK(RawCall(*worker_channel, "/sluice.service.Worker/GetElement", oversize).code ==
          grpc::StatusCode::RESOURCE_EXHAUSTED);
  }

  // Whatever was thrown at them, both processes still run and serve a job end to end.
  INFO(service->Logs());
  CHECK(!service->dispatcher().process->Exited());
  CHECK(!service->worker(0).process->Exited());
  auto healthz = local::HttpGet("127.0.0.1", service->worker(0).metrics_port, "/healthz");
  REQUIRE(healthz.ok());
  CHECK(healthz->status == 200);
  auto o = ClientOptions(service->dispatcher_address(), RangePipeline(300, 30), service::SHARDING_DYNAMIC);
  o.job_name = "after-the-storm";
  auto client = MakeClient(o);
  CHECK(CountProblems(Counts(ReadAll(*client)), 300, 1) == "");
}

}  // namespace
}  // namespace sluice::e2e
