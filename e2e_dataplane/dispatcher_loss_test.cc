// A client whose dispatcher is killed for good (kill -9, never restarted), with real processes:
// it must reach the end of the data when every task it reads has ended, or fail with a clear error
// when it cannot tell — never wait forever (docs/dataservice-client.md, "Without the dispatcher").
#include <catch2/catch.hpp>

#include <optional>

#include "absl/time/clock.h"
#include "e2e_dataplane/e2e_test_util.h"

namespace sluice::e2e {
namespace {

// Short, so the tests take seconds; the default is 2 minutes.
constexpr absl::Duration kDispatcherTimeout = absl::Seconds(1);

client::DataServiceClientOptions LossOptions(const std::string& address, const pipeline::PipelineDef& def,
                                             service::ShardingPolicy sharding) {
  auto o = ClientOptions(address, def, sharding);
  o.dispatcher_timeout = kDispatcherTimeout;
  // A heartbeat retried after a failure waits for the channel up to rpc_timeout: with the default
  // (10 s) the absence is noticed up to 10 s late.
  o.rpc_timeout = absl::Seconds(2);
  return o;
}

TEST_CASE("dispatcher killed for good, parallel epochs: every element arrives in order, then the end") {
  // The reported case: one worker, range(100), parallel epochs; one element read, then kill -9 of
  // the dispatcher. The rest arrived, and next() then blocked forever.
  // 1 MiB elements and a 2 MiB client buffer: the worker cannot hand out the whole epoch (100 MiB,
  // far more than the stream's flow-control window) before the kill, so the job is unfinished then.
  auto service = StartService(1, TestServiceOptions());
  auto o = LossOptions(service->dispatcher_address(), PaddedRangePipeline(100, 10, 131072), service::SHARDING_OFF);
  o.max_buffered_bytes = 2 << 20;
  auto client = MakeClient(o);
  std::vector<int64_t> values = {IntField(*Next(*client))};
  REQUIRE_FALSE(client->stats().job_finished);
  service->KillDispatcher();
  std::vector<int64_t> rest = ReadAll(*client);  // REQUIREs the end within 60 s
  values.insert(values.end(), rest.begin(), rest.end());
  std::vector<int64_t> want(100);
  for (int64_t i = 0; i < 100; ++i) want[static_cast<size_t>(i)] = i;
  CHECK(values == want);
  CHECK(client->stats().ended_without_dispatcher);
  CHECK(client->status().ok());
}

TEST_CASE("dispatcher killed for good, distributed epoch: the worker starves and the client fails clearly") {
  // Under dynamic sharding a worker needs the dispatcher for every new split: with it gone, the
  // task never ends, and the client cannot tell an outage from the end.
  auto service = StartService(1, TestServiceOptions());
  auto o = LossOptions(service->dispatcher_address(), RangePipeline(1000000, 10), service::SHARDING_DYNAMIC);
  auto client = MakeClient(o);
  REQUIRE(Next(*client).has_value());
  service->KillDispatcher();
  // Elements of the splits the worker holds still come; then nothing, then the error.
  int64_t after_kill = 0;
  absl::Status error;
  const absl::Time deadline = absl::Now() + absl::Seconds(60);
  while (absl::Now() < deadline) {
    auto next = client->GetNext(absl::Seconds(60));
    if (!next.ok()) {
      error = next.status();
      break;
    }
    REQUIRE(next->has_value());  // the data does not end: it is a million elements
    ++after_kill;
  }
  INFO("elements after the kill: " << after_kill);
  CHECK(error.code() == absl::StatusCode::kUnavailable);
  CHECK_THAT(std::string(error.message()), Catch::Contains("has not answered for") &&
                                               Catch::Contains("options.dispatcher_timeout 1s"));
  CHECK_FALSE(client->stats().ended_without_dispatcher);
  CHECK(after_kill < 1000000);
}

}  // namespace
}  // namespace sluice::e2e
