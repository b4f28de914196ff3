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
  service::WorkerHeartbeatResponse Worker(std::optional<int64_t> produced) {
    service::WorkerHeartbeatRequest req;
    req.set_worker_address("hostA:1");
    req.set_placement(service::PLACEMENT_REMOTE);
    if (produced.has_value()) {
      auto* p = req.add_tasks();
      p->set_task_id(task);
      p->set_elements_produced(*produced);
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

TEST_CASE("dispatcher: a draining worker is drained once it holds no split and clients received all it produced") {
  Setup s;
  s.Worker(0);
  auto splits = [&](int max, std::vector<uint64_t> started, std::vector<uint64_t> finished) {
    service::GetSplitsRequest req;
    req.set_task_id(s.task);
    req.set_worker_address("hostA:1");
    req.set_max_splits(max);
    for (uint64_t i : started) req.add_started_split_indices(i);
    for (uint64_t i : finished) {
      auto* p = req.add_progress();
      p->set_index(i);
      p->set_lease_end(-1);
      p->set_finished(true);
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
  REQUIRE(splits(2, {}, {}).splits_size() == 2);  // fetched ahead: splits 0 and 1
  // Not draining: no verdict.
  CHECK(!state().drained());
  CHECK(state().drain_blocker().empty());

  service::DrainWorkersRequest drain;
  drain.add_worker_addresses("hostA:1");
  service::DrainWorkersResponse drained;
  REQUIRE(s.h.service().DrainWorkers(drain, &drained).ok());
  CHECK(!state().drained());
  CHECK(state().splits_held() == 2);  // handed out, not started: still the worker's to read
  CHECK(state().drain_blocker() == "2 splits not finished");

  REQUIRE(splits(2, {0, 1}, {}).splits_size() == 0);  // both started, none finished; no new split
  CHECK(state().splits_held() == 2);
  REQUIRE(splits(2, {}, {0}).splits_size() == 0);
  CHECK(state().splits_held() == 1);
  REQUIRE(splits(2, {}, {1}).splits_size() == 0);
  CHECK(state().splits_held() == 0);

  // Every split finished; 20 produced, 15 received: 5 in buffers or in the transport.
  s.Worker(20);
  service::ClientHeartbeatResponse c;
  REQUIRE(s.Client(15, &c).ok());
  CHECK(!state().drained());
  CHECK(state().undelivered_elements() == 5);
  CHECK(state().drain_blocker() == "5 elements produced and not yet received by clients");

  // All received, but only one heartbeat since the last split report: its count may be stale.
  REQUIRE(s.Client(20, &c).ok());
  CHECK(state().undelivered_elements() == 0);
  CHECK(!state().drained());
  CHECK(state().drain_blocker() == "1 of 2 heartbeats since its last split report");
  s.Worker(20);
  CHECK(state().drained());
  CHECK(state().drain_blocker().empty());

  // A GetSplits carrying no acknowledgement or progress (polling) leaves the verdict standing.
  splits(0, {}, {});
  CHECK(state().drained());
  // More produced than received again (the worker produced after all): not drained.
  s.Worker(21);
  CHECK(!state().drained());
  CHECK(state().undelivered_elements() == 1);
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
