#include "bench/sharding/counting_proxy.h"

#include <catch2/catch.hpp>

#include "absl/strings/str_cat.h"

namespace sluice::bench {
namespace {

TEST_CASE("CountGetSplits tells fetches, acknowledgements, epoch ends and polls apart") {
  DispatcherCallCounts c;
  service::GetSplitsRequest fetch;
  fetch.set_max_splits(8);
  service::GetSplitsResponse batch;
  for (int i = 0; i < 6; ++i) batch.add_splits()->set_index(i);
  CountGetSplits(fetch, batch, &c);
  service::GetSplitsRequest ack;  // max_splits 0: acknowledgements only
  ack.add_started_split_indices(0);
  ack.add_started_split_indices(1);
  CountGetSplits(ack, service::GetSplitsResponse(), &c);
  service::GetSplitsResponse last;
  last.add_splits()->set_index(6);
  last.set_end_of_splits(true);
  CountGetSplits(fetch, last, &c);
  CountGetSplits(fetch, service::GetSplitsResponse(), &c);  // the next epoch is not open yet
  CHECK(c.get_splits_calls == 4);
  CHECK(c.fetch_calls == 3);
  CHECK(c.ack_only_calls == 1);
  CHECK(c.fetches_with_splits == 2);
  CHECK(c.splits_handed_out == 7);
  CHECK(c.starts_acknowledged == 2);
  CHECK(c.end_of_splits_answers == 1);
  CHECK(c.empty_answers == 1);  // the ack-only answer is not a poll
}

// A dispatcher that answers GetSplits with two splits and fails GetState.
class ScriptedDispatcher final : public service::Dispatcher::Service {
 public:
  grpc::Status GetSplits(grpc::ServerContext*, const service::GetSplitsRequest* request,
                         service::GetSplitsResponse* response) override {
    for (int i = 0; i < 2; ++i) response->add_splits()->set_index(request->task_id() * 10 + i);
    return grpc::Status::OK;
  }
  grpc::Status WorkerHeartbeat(grpc::ServerContext*, const service::WorkerHeartbeatRequest*,
                               service::WorkerHeartbeatResponse* response) override {
    response->set_heartbeat_interval_ms(123);
    return grpc::Status::OK;
  }
  grpc::Status GetState(grpc::ServerContext*, const service::GetStateRequest*, service::GetStateResponse*) override {
    return grpc::Status(grpc::StatusCode::NOT_FOUND, "scripted failure");
  }
};

TEST_CASE("The proxy forwards calls, passes errors through and counts") {
  ScriptedDispatcher dispatcher;
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&dispatcher);
  auto server = builder.BuildAndStart();
  REQUIRE(server != nullptr);

  auto proxy = CountingDispatcherProxy::Start(absl::StrCat("127.0.0.1:", port));
  REQUIRE(proxy.ok());
  auto stub = service::Dispatcher::NewStub(grpc::CreateChannel((*proxy)->address(), grpc::InsecureChannelCredentials()));
  for (int task = 1; task <= 2; ++task) {
    grpc::ClientContext ctx;
    service::GetSplitsRequest req;
    req.set_task_id(task);
    req.set_max_splits(8);
    service::GetSplitsResponse resp;
    REQUIRE(stub->GetSplits(&ctx, req, &resp).ok());
    REQUIRE(resp.splits_size() == 2);
    CHECK(resp.splits(1).index() == static_cast<uint64_t>(task * 10 + 1));
  }
  {
    grpc::ClientContext ctx;
    service::WorkerHeartbeatResponse resp;
    REQUIRE(stub->WorkerHeartbeat(&ctx, service::WorkerHeartbeatRequest(), &resp).ok());
    CHECK(resp.heartbeat_interval_ms() == 123);
  }
  {
    grpc::ClientContext ctx;
    service::GetStateResponse resp;
    grpc::Status s = stub->GetState(&ctx, service::GetStateRequest(), &resp);
    CHECK(s.error_code() == grpc::StatusCode::NOT_FOUND);
    CHECK(s.error_message() == "scripted failure");
  }
  {
    grpc::ClientContext ctx;  // not implemented by the scripted dispatcher: the error comes through
    service::RegisterDatasetResponse resp;
    CHECK(stub->RegisterDataset(&ctx, service::RegisterDatasetRequest(), &resp).error_code() ==
          grpc::StatusCode::UNIMPLEMENTED);
  }
  DispatcherCallCounts c = (*proxy)->counts();
  CHECK(c.get_splits_calls == 2);
  CHECK(c.fetch_calls == 2);
  CHECK(c.splits_handed_out == 4);
  CHECK(c.worker_heartbeats == 1);
  CHECK(c.failed_calls == 2);
  (*proxy)->ResetCounts();
  CHECK((*proxy)->counts().get_splits_calls == 0);
  proxy->reset();
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
}

}  // namespace
}  // namespace sluice::bench
