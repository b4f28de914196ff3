#include "dataplane/dispatcher/delivery_tracker.h"

#include <catch2/catch.hpp>

#include <optional>
#include <string>
#include <vector>

#include "dataplane/dispatcher/dispatcher_test_util.h"

namespace sluice::dispatcher {
namespace {

bool Contains(const absl::Status& s, const std::string& text) {
  return std::string(s.message()).find(text) != std::string::npos;
}

double Counter(prometheus::Registry& registry, const std::string& name) {
  double total = 0;
  for (const auto& family : registry.Collect()) {
    if (family.name != name) continue;
    for (const auto& m : family.metric) total += m.counter.value;
  }
  return total;
}

TEST_CASE("DeliveryTracker: produced minus received over the clients is the loss - counts only grow") {
  DeliveryTracker d;
  d.WorkerReported(7, 100);
  d.ClientReported(1, 7, 30);
  d.ClientReported(2, 7, 50);
  d.ClientReported(2, 7, 40);  // an older report: ignored
  d.WorkerReported(7, 90);     // likewise
  CHECK(d.Received(7) == 80);
  CHECK(d.Received(8) == 0);
  CHECK(d.TaskLost(/*job_id=*/3, 7) == 20);
  CHECK(d.JobLost(3) == 20);
  CHECK(d.Received(7) == 0);  // forgotten
  CHECK(d.TaskLost(3, 7) == 0);
  // Received beyond the last produced report (the worker produced more after it): no negative loss.
  d.WorkerReported(9, 10);
  d.ClientReported(1, 9, 12);
  CHECK(d.TaskLost(3, 9) == 0);
  CHECK(d.JobLost(3) == 20);
  d.WorkerReported(10, 5);
  d.Prune([](int64_t) { return false; }, [](int64_t j) { return j != 3; });
  CHECK(d.JobLost(3) == 0);
  CHECK(d.TaskLost(3, 10) == 0);
}

TEST_CASE("CheckReceivedReport: malformed entries are named") {
  service::ClientHeartbeatRequest req;
  CHECK(CheckReceivedReport(req).ok());
  auto* r = req.add_received();
  r->set_task_id(0);
  CHECK(Contains(CheckReceivedReport(req), "received[0].task_id is 0"));
  r->set_task_id(4);
  r->set_elements(-2);
  CHECK(Contains(CheckReceivedReport(req), "received[0].elements is -2"));
  r->set_elements(2);
  auto* again = req.add_received();
  again->set_task_id(4);
  CHECK(Contains(CheckReceivedReport(req), "received[1].task_id 4 is listed twice"));
  CHECK(CheckReceivedReport(req).code() == absl::StatusCode::kInvalidArgument);
}

// A worker holding one task of a dynamic job, and one client of the job.
struct Setup {
  testing::ServiceHarness h{""};
  int64_t task = 0;
  int64_t client = 0;
  Setup() {
    service::RegisterDatasetRequest reg;
    *reg.mutable_pipeline() = testing::RangePipeline(1000, 10);
    service::RegisterDatasetResponse reg_resp;
    REQUIRE(h.service().RegisterDataset(reg, &reg_resp).ok());
    Worker({});
    service::GetOrCreateJobRequest job;
    job.mutable_spec()->set_dataset_id(reg_resp.dataset_id());
    job.mutable_spec()->set_sharding(service::SHARDING_DYNAMIC);
    job.mutable_spec()->set_job_name("train");
    service::GetOrCreateJobResponse job_resp;
    REQUIRE(h.service().GetOrCreateJob(job, &job_resp).ok());
    client = job_resp.job_client_id();
    auto resp = Worker({});
    REQUIRE(resp.new_tasks_size() == 1);
    task = resp.new_tasks(0).task_id();
  }
  // Registers a second worker; returns its task of the job.
  int64_t OtherWorker(const std::string& address) {
    service::WorkerHeartbeatRequest hb;
    hb.set_worker_address(address);
    hb.set_placement(service::PLACEMENT_REMOTE);
    service::WorkerHeartbeatResponse resp;
    for (int i = 0; i < 2 && resp.new_tasks_size() == 0; ++i) REQUIRE(h.service().WorkerHeartbeat(hb, &resp).ok());
    REQUIRE(resp.new_tasks_size() == 1);
    return resp.new_tasks(0).task_id();
  }
  service::WorkerHeartbeatResponse Worker(std::optional<int64_t> produced, bool finished = false) {
    service::WorkerHeartbeatRequest req;
    req.set_worker_address("hostA:1");
    req.set_placement(service::PLACEMENT_REMOTE);
    if (produced.has_value()) {
      auto* p = req.add_tasks();
      p->set_task_id(task);
      p->set_elements_produced(*produced);
      p->set_finished(finished);
    }
    service::WorkerHeartbeatResponse resp;
    absl::Status s = h.service().WorkerHeartbeat(req, &resp);
    INFO(s.ToString());
    REQUIRE(s.ok());
    return resp;
  }
  absl::Status Client(int64_t received, service::ClientHeartbeatResponse* resp) {
    service::ClientHeartbeatRequest req;
    req.set_job_client_id(client);
    auto* r = req.add_received();
    r->set_task_id(task);
    r->set_elements(received);
    return h.service().ClientHeartbeat(req, resp);
  }
};

TEST_CASE("dispatcher: clients' receipts go back to the worker - a worker timing out counts its undelivered elements") {
  Setup s;
  s.Worker(40);
  service::ClientHeartbeatResponse c;
  REQUIRE(s.Client(25, &c).ok());
  CHECK(c.elements_lost_estimate() == 0);
  const service::WorkerHeartbeatResponse w = s.Worker(40);
  REQUIRE(w.received_size() == 1);
  CHECK(w.received(0).task_id() == s.task);
  CHECK(w.received(0).elements() == 25);
  // The worker dies: after the timeout its 15 undelivered elements are the estimate.
  s.h.clock().Advance(absl::Seconds(6));
  REQUIRE(s.Client(25, &c).ok());  // keeps the client alive
  s.h.service().Tick();
  CHECK(Counter(s.h.registry(), "sluice_dispatcher_elements_lost_estimate_total") == 15);
  REQUIRE(s.Client(25, &c).ok());
  CHECK(c.elements_lost_estimate() == 15);
  // A report naming a task of no job of this client is ignored; a malformed one refused.
  service::ClientHeartbeatRequest other;
  other.set_job_client_id(s.client);
  other.add_received()->set_task_id(999);
  CHECK(s.h.service().ClientHeartbeat(other, &c).ok());
  other.mutable_received(0)->set_elements(-1);
  CHECK(s.h.service().ClientHeartbeat(other, &c).code() == absl::StatusCode::kInvalidArgument);
}

const service::WorkerInfo& InfoOf(const service::GetStateResponse& state, const std::string& address) {
  for (const auto& w : state.workers()) {
    if (w.address() == address) return w;
  }
  FAIL("worker " << address << " not listed");
  return state.workers(0);
}

TEST_CASE("dispatcher: a draining worker hands its input back and is drained once its task ended and clients received all") {
  Setup s;
  s.Worker(0);
  struct Call {
    int max = 0;
    std::vector<uint64_t> started, returned;
    std::optional<std::pair<uint64_t, int64_t>> released;  // split, position
  };
  auto splits = [&](const Call& call) {
    service::GetSplitsRequest req;
    req.set_task_id(s.task);
    req.set_worker_address("hostA:1");
    req.set_max_splits(call.max);
    for (uint64_t i : call.started) req.add_started_split_indices(i);
    for (uint64_t i : call.returned) req.add_returned_split_indices(i);
    if (call.released) {
      auto* p = req.add_progress();
      p->set_index(call.released->first);
      p->set_lease_end(call.released->second);
      p->set_released(true);
    }
    service::GetSplitsResponse resp;
    absl::Status st = s.h.service().GetSplits(req, &resp);
    INFO(st.ToString());
    REQUIRE(st.ok());
    return resp;
  };
  auto state = [&] {
    service::GetStateResponse resp;
    REQUIRE(s.h.service().GetState({}, &resp).ok());
    return InfoOf(resp, "hostA:1");
  };
  s.OtherWorker("hostB:1");  // the job goes on after this worker's task ended
  const service::GetSplitsResponse first = splits({3, {}, {}, {}});
  REQUIRE(first.splits_size() == 3);  // fetched ahead: splits 0, 1 and 2
  CHECK(!first.release());
  REQUIRE(splits({0, {0}, {}, {}}).splits_size() == 0);  // split 0 started
  // Not draining: no verdict, and the worker is not told to hand anything back.
  CHECK(!state().drained());
  CHECK(state().drain_blocker().empty());
  CHECK(!s.Worker(5).draining());

  service::DrainWorkersRequest drain;
  drain.add_worker_addresses("hostA:1");
  service::DrainWorkersResponse drained;
  REQUIRE(s.h.service().DrainWorkers(drain, &drained).ok());
  CHECK(s.Worker(5).draining());  // the heartbeat answer says so
  CHECK(!state().drained());
  CHECK(state().splits_held() == 3);  // 1 and 2 handed out, 0 being read
  CHECK(state().drain_blocker() == "3 splits not finished");

  // The worker hands back 1 and 2 unstarted, and split 0 at its reader's position 4.
  const service::GetSplitsResponse back = splits({0, {}, {1, 2}, {}});
  CHECK(back.release());
  CHECK(back.splits_size() == 0);
  CHECK(state().splits_held() == 1);
  splits({0, {}, {}, std::make_pair(uint64_t{0}, int64_t{4})});
  CHECK(state().splits_held() == 0);
  CHECK(state().drain_blocker() ==
        "1 task handed its input back and still producing (its pipeline flushes what it read, its buffer waits for clients)");

  // Its task ended (pipeline flushed, buffer read): 20 produced, 15 received so far.
  s.Worker(20, /*finished=*/true);
  service::ClientHeartbeatResponse c;
  REQUIRE(s.Client(15, &c).ok());
  CHECK(!state().drained());
  CHECK(state().undelivered_elements() == 5);
  CHECK(state().drain_blocker() == "5 elements produced and not yet received by clients");
  REQUIRE(s.Client(20, &c).ok());
  CHECK(state().undelivered_elements() == 0);
  CHECK(!state().drained());
  CHECK(state().drain_blocker() == "1 of 2 heartbeats since its last split report");
  s.Worker(20, true);
  CHECK(state().drained());
  CHECK(state().drain_blocker().empty());
  // More produced than received again (the worker produced after all): not drained.
  s.Worker(21, true);
  CHECK(!state().drained());
  CHECK(state().undelivered_elements() == 1);
}

TEST_CASE("dispatcher: what a drained worker handed back is read by another, from the exact position") {
  Setup s;
  s.Worker(0);
  service::GetSplitsRequest req;
  req.set_task_id(s.task);
  req.set_worker_address("hostA:1");
  req.set_max_splits(2);
  service::GetSplitsResponse resp;
  REQUIRE(s.h.service().GetSplits(req, &resp).ok());
  REQUIRE(resp.splits_size() == 2);
  req.set_max_splits(0);
  req.add_started_split_indices(resp.splits(0).index());
  REQUIRE(s.h.service().GetSplits(req, &resp).ok());
  service::DrainWorkersRequest drain;
  drain.add_worker_addresses("hostA:1");
  service::DrainWorkersResponse drained;
  REQUIRE(s.h.service().DrainWorkers(drain, &drained).ok());
  req.clear_started_split_indices();
  req.add_returned_split_indices(1);
  auto* p = req.add_progress();
  p->set_index(0);
  p->set_lease_end(7);
  p->set_released(true);
  REQUIRE(s.h.service().GetSplits(req, &resp).ok());
  // A malformed release is refused, naming the field.
  service::GetSplitsRequest bad = req;
  bad.mutable_progress(0)->set_lease_end(-1);
  const absl::Status refused = s.h.service().GetSplits(bad, &resp);
  CHECK(refused.code() == absl::StatusCode::kInvalidArgument);
  CHECK(std::string(refused.message()).find("progress[0] releases split 0") != std::string::npos);
  bad.clear_progress();
  bad.add_returned_split_indices(1u << 30);
  CHECK(s.h.service().GetSplits(bad, &resp).code() == absl::StatusCode::kInvalidArgument);
  // A second worker joins: its task gets split 0 from element 7 on, then split 1 whole.
  service::GetSplitsRequest other;
  other.set_task_id(s.OtherWorker("hostB:1"));
  other.set_worker_address("hostB:1");
  other.set_max_splits(2);
  resp.Clear();
  REQUIRE(s.h.service().GetSplits(other, &resp).ok());
  REQUIRE(resp.splits_size() == 2);
  CHECK(resp.splits(0).index() == 0);
  CHECK(resp.splits(0).skip() == 7);
  CHECK(resp.splits(1).index() == 1);
  CHECK(resp.splits(1).skip() == 0);
  CHECK(!resp.release());
}

TEST_CASE("dispatcher: a worker deregistering cleanly is not counted as a loss") {
  Setup s;
  s.Worker(40);
  service::ClientHeartbeatResponse c;
  REQUIRE(s.Client(25, &c).ok());
  service::WorkerDeregisterRequest dereg;
  dereg.set_worker_address("hostA:1");
  service::WorkerDeregisterResponse dereg_resp;
  REQUIRE(s.h.service().WorkerDeregister(dereg, &dereg_resp).ok());
  CHECK(Counter(s.h.registry(), "sluice_dispatcher_elements_lost_estimate_total") == 0);
  REQUIRE(s.Client(25, &c).ok());
  CHECK(c.elements_lost_estimate() == 0);
}

}  // namespace
}  // namespace sluice::dispatcher
