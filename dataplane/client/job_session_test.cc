#include "dataplane/client/job_session.h"

#include <catch2/catch.hpp>

#include <atomic>

#include "absl/synchronization/mutex.h"
#include "dataplane/client/testing/fake_dispatcher.h"
#include "dataplane/client/testing/fake_service_rpc.h"

namespace sluice::client {
namespace {

using testing::FakeDispatcherRpc;
using testing::WaitUntil;

JobSession::Options FastOptions() {
  JobSession::Options o;
  o.dispatcher_address = "dispatcher:5000";
  o.heartbeat_interval = absl::Milliseconds(1);
  o.initial_backoff = absl::Milliseconds(1);
  o.max_backoff = absl::Milliseconds(4);
  o.create_timeout = absl::Seconds(30);
  return o;
}

service::GetOrCreateJobRequest JobRequest(const std::string& dataset_id = "") {
  service::GetOrCreateJobRequest r;
  r.mutable_spec()->set_job_name("train");
  r.mutable_spec()->set_dataset_id(dataset_id);
  return r;
}

// Records what the session hands over.
class RecordingListener : public JobSession::Listener {
 public:
  void FillHeartbeat(service::ClientHeartbeatRequest* request) override { request->set_current_round(42); }
  bool OnHeartbeat(const service::ClientHeartbeatResponse& response) override {
    absl::MutexLock l(&mu_);
    answers_.push_back(response);
    return false;
  }
  void OnSessionError(absl::Status status) override {
    absl::MutexLock l(&mu_);
    errors_.push_back(std::move(status));
  }
  void OnDispatcherUnreachable(absl::Duration unreachable_for, const absl::Status& last_error) override {
    absl::MutexLock l(&mu_);
    unreachable_.emplace_back(unreachable_for, last_error);
  }
  std::vector<std::pair<absl::Duration, absl::Status>> unreachable() const {
    absl::MutexLock l(&mu_);
    return unreachable_;
  }
  size_t answers() const {
    absl::MutexLock l(&mu_);
    return answers_.size();
  }
  std::vector<absl::Status> errors() const {
    absl::MutexLock l(&mu_);
    return errors_;
  }

 private:
  mutable absl::Mutex mu_;
  std::vector<service::ClientHeartbeatResponse> answers_ ABSL_GUARDED_BY(mu_);
  std::vector<absl::Status> errors_ ABSL_GUARDED_BY(mu_);
  std::vector<std::pair<absl::Duration, absl::Status>> unreachable_ ABSL_GUARDED_BY(mu_);
};

TEST_CASE("client_job_session: Open registers, gets the job, and retries an unreachable dispatcher") {
  auto rpc = std::make_unique<FakeDispatcherRpc>();
  std::atomic<int> refusals{2};
  rpc->register_dataset = [&](const service::RegisterDatasetRequest&, const CallOptions&)
      -> absl::StatusOr<service::RegisterDatasetResponse> {
    if (refusals-- > 0) return absl::UnavailableError("connection refused");
    service::RegisterDatasetResponse r;
    r.set_dataset_id("abc");
    return r;
  };
  FakeDispatcherRpc* fake = rpc.get();
  JobSession session(FastOptions(), std::move(rpc));
  REQUIRE(session.Open(pipeline::PipelineDef(), JobRequest()).ok());
  CHECK(fake->calls() == std::vector<std::string>{"RegisterDataset", "RegisterDataset", "RegisterDataset",
                                                  "GetOrCreateJob"});
  // The first attempt fails fast; retries wait for the channel to connect.
  CHECK(fake->wait_for_ready() == std::vector<bool>{false, true, true, false});
  CHECK(fake->job_requests().at(0).spec().dataset_id() == "abc");
  CHECK(session.dataset_id() == "abc");
  CHECK(session.job_client_id() == 1);
}

TEST_CASE("client_job_session: Open's errors name the method and the dispatcher") {
  auto rpc = std::make_unique<FakeDispatcherRpc>();
  FakeDispatcherRpc* fake = rpc.get();
  SECTION("the dispatcher's answer is not retried") {
    fake->get_or_create_job = [](const service::GetOrCreateJobRequest&, const CallOptions&)
        -> absl::StatusOr<service::GetOrCreateJobResponse> {
      return absl::FailedPreconditionError("job 'train' exists with sharding OFF, request has DYNAMIC");
    };
    JobSession session(FastOptions(), std::move(rpc));
    const absl::Status s = session.Open(std::nullopt, JobRequest("d"));
    CHECK(s.code() == absl::StatusCode::kFailedPrecondition);
    CHECK(s.message() ==
          "GetOrCreateJob at dispatcher dispatcher:5000: job 'train' exists with sharding OFF, request has DYNAMIC");
    CHECK(fake->calls().size() == 1);
  }
  SECTION("an unreachable dispatcher is given up on after create_timeout") {
    fake->get_or_create_job = [](const service::GetOrCreateJobRequest&, const CallOptions&)
        -> absl::StatusOr<service::GetOrCreateJobResponse> { return absl::UnavailableError("connection refused"); };
    auto o = FastOptions();
    o.create_timeout = absl::Milliseconds(20);
    JobSession session(o, std::move(rpc));
    const absl::Status s = session.Open(std::nullopt, JobRequest("d"));
    CHECK(s.code() == absl::StatusCode::kUnavailable);
    CHECK_THAT(std::string(s.message()), Catch::Contains("gave up after create_timeout 20ms"));
  }
  SECTION("a dataset_id that contradicts the registered pipeline") {
    JobSession session(FastOptions(), std::move(rpc));
    const absl::Status s = session.Open(pipeline::PipelineDef(), JobRequest("other"));
    CHECK(s.code() == absl::StatusCode::kFailedPrecondition);
    CHECK_THAT(std::string(s.message()), Catch::Contains("options.dataset_id 'other' differs"));
  }
}

TEST_CASE("client_job_session: heartbeats carry the listener's fields, failures are retried, NOT_FOUND ends them") {
  auto rpc = std::make_unique<FakeDispatcherRpc>();
  FakeDispatcherRpc* fake = rpc.get();
  std::atomic<int> calls{0};
  fake->client_heartbeat = [&](const service::ClientHeartbeatRequest&, const CallOptions&)
      -> absl::StatusOr<service::ClientHeartbeatResponse> {
    const int n = ++calls;
    if (n == 2 || n == 3) return absl::UnavailableError("dispatcher restarting");
    if (n == 6) return absl::NotFoundError("job_client_id 1 is not known");
    return service::ClientHeartbeatResponse();
  };
  JobSession session(FastOptions(), std::move(rpc));
  REQUIRE(session.Open(std::nullopt, JobRequest("d")).ok());
  RecordingListener listener;
  session.Start(&listener);
  REQUIRE(WaitUntil([&] { return !listener.errors().empty(); }));
  session.Join();  // the loop ended by itself
  CHECK(listener.answers() == 3);
  CHECK(session.heartbeats_ok() == 3);
  CHECK(session.heartbeat_failures() == 3);
  const std::vector<absl::Status> errors = listener.errors();
  REQUIRE(errors.size() == 1);
  CHECK(errors[0].code() == absl::StatusCode::kNotFound);
  CHECK(errors[0].message() ==
        "ClientHeartbeat for job_client_id 1 at dispatcher dispatcher:5000: job_client_id 1 is not known");
  const auto sent = fake->heartbeats();
  REQUIRE(sent.size() == 6);
  CHECK(sent[0].job_client_id() == 1);
  CHECK(sent[0].current_round() == 42);
  // After a failure the next heartbeat waits for the channel; after a success it does not.
  const std::vector<bool> wfr = fake->wait_for_ready();  // GetOrCreateJob, then the heartbeats
  CHECK(std::vector<bool>(wfr.begin() + 1, wfr.end()) == std::vector<bool>{false, false, true, true, false, false});
}

TEST_CASE("client_job_session: Cancel stops the loop, Release sends the final heartbeat and releases") {
  auto rpc = std::make_unique<FakeDispatcherRpc>();
  FakeDispatcherRpc* fake = rpc.get();
  JobSession session(FastOptions(), std::move(rpc));
  REQUIRE(session.Open(std::nullopt, JobRequest("d")).ok());
  RecordingListener listener;
  session.Start(&listener);
  REQUIRE(WaitUntil([&] { return listener.answers() >= 2; }));
  session.Cancel();
  session.Join();
  const size_t before = fake->heartbeats().size();
  service::ClientHeartbeatRequest last;
  last.mutable_metrics()->set_elements_total(17);
  session.Release(last);
  const auto sent = fake->heartbeats();
  REQUIRE(sent.size() == before + 1);
  CHECK(sent.back().metrics().elements_total() == 17);
  CHECK(sent.back().job_client_id() == 1);
  CHECK(fake->calls().back() == "ReleaseJobClient");
  CHECK(listener.errors().empty());
}

TEST_CASE("client_job_session: a dispatcher unreachable for dispatcher_timeout is reported after each failure") {
  auto rpc = std::make_unique<FakeDispatcherRpc>();
  FakeDispatcherRpc* fake = rpc.get();
  std::atomic<bool> down{false};
  fake->client_heartbeat = [&](const service::ClientHeartbeatRequest&, const CallOptions&)
      -> absl::StatusOr<service::ClientHeartbeatResponse> {
    if (down) return absl::UnavailableError("connection refused");
    return service::ClientHeartbeatResponse();
  };
  auto o = FastOptions();
  o.dispatcher_timeout = absl::Milliseconds(50);
  JobSession session(o, std::move(rpc));
  REQUIRE(session.Open(std::nullopt, JobRequest("d")).ok());
  RecordingListener listener;
  session.Start(&listener);
  REQUIRE(WaitUntil([&] { return listener.answers() >= 1; }));
  down = true;
  const absl::Time went_down = absl::Now();
  REQUIRE(WaitUntil([&] { return listener.unreachable().size() >= 2; }));
  const auto reports = listener.unreachable();
  CHECK(reports[0].first >= absl::Milliseconds(50));
  CHECK(reports[0].first <= absl::Now() - went_down + absl::Milliseconds(50));  // counted from the last answer
  CHECK(reports[0].second.code() == absl::StatusCode::kUnavailable);
  CHECK(reports[1].first >= reports[0].first);
  CHECK(listener.errors().empty());  // an absence is not an error by itself: the listener decides
  // The dispatcher is back: no more reports.
  down = false;
  const size_t answers = listener.answers();
  REQUIRE(WaitUntil([&] { return listener.answers() > answers + 1; }));
  const size_t after = listener.unreachable().size();
  REQUIRE(WaitUntil([&] { return listener.answers() > answers + 3; }));
  CHECK(listener.unreachable().size() == after);
}

}  // namespace
}  // namespace sluice::client
