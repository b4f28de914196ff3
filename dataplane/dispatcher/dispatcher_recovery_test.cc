// The service over a real journal: restarts rebuild the same state, compaction keeps it equal while
// bounding the journal, replay after compaction reads few records, and journal failures surface.
#include <catch2/catch.hpp>

#include <filesystem>
#include <set>

#include "common/log.h"
#include "dataplane/dispatcher/dispatcher_impl.h"
#include "dataplane/dispatcher/dispatcher_test_util.h"
#include "testing/test_util.h"

namespace sluice::dispatcher {
namespace {

namespace fs = std::filesystem;
using sluice::testing::TempDir;
using testing::RangePipeline;
using testing::ServiceHarness;

const bool kQuiet = [] {
  log::SetMinLevel(log::Level::kWarning);
  return true;
}();

// Two workers reading a dynamic job forever; each call acknowledges the splits of the previous one.
class EpochDriver {
 public:
  EpochDriver(DispatcherService& svc, int num_splits) : svc_(svc) {
    service::RegisterDatasetRequest reg;
    *reg.mutable_pipeline() = RangePipeline(num_splits, 1);
    service::RegisterDatasetResponse reg_resp;
    REQUIRE(svc_.RegisterDataset(reg, &reg_resp).ok());
    service::GetOrCreateJobRequest job;
    job.mutable_spec()->set_dataset_id(reg_resp.dataset_id());
    job.mutable_spec()->set_sharding(service::SHARDING_DYNAMIC);
    job.mutable_spec()->set_num_epochs(-1);
    job.mutable_spec()->set_job_name("forever");
    service::GetOrCreateJobResponse job_resp;
    REQUIRE(svc_.GetOrCreateJob(job, &job_resp).ok());
    for (const std::string address : {"w1:1", "w2:1"}) {
      service::WorkerHeartbeatRequest hb;
      hb.set_worker_address(address);
      service::WorkerHeartbeatResponse hb_resp;
      REQUIRE(svc_.WorkerHeartbeat(hb, &hb_resp).ok());
      REQUIRE(hb_resp.new_tasks_size() == 1);
      tasks_.push_back(TaskState{hb_resp.new_tasks(0).task_id(), 0, {}});
    }
  }

  // One GetSplits per task; returns the number of splits handed out.
  int Step() {
    int handed = 0;
    for (TaskState& t : tasks_) {
      service::GetSplitsRequest req;
      req.set_task_id(t.id);
      req.set_max_splits(4);
      req.set_epoch(t.epoch);
      for (uint64_t i : t.held) req.add_started_split_indices(i);
      service::GetSplitsResponse resp;
      REQUIRE(svc_.GetSplits(req, &resp).ok());
      t.held.clear();
      for (const auto& s : resp.splits()) {
        t.held.push_back(s.index());
        // Within one epoch no split is handed out twice.
        REQUIRE(seen_.insert({t.epoch, s.index()}).second);
      }
      handed += resp.splits_size();
      if (resp.end_of_splits()) ++t.epoch;
    }
    return handed;
  }
  int64_t min_epoch() const { return std::min(tasks_[0].epoch, tasks_[1].epoch); }

 private:
  struct TaskState {
    int64_t id;
    int64_t epoch;
    std::vector<uint64_t> held;
  };
  DispatcherService& svc_;
  std::vector<TaskState> tasks_;
  std::set<std::pair<int64_t, uint64_t>> seen_;
};

TEST_CASE("a restart replays the journal into the same state") {
  TempDir dir;
  ServiceHarness h(dir.path().string());
  REQUIRE(h.start_status().ok());
  EpochDriver driver(h.service(), 10);
  for (int i = 0; i < 7; ++i) driver.Step();
  const std::string before = h.service().StateDebugString();
  h.Restart();
  REQUIRE(h.start_status().ok());
  CHECK(h.recovered().updates.size() > 20);
  CHECK(h.service().StateDebugString() == before);
}

TEST_CASE("compaction keeps the state equal, bounds the journal and shortens replay") {
  TempDir plain_dir, compacted_dir;
  DispatcherOptions compacting;
  compacting.snapshot_every = 100;
  DispatcherOptions never;
  never.snapshot_every = 0;
  ServiceHarness plain(plain_dir.path().string(), never);
  ServiceHarness compacted(compacted_dir.path().string(), compacting);
  REQUIRE(plain.start_status().ok());
  REQUIRE(compacted.start_status().ok());
  EpochDriver a(plain.service(), 20);
  EpochDriver b(compacted.service(), 20);
  int64_t max_compacted_bytes = 0;
  for (int step = 0; step < 400; ++step) {
    const int handed = a.Step();
    REQUIRE(b.Step() == handed);
    compacted.service().Tick();  // compacts when due
    max_compacted_bytes = std::max(max_compacted_bytes, compacted.journal()->bytes());
  }
  REQUIRE(a.min_epoch() >= 20);
  const std::string state = plain.service().StateDebugString();
  CHECK(compacted.service().StateDebugString() == state);
  CHECK(compacted.journal()->snapshots_written() >= 10);
  const int64_t plain_bytes = plain.journal()->bytes();
  INFO("plain " << plain_bytes << " bytes, compacted at most " << max_compacted_bytes);
  CHECK(max_compacted_bytes * 5 < plain_bytes);

  plain.Restart();
  compacted.Restart();
  REQUIRE(plain.start_status().ok());
  REQUIRE(compacted.start_status().ok());
  CHECK(plain.service().StateDebugString() == state);
  CHECK(compacted.service().StateDebugString() == state);
  const int64_t plain_records = plain.recovered().records_read;
  const int64_t compacted_records = compacted.recovered().records_read;
  INFO("replay read " << plain_records << " records without compaction, " << compacted_records << " with");
  CHECK(plain_records > 1000);
  CHECK(compacted_records <= 100);
  REQUIRE(compacted.recovered().snapshot.has_value());
  CHECK(compacted.recovered().snapshot->updates_size() < 20);
}

TEST_CASE("a torn tail drops only the last update - its splits are handed out again") {
  TempDir dir;
  ServiceHarness h(dir.path().string());
  REQUIRE(h.start_status().ok());
  service::RegisterDatasetRequest reg;
  *reg.mutable_pipeline() = RangePipeline(10, 1);
  service::RegisterDatasetResponse reg_resp;
  REQUIRE(h.service().RegisterDataset(reg, &reg_resp).ok());
  service::WorkerHeartbeatRequest hb;
  hb.set_worker_address("w1:1");
  service::WorkerHeartbeatResponse hb_resp;
  REQUIRE(h.service().WorkerHeartbeat(hb, &hb_resp).ok());
  service::GetOrCreateJobRequest job;
  job.mutable_spec()->set_dataset_id(reg_resp.dataset_id());
  job.mutable_spec()->set_sharding(service::SHARDING_DYNAMIC);
  service::GetOrCreateJobResponse job_resp;
  REQUIRE(h.service().GetOrCreateJob(job, &job_resp).ok());
  REQUIRE(h.service().WorkerHeartbeat(hb, &hb_resp).ok());
  REQUIRE(hb_resp.new_tasks_size() == 1);
  service::GetSplitsRequest gs;
  gs.set_task_id(hb_resp.new_tasks(0).task_id());
  gs.set_max_splits(3);
  service::GetSplitsResponse first;
  REQUIRE(h.service().GetSplits(gs, &first).ok());
  service::GetSplitsResponse second;
  REQUIRE(h.service().GetSplits(gs, &second).ok());
  REQUIRE(second.splits(0).index() == 3);
  h.Restart();  // closes the journal cleanly; now tear its last record
  std::string segment;
  for (const auto& e : fs::directory_iterator(dir.path())) {
    if (e.path().filename().string().rfind("journal-", 0) == 0) segment = std::max(segment, e.path().string());
  }
  fs::resize_file(segment, fs::file_size(segment) - 5);
  h.Restart();
  REQUIRE(h.start_status().ok());
  CHECK(h.recovered().torn_file == segment);
  CHECK(h.recovered().dropped_bytes > 0);
  service::GetSplitsResponse again;
  REQUIRE(h.service().GetSplits(gs, &again).ok());
  CHECK(again.splits(0).index() == 3);  // the torn assignment never happened
}

TEST_CASE("corruption in the middle of the journal stops the start with the file and offset") {
  TempDir dir;
  {
    ServiceHarness h(dir.path().string());
    EpochDriver driver(h.service(), 10);
    driver.Step();
  }
  std::string segment;
  for (const auto& e : fs::directory_iterator(dir.path())) segment = e.path().string();
  std::string data = sluice::testing::ReadFile(segment);
  data[40] ^= 0x20;
  sluice::testing::WriteFile(segment, data);
  ServiceHarness h(dir.path().string());
  CHECK(h.start_status().code() == absl::StatusCode::kDataLoss);
  CHECK(std::string(h.start_status().message()).find(segment) != std::string::npos);
  CHECK(std::string(h.start_status().message()).find("offset") != std::string::npos);
}

TEST_CASE("when the journal cannot be written, changes fail with Unavailable and nothing hangs") {
  TempDir dir;
  const std::string journal_dir = dir.File("journal");
  ServiceHarness h(journal_dir);
  REQUIRE(h.start_status().ok());
  fs::remove_all(journal_dir);
  service::RegisterDatasetRequest reg;
  *reg.mutable_pipeline() = RangePipeline(10, 1);
  service::RegisterDatasetResponse resp;
  absl::Status s = h.service().RegisterDataset(reg, &resp);
  CHECK(s.code() == absl::StatusCode::kUnavailable);
  CHECK(std::string(s.message()).find("journal") != std::string::npos);
  service::WorkerHeartbeatRequest hb;
  hb.set_worker_address("w1:1");
  service::WorkerHeartbeatResponse hb_resp;
  s = h.service().WorkerHeartbeat(hb, &hb_resp);
  CHECK(s.code() == absl::StatusCode::kUnavailable);
  CHECK(std::string(s.message()).find("accepts no changes until restarted") != std::string::npos);
}

}  // namespace
}  // namespace sluice::dispatcher
