// Malformed and hostile requests against the real binaries over raw gRPC: unknown ids, mismatched
// job parameters, invalid enum values, garbage element requests, undecodable bytes, oversize
// messages, plugins outside --plugin_dir and a DrainWorkers naming no worker. Each gets a clear
// error naming the field and leaves the dispatcher's state as it was (GetState before and after);
// afterwards both processes still serve a job (also one whose pipeline loads an allowed plugin).
#include <catch2/catch.hpp>

#include <grpcpp/generic/generic_stub.h>
#include <google/protobuf/util/message_differencer.h>

#include <algorithm>
#include <filesystem>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "dataplane/rpc/credentials.h"
#include "dataservice.grpc.pb.h"
#include "e2e_dataplane/e2e_test_util.h"
#include "testing/test_util.h"

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

// GetState without what changes by itself (time since a worker's last heartbeat).
service::GetStateResponse Normalized(const service::GetStateResponse& state) {
  service::GetStateResponse out = state;
  for (auto& w : *out.mutable_workers()) w.clear_last_heartbeat_ms_ago();
  return out;
}

// The dispatcher's state once it stopped changing on its own (the worker's task fetched what its
// buffer holds): two GetStates 300 ms apart agree.
service::GetStateResponse SettledState(local::LocalDataService& service) {
  service::GetStateResponse previous;
  for (int attempt = 0; attempt < 100; ++attempt) {
    auto state = service.GetState();
    REQUIRE(state.ok());
    service::GetStateResponse now = Normalized(*state);
    if (attempt > 0 && google::protobuf::util::MessageDifferencer::Equals(previous, now)) return now;
    previous = now;
    absl::SleepFor(absl::Milliseconds(300));
  }
  FAIL("the dispatcher's state did not settle");
  return previous;
}

// The path of a copy of the test plugin (dataplane/pipeline/test_plugin.c) in `dir`.
std::string CopyTestPlugin(const sluice::testing::TempDir& dir, const std::string& name) {
  const std::string path = dir.File(name);
  if (!std::filesystem::exists(path)) {
    std::filesystem::copy_file(sluice::testing::BinaryDir() + "/dataplane/pipeline/libsluice_test_plugin.so", path);
  }
  return path;
}

// Directories for the whole test process: the test parses the allowed plugin's pipeline itself
// (which loads it here too), and a plugin's ops can be registered from one path only.
const sluice::testing::TempDir& AllowedPluginDir() {
  static const auto* dir = new sluice::testing::TempDir();
  return *dir;
}
const sluice::testing::TempDir& OutsidePluginDir() {
  static const auto* dir = new sluice::testing::TempDir();
  return *dir;
}

pipeline::PipelineDef WithPlugin(const std::string& plugin_path) {
  pipeline::PipelineDef def = RangePipeline(10, 5);
  def.add_plugins()->set_path(plugin_path);
  return def;
}

#define CHECK_OUTCOME(outcome, want_code, want_text)             \
  do {                                                           \
    const Outcome o_ = (outcome);                                \
    INFO("code " << o_.code << ": " << o_.message);              \
    CHECK(o_.code == (want_code));                               \
    CHECK(absl::StrContains(o_.message, (want_text)));           \
  } while (false)

TEST_CASE("Hostile requests against the real dispatcher and worker get clear errors - both keep serving") {
  const sluice::testing::TempDir& plugins = AllowedPluginDir();     // both daemons allow plugins from here
  const sluice::testing::TempDir& elsewhere = OutsidePluginDir();  // and not from here
  const std::string allowed_plugin = CopyTestPlugin(plugins, "libops.so");
  const std::string outside_plugin = CopyTestPlugin(elsewhere, "libevil.so");
  auto options = TestServiceOptions();
  options.dispatcher_flags.push_back(absl::StrCat("--max_message_bytes=", kMaxMessageBytes));
  options.dispatcher_flags.push_back(absl::StrCat("--plugin_dir=", plugins.path().string()));
  options.worker_flags = {absl::StrCat("--max_message_bytes=", kMaxMessageBytes), "--task_wait_ms=300",
                          absl::StrCat("--plugin_dir=", plugins.path().string())};
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
  // What the hostile requests below must leave as it is.
  const service::GetStateResponse before = SettledState(*service);
  REQUIRE(before.jobs_size() == 1);

  SECTION("dispatcher: plugins outside --plugin_dir are refused before anything loads them") {
    service::RegisterDatasetRequest outside;
    *outside.mutable_pipeline() = WithPlugin(outside_plugin);
    service::RegisterDatasetResponse r;
    CHECK_OUTCOME(Unary([&](grpc::ClientContext* c) { return dispatcher->RegisterDataset(c, outside, &r); }),
                  grpc::StatusCode::FAILED_PRECONDITION, outside_plugin);
    CHECK_OUTCOME(Unary([&](grpc::ClientContext* c) { return dispatcher->RegisterDataset(c, outside, &r); }),
                  grpc::StatusCode::FAILED_PRECONDITION, "--plugin_dir");
    // Through ".." and through a symlink inside the allowed directory: resolved, still outside.
    *outside.mutable_pipeline() = WithPlugin(absl::StrCat(plugins.path().string(), "/../",
                                                          elsewhere.path().filename().string(), "/libevil.so"));
    CHECK_OUTCOME(Unary([&](grpc::ClientContext* c) { return dispatcher->RegisterDataset(c, outside, &r); }),
                  grpc::StatusCode::FAILED_PRECONDITION, "is outside --plugin_dir");
    if (!std::filesystem::is_symlink(plugins.File("link.so"))) {
      std::filesystem::create_symlink(outside_plugin, plugins.File("link.so"));
    }
    *outside.mutable_pipeline() = WithPlugin(plugins.File("link.so"));
    CHECK_OUTCOME(Unary([&](grpc::ClientContext* c) { return dispatcher->RegisterDataset(c, outside, &r); }),
                  grpc::StatusCode::FAILED_PRECONDITION, absl::StrCat("resolved: '", outside_plugin, "'"));
    // A bare name would be searched on the library path.
    *outside.mutable_pipeline() = WithPlugin("libsluice_test_plugin.so");
    CHECK_OUTCOME(Unary([&](grpc::ClientContext* c) { return dispatcher->RegisterDataset(c, outside, &r); }),
                  grpc::StatusCode::FAILED_PRECONDITION, "has no directory");
    CHECK(!service->dispatcher().process->Exited());
  }

  SECTION("dispatcher: DrainWorkers naming no worker drains nothing") {
    service::DrainWorkersRequest none;
    service::DrainWorkersResponse r;
    CHECK_OUTCOME(Unary([&](grpc::ClientContext* c) { return dispatcher->DrainWorkers(c, none, &r); }),
                  grpc::StatusCode::INVALID_ARGUMENT, "worker_addresses is empty");
    service::DrainWorkersRequest both;
    both.set_all_workers(true);
    both.add_worker_addresses(service->worker(0).address);
    CHECK_OUTCOME(Unary([&](grpc::ClientContext* c) { return dispatcher->DrainWorkers(c, both, &r); }),
                  grpc::StatusCode::INVALID_ARGUMENT, "all_workers");
    service::DrainWorkersRequest blank;
    blank.add_worker_addresses("");
    CHECK_OUTCOME(Unary([&](grpc::ClientContext* c) { return dispatcher->DrainWorkers(c, blank, &r); }),
                  grpc::StatusCode::INVALID_ARGUMENT, "worker_addresses[0] is empty");
  }

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

  // None of it changed the dispatcher's state.
  {
    auto after = service->GetState();
    REQUIRE(after.ok());
    const service::GetStateResponse now = Normalized(*after);
    INFO("before:\n" << before.DebugString() << "after:\n" << now.DebugString());
    CHECK(google::protobuf::util::MessageDifferencer::Equals(before, now));
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
  // A pipeline whose plugin lies in --plugin_dir runs on the dispatcher and the worker.
  auto plugin_options = ClientOptions(
      service->dispatcher_address(),
      Pipeline(absl::StrCat("plugins: ['", allowed_plugin,
                            "']\nsource: {range: {stop: 50}}\nsteps:\n  - add_constant: {config: {field: value, add: 1000}}\n")),
      service::SHARDING_DYNAMIC);
  auto plugin_client = MakeClient(plugin_options);
  std::vector<int64_t> plus = ReadAll(*plugin_client, "value_plus");
  std::sort(plus.begin(), plus.end());
  std::vector<int64_t> want(50);
  for (int64_t i = 0; i < 50; ++i) want[static_cast<size_t>(i)] = 1000 + i;
  CHECK(plus == want);
}

TEST_CASE("Without --plugin_dir the dispatcher refuses every plugin a client sends") {
  sluice::testing::TempDir dir;
  const std::string plugin = CopyTestPlugin(dir, "libops.so");
  auto service = StartService(1, TestServiceOptions());
  auto channel = rpc::MakeChannel(service->dispatcher_address(), rpc::TlsOptions{});
  REQUIRE(channel.ok());
  auto dispatcher = service::Dispatcher::NewStub(*channel);
  const service::GetStateResponse before = SettledState(*service);
  service::RegisterDatasetRequest request;
  *request.mutable_pipeline() = WithPlugin(plugin);
  service::RegisterDatasetResponse r;
  CHECK_OUTCOME(Unary([&](grpc::ClientContext* c) { return dispatcher->RegisterDataset(c, request, &r); }),
                grpc::StatusCode::FAILED_PRECONDITION, absl::StrCat("plugin '", plugin, "' is refused"));
  CHECK_OUTCOME(Unary([&](grpc::ClientContext* c) { return dispatcher->RegisterDataset(c, request, &r); }),
                grpc::StatusCode::FAILED_PRECONDITION, "--plugin_dir=DIR");
  auto after = service->GetState();
  REQUIRE(after.ok());
  CHECK(google::protobuf::util::MessageDifferencer::Equals(before, Normalized(*after)));
}

}  // namespace
}  // namespace sluice::e2e
