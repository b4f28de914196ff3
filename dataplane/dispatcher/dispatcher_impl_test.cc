#include "dataplane/dispatcher/dispatcher_impl.h"

#include <catch2/catch.hpp>

#include <cmath>
#include <filesystem>
#include <limits>
#include <set>

#include "absl/strings/str_cat.h"
#include "dataplane/dispatcher/dispatcher_test_util.h"
#include "dataplane/pipeline/spec_parser.h"
#include "common/log.h"
#include "prometheus/text_serializer.h"
#include "testing/test_util.h"

namespace sluice::dispatcher {
namespace {

using sluice::testing::TempDir;
using testing::RangePipeline;
using testing::ServiceHarness;

const bool kQuiet = [] {
  log::SetMinLevel(log::Level::kWarning);
  return true;
}();

bool Contains(const absl::Status& s, const std::string& text) {
  return std::string(s.message()).find(text) != std::string::npos;
}

// A thin driver that plays clients and workers against a DispatcherService.
struct Driver {
  DispatcherService& svc;

  std::string Register(const pipeline::PipelineDef& def, int64_t* num_splits = nullptr) {
    service::RegisterDatasetRequest req;
    *req.mutable_pipeline() = def;
    service::RegisterDatasetResponse resp;
    absl::Status s = svc.RegisterDataset(req, &resp);
    INFO(s.ToString());
    REQUIRE(s.ok());
    if (num_splits) *num_splits = resp.num_splits();
    return resp.dataset_id();
  }
  absl::Status Job(const std::string& dataset, service::ShardingPolicy sharding, const std::string& name,
                   service::GetOrCreateJobResponse* resp, int64_t num_epochs = 1,
                   service::TargetWorkers target = service::TARGET_WORKERS_ANY, const std::string& host = "hostC",
                   int32_t num_consumers = 0, int32_t consumer_index = 0) {
    service::GetOrCreateJobRequest req;
    req.set_consumer_index(consumer_index);
    req.mutable_spec()->set_dataset_id(dataset);
    req.mutable_spec()->set_sharding(sharding);
    req.mutable_spec()->set_job_name(name);
    req.mutable_spec()->set_num_epochs(num_epochs);
    req.mutable_spec()->set_target_workers(target);
    req.mutable_spec()->set_num_consumers(num_consumers);
    req.set_client_host(host);
    return svc.GetOrCreateJob(req, resp);
  }
  service::GetOrCreateJobResponse MustJob(const std::string& dataset, service::ShardingPolicy sharding,
                                          const std::string& name = "", int64_t num_epochs = 1) {
    service::GetOrCreateJobResponse resp;
    absl::Status s = Job(dataset, sharding, name, &resp, num_epochs);
    INFO(s.ToString());
    REQUIRE(s.ok());
    return resp;
  }
  // Heartbeat listing `tasks` (task id -> finished) and started splits per task.
  service::WorkerHeartbeatResponse Heartbeat(const std::string& address, std::vector<int64_t> tasks = {},
                                             bool draining = false, std::set<int64_t> finished = {},
                                             std::map<int64_t, std::vector<uint64_t>> started = {}) {
    service::WorkerHeartbeatRequest req;
    req.set_worker_address(address);
    req.set_worker_host(address.substr(0, address.find(':')));
    req.set_placement(service::PLACEMENT_REMOTE);
    req.set_draining(draining);
    for (int64_t t : tasks) {
      auto* p = req.add_tasks();
      p->set_task_id(t);
      p->set_finished(finished.count(t) > 0);
      for (uint64_t i : started[t]) p->add_started_split_indices(i);
    }
    service::WorkerHeartbeatResponse resp;
    absl::Status s = svc.WorkerHeartbeat(req, &resp);
    INFO(s.ToString());
    REQUIRE(s.ok());
    return resp;
  }
  // Registers the worker and returns its task for `job_id` (0 if none).
  int64_t TaskOf(const std::string& address, int64_t job_id) {
    auto resp = Heartbeat(address);
    for (const auto& t : resp.new_tasks()) {
      if (t.job_id() == job_id) return t.task_id();
    }
    return 0;
  }
  absl::Status Splits(int64_t task, int max, std::vector<uint64_t> started, int64_t epoch,
                      service::GetSplitsResponse* resp, const std::string& worker = "") {
    service::GetSplitsRequest req;
    req.set_task_id(task);
    req.set_worker_address(worker);
    req.set_max_splits(max);
    req.set_epoch(epoch);
    for (auto i : started) req.add_started_split_indices(i);
    return svc.GetSplits(req, resp);
  }
  service::GetSplitsResponse MustSplits(int64_t task, int max, std::vector<uint64_t> started = {}, int64_t epoch = 0) {
    service::GetSplitsResponse resp;
    absl::Status s = Splits(task, max, std::move(started), epoch, &resp);
    INFO(s.ToString());
    REQUIRE(s.ok());
    return resp;
  }
  service::ClientHeartbeatResponse Client(int64_t client, int64_t round = 0, service::ClientMetrics metrics = {},
                                         int64_t acked_block_round = 0) {
    service::ClientHeartbeatRequest req;
    req.set_job_client_id(client);
    req.set_current_round(round);
    req.set_acked_block_round(acked_block_round);
    *req.mutable_metrics() = metrics;
    service::ClientHeartbeatResponse resp;
    absl::Status s = svc.ClientHeartbeat(req, &resp);
    INFO(s.ToString());
    REQUIRE(s.ok());
    return resp;
  }
  service::GetStateResponse State() {
    service::GetStateResponse resp;
    REQUIRE(svc.GetState({}, &resp).ok());
    return resp;
  }
  service::JobInfo JobInfo(int64_t job_id) {
    const service::GetStateResponse state = State();
    for (const auto& j : state.jobs()) {
      if (j.job_id() == job_id) return j;
    }
    FAIL("job " << job_id << " is not in GetState");
    return {};
  }
};

std::vector<uint64_t> Indices(const service::GetSplitsResponse& r) {
  std::vector<uint64_t> out;
  for (const auto& s : r.splits()) out.push_back(s.index());
  return out;
}

double MetricValue(prometheus::Registry& registry, const std::string& name, const std::string& label_value = "") {
  double total = 0;
  for (const auto& family : registry.Collect()) {
    if (family.name != name) continue;
    for (const auto& m : family.metric) {
      bool match = label_value.empty();
      for (const auto& l : m.label) match |= l.value == label_value;
      if (!match) continue;
      total += family.type == prometheus::MetricType::Counter ? m.counter.value : m.gauge.value;
    }
  }
  return total;
}

TEST_CASE("metrics: each unfinished job's workers by placement - a finished job's series go") {
  ServiceHarness h("");
  Driver d{h.service()};
  const std::string ds = d.Register(RangePipeline(100, 10));
  d.Heartbeat("w1:1");
  service::WorkerHeartbeatRequest local;
  local.set_worker_address("gpu:1");
  local.set_worker_host("gpu");
  local.set_placement(service::PLACEMENT_LOCAL);
  service::WorkerHeartbeatResponse ignored;
  REQUIRE(h.service().WorkerHeartbeat(local, &ignored).ok());
  auto job = d.MustJob(ds, service::SHARDING_OFF, "train");
  h.service().Tick();
  auto value = [&](const std::string& job_label, const std::string& placement) -> std::optional<double> {
    for (const auto& family : h.registry().Collect()) {
      if (family.name != "sluice_dispatcher_job_workers") continue;
      for (const auto& m : family.metric) {
        std::map<std::string, std::string> labels;
        for (const auto& l : m.label) labels[l.name] = l.value;
        if (labels["job"] == job_label && labels["placement"] == placement) return m.gauge.value;
      }
    }
    return std::nullopt;
  };
  CHECK(value("train", "local") == 1.0);
  CHECK(value("train", "remote") == 1.0);
  service::ReleaseJobClientRequest release;
  release.set_job_client_id(job.job_client_id());
  service::ReleaseJobClientResponse released;
  REQUIRE(h.service().ReleaseJobClient(release, &released).ok());
  h.clock().Advance(absl::Hours(1));  // past the job's grace without clients: it finishes
  d.Heartbeat("w1:1");
  REQUIRE(h.service().WorkerHeartbeat(local, &ignored).ok());
  h.service().Tick();
  h.service().Tick();
  CHECK(d.JobInfo(job.job_id()).finished());
  CHECK(!value("train", "local").has_value());
  CHECK(!value("train", "remote").has_value());
}

TEST_CASE("iterations: each run of a job name after the previous one finished is its next iteration") {
  TempDir dir;
  ServiceHarness h(dir.path().string());
  REQUIRE(h.start_status().ok());
  int64_t second_id = 0;
  {
    Driver d{h.service()};
    const std::string ds = d.Register(RangePipeline(100, 10));
    d.Heartbeat("w1:1");
    auto first = d.MustJob(ds, service::SHARDING_OFF, "train");
    CHECK(first.iteration() == 1);
    CHECK(d.MustJob(ds, service::SHARDING_OFF, "train").iteration() == 1);  // shared: same job
    CHECK(d.MustJob(ds, service::SHARDING_OFF, "").iteration() == 1);       // anonymous
    // The first run ends (its task finished); the name's next run is iteration 2.
    const int64_t t = d.TaskOf("w1:1", first.job_id());
    d.Heartbeat("w1:1", {t}, false, {t});
    CHECK(d.JobInfo(first.job_id()).finished());
    auto second = d.MustJob(ds, service::SHARDING_OFF, "train");
    CHECK(second.job_id() != first.job_id());
    CHECK(second.iteration() == 2);
    CHECK(d.JobInfo(second.job_id()).iteration() == 2);
    CHECK(d.JobInfo(first.job_id()).iteration() == 1);
    second_id = second.job_id();
  }
  // The iteration survives a restart (journal replay).
  h.Restart();
  REQUIRE(h.start_status().ok());
  Driver d{h.service()};
  CHECK(d.JobInfo(second_id).iteration() == 2);
}

TEST_CASE("iterations: a reader's k-th pass reads iteration k of the name, joined, created, or over") {
  TempDir dir;
  ServiceHarness h(dir.path().string());
  REQUIRE(h.start_status().ok());
  Driver d{h.service()};
  const std::string ds = d.Register(RangePipeline(100, 10));
  d.Heartbeat("w1:1");
  auto pass = [&](int64_t iteration, const std::string& name = "train") {
    service::GetOrCreateJobRequest req;
    req.mutable_spec()->set_dataset_id(ds);
    req.mutable_spec()->set_job_name(name);
    req.mutable_spec()->set_target_workers(service::TARGET_WORKERS_ANY);
    req.set_client_host("hostC");
    req.set_iteration(iteration);
    service::GetOrCreateJobResponse resp;
    const absl::Status s = h.service().GetOrCreateJob(req, &resp);
    return std::make_pair(s, resp);
  };
  auto finish = [&](int64_t job_id) {
    const int64_t t = d.TaskOf("w1:1", job_id);
    REQUIRE(t != 0);
    d.Heartbeat("w1:1", {t}, false, {t});
    REQUIRE(d.JobInfo(job_id).finished());
  };
  // Two readers, A and B, each looping over the dataset. Their first passes share iteration 1.
  auto [sa1, a1] = pass(1);
  auto [sb1, b1] = pass(1);
  REQUIRE(sa1.ok());
  REQUIRE(sb1.ok());
  CHECK(a1.iteration() == 1);
  CHECK(b1.job_id() == a1.job_id());
  CHECK(b1.job_client_id() != a1.job_client_id());
  finish(a1.job_id());
  // A's second pass starts iteration 2; B's, arriving while it runs, joins it.
  auto [sa2, a2] = pass(2);
  auto [sb2, b2] = pass(2);
  REQUIRE(sa2.ok());
  REQUIRE(sb2.ok());
  CHECK(a2.iteration() == 2);
  CHECK(a2.job_id() != a1.job_id());
  CHECK(b2.job_id() == a2.job_id());
  CHECK_FALSE(b2.job_finished());
  finish(a2.job_id());
  // A reads a third pass alone (B is busy elsewhere) and starts a fourth.
  auto [sa3, a3] = pass(3);
  REQUIRE(sa3.ok());
  finish(a3.job_id());
  auto [sa4, a4] = pass(4);
  REQUIRE(sa4.ok());
  // B's third pass comes after iteration 3 finished: it is over, an empty pass, no client made.
  auto [sb3, b3] = pass(3);
  REQUIRE(sb3.ok());
  CHECK(b3.job_finished());
  CHECK(b3.job_id() == a3.job_id());
  CHECK(b3.job_client_id() == 0);
  CHECK(b3.iteration() == 3);
  // B's fourth pass joins iteration 4, which A is reading.
  auto [sb4, b4] = pass(4);
  REQUIRE(sb4.ok());
  CHECK(b4.job_id() == a4.job_id());
  // A breaks out of pass 4 and starts pass 5 while iteration 4 runs: both run; a late pass 4 still joins 4.
  auto [sa5, a5] = pass(5);
  REQUIRE(sa5.ok());
  CHECK(a5.iteration() == 5);
  CHECK_FALSE(d.JobInfo(a4.job_id()).finished());
  auto [sc4, c4] = pass(4);
  REQUIRE(sc4.ok());
  CHECK(c4.job_id() == a4.job_id());
  // Without a pass number: the name's current iteration (the latest, 5).
  CHECK(d.MustJob(ds, service::SHARDING_OFF, "train").job_id() == a5.job_id());
  // Hostile: a negative iteration, an iteration of an anonymous job.
  CHECK(pass(-1).first.code() == absl::StatusCode::kInvalidArgument);
  const absl::Status anonymous = pass(1, "").first;
  CHECK(anonymous.code() == absl::StatusCode::kInvalidArgument);
  CHECK(Contains(anonymous, "spec.job_name"));
  // The iterations are journaled: after a restart, pass 3 is still over and pass 5 still joins 5.
  h.Restart();
  REQUIRE(h.start_status().ok());
  CHECK(pass(3).second.job_finished());
  CHECK(pass(5).second.job_id() == a5.job_id());
}

TEST_CASE("retention: beyond finished_jobs_retained, the oldest finished jobs are forgotten with their series") {
  DispatcherOptions options;
  options.finished_jobs_retained = 1;
  ServiceHarness h("", options);
  Driver d{h.service()};
  const std::string ds = d.Register(RangePipeline(100, 10));
  d.Heartbeat("w1:1");
  auto release = [&](int64_t client) {
    service::ReleaseJobClientRequest req;
    req.set_job_client_id(client);
    service::ReleaseJobClientResponse resp;
    REQUIRE(h.service().ReleaseJobClient(req, &resp).ok());
  };
  auto finish = [&](const service::GetOrCreateJobResponse& job) {
    const int64_t t = d.TaskOf("w1:1", job.job_id());
    d.Heartbeat("w1:1", {t}, false, {t});
    release(job.job_client_id());
  };
  std::vector<int64_t> anonymous;
  for (int i = 0; i < 3; ++i) {
    auto job = d.MustJob(ds, service::SHARDING_OFF, "");
    service::ClientMetrics m;
    m.set_elements_total(10);
    d.Client(job.job_client_id(), 0, m);
    finish(job);
    anonymous.push_back(job.job_id());
  }
  auto train1 = d.MustJob(ds, service::SHARDING_OFF, "train");
  finish(train1);
  h.service().Tick();
  // Four finished jobs, one retained: the anonymous ones go, oldest first; "train" is its name's
  // latest job, which is never forgotten (it carries the name's iteration count).
  const auto state = d.State();
  std::set<int64_t> ids;
  for (const auto& j : state.jobs()) ids.insert(j.job_id());
  CHECK(ids == std::set<int64_t>{train1.job_id()});
  // The forgotten anonymous jobs' series are gone; the next "train" is iteration 2.
  for (int64_t id : anonymous) CHECK(MetricValue(h.registry(), "sluice_client_elements_total", absl::StrCat(id)) == 0);
  CHECK(d.MustJob(ds, service::SHARDING_OFF, "train").iteration() == 2);
}

TEST_CASE("retention: a dataset no job uses is forgotten after unused_dataset_retention - registering it again works") {
  DispatcherOptions options;
  options.finished_jobs_retained = 0;
  options.unused_dataset_retention = absl::Minutes(10);
  ServiceHarness h("", options);
  Driver d{h.service()};
  const std::string unused = d.Register(RangePipeline(100, 10));
  const std::string used = d.Register(RangePipeline(50, 10));
  d.Heartbeat("w1:1");
  auto job = d.MustJob(used, service::SHARDING_OFF, "keeps-it");
  h.service().Tick();
  h.clock().Advance(absl::Minutes(9));
  d.Heartbeat("w1:1");
  h.service().Tick();
  service::GetOrCreateJobResponse resp;
  CHECK(d.Job(unused, service::SHARDING_OFF, "", &resp).ok());  // still known (and now used)
  // A later job's dataset: registered, then unused for longer than the retention.
  const std::string later = d.Register(RangePipeline(70, 10));
  h.service().Tick();
  h.clock().Advance(absl::Minutes(11));
  d.Heartbeat("w1:1");
  h.service().Tick();
  absl::Status s = d.Job(later, service::SHARDING_OFF, "", &resp);
  CHECK(s.code() == absl::StatusCode::kNotFound);
  CHECK(Contains(s, "register the dataset first"));
  CHECK(d.Register(RangePipeline(70, 10)) == later);  // registering again brings it back
  CHECK(d.Job(later, service::SHARDING_OFF, "", &resp).ok());
  CHECK(d.Job(used, service::SHARDING_OFF, "keeps-it", &resp).ok());  // used by a job: kept
  (void)job;
}

TEST_CASE("RegisterDataset: same pipeline, same id - bad pipelines are named") {
  ServiceHarness h("");
  Driver d{h.service()};
  int64_t n = 0;
  const std::string id = d.Register(RangePipeline(100, 10), &n);
  CHECK(n == 10);
  CHECK(!id.empty());
  pipeline::PipelineDef renamed = RangePipeline(100, 10);
  renamed.set_name("another label");
  CHECK(d.Register(renamed) == id);
  CHECK(d.Register(RangePipeline(100, 20)) != id);

  service::RegisterDatasetResponse resp;
  service::RegisterDatasetRequest empty;
  absl::Status s = h.service().RegisterDataset(empty, &resp);
  CHECK(s.code() == absl::StatusCode::kInvalidArgument);
  CHECK(Contains(s, "pipeline is empty"));

  service::RegisterDatasetRequest unknown_op;
  *unknown_op.mutable_pipeline() = RangePipeline(10, 5);
  unknown_op.mutable_pipeline()->add_steps()->set_kind("frobnicate");
  s = h.service().RegisterDataset(unknown_op, &resp);
  CHECK(s.code() == absl::StatusCode::kInvalidArgument);
  CHECK(Contains(s, "unknown step 'frobnicate'"));

  service::RegisterDatasetRequest unknown_source;
  unknown_source.mutable_pipeline()->mutable_source()->set_kind("nope");
  s = h.service().RegisterDataset(unknown_source, &resp);
  CHECK(s.code() == absl::StatusCode::kInvalidArgument);
  CHECK(Contains(s, "unknown source 'nope'"));

  service::RegisterDatasetRequest missing_files;
  missing_files.mutable_pipeline()->mutable_source()->set_kind("jsonl");
  auto* arg = missing_files.mutable_pipeline()->mutable_source()->mutable_args()->add_entries();
  arg->set_name("files");
  arg->mutable_value()->set_string_value("/nonexistent/sluice/*.jsonl");
  s = h.service().RegisterDataset(missing_files, &resp);
  INFO(s.ToString());
  CHECK(!s.ok());
  CHECK(Contains(s, "/nonexistent/sluice/*.jsonl"));
}

TEST_CASE("AutoOrder at registration: the rewrite is served, journaled, in GetState and counted") {
  TempDir dir;
  DispatcherOptions options;
  options.auto_order.mode = pipeline::AutoOrderMode::kStrict;
  options.auto_order.sample_elements = 16;
  options.auto_order.rounds = 1;
  options.auto_order.min_measured_speedup = 0;  // decide on model and verification: no timing in this test
  options.snapshot_every = 1;
  ServiceHarness h(dir.File("journal"), options);
  Driver d{h.service()};
  auto natural = pipeline::ParsePipelineSpec(R"(
source: {synthetic: {count: 32, shape: [64, 64, 3], dtype: uint8, split_size: 8}}
steps:
  - cast: {field: data, dtype: float32}
  - random_crop: {field: data, size: [8, 8]}
)", "natural.yaml");
  REQUIRE(natural.ok());
  const std::string id = d.Register(*natural);
  CHECK(id == pipeline::Fingerprint(*natural));  // the dataset id is the pipeline as registered
  CHECK(d.Register(*natural) == id);             // and registering it again finds it
  auto check = [&] {
    service::GetStateResponse state;
    REQUIRE(h.service().GetState(service::GetStateRequest(), &state).ok());
    REQUIRE(state.auto_order().count(id) == 1);
    const pipeline::AutoOrderReport& r = state.auto_order().at(id);
    CHECK(r.mode() == "strict");
    CHECK(r.outcome() == "applied");
    CHECK(r.chosen_order(0) == "random_crop(data)");
    // Workers get the rewritten pipeline. (A Driver of the current service: Restart() destroys the
    // one `d` refers to.)
    Driver now{h.service()};
    service::GetOrCreateJobResponse job = now.MustJob(id, service::SHARDING_OFF);
    service::WorkerHeartbeatResponse hb = now.Heartbeat("w1:1");
    REQUIRE(hb.new_tasks_size() >= 1);
    CHECK(hb.new_tasks(0).pipeline().steps(0).ops(0).op() == "random_crop");
    (void)job;
  };
  check();
  auto plans = [&](const std::string& outcome) {
    for (const auto& family : h.registry().Collect()) {
      if (family.name != "sluice_dispatcher_autoorder_plans_total") continue;
      for (const auto& m : family.metric) {
        for (const auto& l : m.label) {
          if (l.name == "outcome" && l.value == outcome) return m.counter.value;
        }
      }
    }
    return -1.0;
  };
  CHECK(plans("applied") == 1.0);  // once: the second registration found the dataset
  CHECK(plans("refused") == 0.0);
  h.Restart();  // the journal keeps the rewrite and the report; nothing is planned again
  check();
  CHECK(plans("applied") == 0.0);
  h.service().Tick();  // compacts: the snapshot keeps them too
  REQUIRE(h.journal()->bytes() > 0);
  h.Restart();
  REQUIRE(h.recovered().snapshot.has_value());
  check();

  // AutoOrder off: no report, the pipeline as given.
  ServiceHarness off("");
  Driver o{off.service()};
  const std::string same = o.Register(*natural);
  service::GetStateResponse state;
  REQUIRE(off.service().GetState(service::GetStateRequest(), &state).ok());
  CHECK(same == id);
  CHECK(state.auto_order().empty());
}

TEST_CASE("GetOrCreateJob: sharing by name, parameter mismatches, anonymous jobs, validation") {
  ServiceHarness h("");
  Driver d{h.service()};
  const std::string ds = d.Register(RangePipeline(100, 10));
  d.Heartbeat("w1:1");
  auto a = d.MustJob(ds, service::SHARDING_DYNAMIC, "train");
  auto b = d.MustJob(ds, service::SHARDING_DYNAMIC, "train");
  CHECK(a.job_id() == b.job_id());
  CHECK(a.job_client_id() != b.job_client_id());
  auto anon1 = d.MustJob(ds, service::SHARDING_DYNAMIC);
  auto anon2 = d.MustJob(ds, service::SHARDING_DYNAMIC);
  CHECK(anon1.job_id() != anon2.job_id());
  CHECK(anon1.job_id() != a.job_id());

  service::GetOrCreateJobResponse resp;
  absl::Status s = d.Job(ds, service::SHARDING_OFF, "train", &resp);
  CHECK(s.code() == absl::StatusCode::kFailedPrecondition);
  CHECK(s.message() == "job 'train' exists with sharding DYNAMIC, request has OFF");
  s = d.Job(ds, service::SHARDING_DYNAMIC, "train", &resp, 3);
  CHECK(s.code() == absl::StatusCode::kFailedPrecondition);
  CHECK(s.message() == "job 'train' exists with num_epochs 1, request has 3");
  // 0 epochs means 1: not a mismatch.
  CHECK(d.Job(ds, service::SHARDING_DYNAMIC, "train", &resp, 0).ok());
  // target_workers belongs to each client, so it may differ.
  CHECK(d.Job(ds, service::SHARDING_DYNAMIC, "train", &resp, 1, service::TARGET_WORKERS_LOCAL).ok());

  s = d.Job("no-such-dataset", service::SHARDING_OFF, "", &resp);
  CHECK(s.code() == absl::StatusCode::kNotFound);
  CHECK(Contains(s, "spec.dataset_id 'no-such-dataset' is not known"));
  s = d.Job("", service::SHARDING_OFF, "", &resp);  // no default pipeline (see its own test)
  CHECK(s.code() == absl::StatusCode::kFailedPrecondition);
  s = d.Job(ds, static_cast<service::ShardingPolicy>(42), "", &resp);
  CHECK(s.code() == absl::StatusCode::kInvalidArgument);
  CHECK(Contains(s, "spec.sharding 42"));
  s = d.Job(ds, service::SHARDING_OFF, "", &resp, -7);
  CHECK(s.code() == absl::StatusCode::kInvalidArgument);
  CHECK(Contains(s, "spec.num_epochs is -7"));
  s = d.Job(ds, service::SHARDING_OFF, "", &resp, 1, service::TARGET_WORKERS_ANY, "h", -1);
  CHECK(s.code() == absl::StatusCode::kInvalidArgument);
  CHECK(Contains(s, "spec.num_consumers is -1"));
  s = d.Job(ds, service::SHARDING_DYNAMIC, "", &resp, 1, service::TARGET_WORKERS_ANY, "h", 2);
  CHECK(s.code() == absl::StatusCode::kInvalidArgument);
  CHECK(Contains(s, "coordinated reads"));
  service::GetOrCreateJobRequest sharing;
  sharing.mutable_spec()->set_dataset_id(ds);
  sharing.mutable_spec()->set_sharding(service::SHARDING_DYNAMIC);
  sharing.mutable_spec()->set_cross_job_sharing(true);
  s = h.service().GetOrCreateJob(sharing, &resp);
  CHECK(s.code() == absl::StatusCode::kInvalidArgument);
  CHECK(Contains(s, "cross_job_sharing"));
}

TEST_CASE("static sharding fixes the workers at job creation") {
  ServiceHarness h("");
  Driver d{h.service()};
  const std::string ds = d.Register(RangePipeline(100, 10));
  service::GetOrCreateJobResponse resp;
  absl::Status s = d.Job(ds, service::SHARDING_FILE, "", &resp);
  CHECK(s.code() == absl::StatusCode::kUnavailable);
  CHECK(Contains(s, "no workers are registered yet"));
  d.Heartbeat("w1:1");
  d.Heartbeat("w2:1");
  auto job = d.MustJob(ds, service::SHARDING_FILE);
  std::map<int32_t, std::string> index_to_worker;
  for (const std::string w : {"w1:1", "w2:1"}) {
    auto hb = d.Heartbeat(w);
    REQUIRE(hb.new_tasks_size() == 1);
    CHECK(hb.new_tasks(0).num_workers() == 2);
    CHECK(hb.new_tasks(0).sharding() == service::SHARDING_FILE);
    index_to_worker[hb.new_tasks(0).worker_index()] = w;
  }
  CHECK(index_to_worker == std::map<int32_t, std::string>{{0, "w1:1"}, {1, "w2:1"}});
  CHECK(d.Heartbeat("w3:1").new_tasks_size() == 0);  // joined later: no shard
  // A static worker that comes back under the same address gets its shard again.
  service::WorkerDeregisterResponse dr;
  service::WorkerDeregisterRequest dreq;
  dreq.set_worker_address("w2:1");
  REQUIRE(h.service().WorkerDeregister(dreq, &dr).ok());
  auto back = d.Heartbeat("w2:1");
  REQUIRE(back.new_tasks_size() == 1);
  CHECK(back.new_tasks(0).worker_index() == 1);
  CHECK(back.new_tasks(0).job_id() == job.job_id());
}

TEST_CASE("WorkerHeartbeat: registration, task definitions, deletions, malformed requests") {
  DispatcherOptions options;
  options.heartbeat_interval = absl::Milliseconds(250);
  ServiceHarness h("", options);
  Driver d{h.service()};
  const std::string ds = d.Register(RangePipeline(100, 10));
  auto job = d.MustJob(ds, service::SHARDING_DYNAMIC, "train", 4);
  auto first = d.Heartbeat("w1:1");
  CHECK(first.heartbeat_interval_ms() == 250);
  REQUIRE(first.new_tasks_size() == 1);
  const service::TaskDef& def = first.new_tasks(0);
  CHECK(def.job_id() == job.job_id());
  CHECK(def.dataset_id() == ds);
  CHECK(def.sharding() == service::SHARDING_DYNAMIC);
  CHECK(def.num_epochs() == 4);
  CHECK(def.pipeline().source().kind() == "range");
  // Listed: not sent again. Unknown ids: deleted.
  auto second = d.Heartbeat("w1:1", {def.task_id(), 999});
  CHECK(second.new_tasks_size() == 0);
  CHECK(std::vector<int64_t>(second.tasks_to_delete().begin(), second.tasks_to_delete().end()) ==
        std::vector<int64_t>{999});
  // Another worker cannot report this task.
  auto other = d.Heartbeat("w2:1", {def.task_id()});
  CHECK(std::vector<int64_t>(other.tasks_to_delete().begin(), other.tasks_to_delete().end()) ==
        std::vector<int64_t>{def.task_id()});

  service::WorkerHeartbeatResponse resp;
  service::WorkerHeartbeatRequest bad;
  absl::Status s = h.service().WorkerHeartbeat(bad, &resp);
  CHECK(s.code() == absl::StatusCode::kInvalidArgument);
  CHECK(Contains(s, "worker_address is empty"));
  bad.set_worker_address("w9:1");
  bad.set_placement(static_cast<service::Placement>(77));
  s = h.service().WorkerHeartbeat(bad, &resp);
  CHECK(Contains(s, "placement 77"));
  bad.set_placement(service::PLACEMENT_LOCAL);
  bad.add_tasks()->set_task_id(5);
  bad.add_tasks()->set_task_id(5);
  s = h.service().WorkerHeartbeat(bad, &resp);
  CHECK(Contains(s, "tasks[1].task_id 5 is listed twice"));
  // The host defaults to the address's host part.
  service::WorkerHeartbeatRequest no_host;
  no_host.set_worker_address("10.1.2.3:7000");
  REQUIRE(h.service().WorkerHeartbeat(no_host, &resp).ok());
  bool found = false;
  const auto state = d.State();
  for (const auto& w : state.workers()) {
    if (w.address() == "10.1.2.3:7000") found = w.host() == "10.1.2.3";
  }
  CHECK(found);
}

TEST_CASE("ClientHeartbeat: tasks by target_workers and sharding, metrics, malformed requests") {
  ServiceHarness h("");
  Driver d{h.service()};
  const std::string ds = d.Register(RangePipeline(100, 10));
  d.Heartbeat("hostA:1");
  d.Heartbeat("hostB:1");
  auto tasks_seen = [&](service::ShardingPolicy sharding, service::TargetWorkers target, const std::string& host) {
    service::GetOrCreateJobResponse job;
    REQUIRE(d.Job(ds, sharding, "", &job, 1, target, host).ok());
    std::set<std::string> workers;
    const auto heartbeat = d.Client(job.job_client_id());
    for (const auto& t : heartbeat.tasks()) workers.insert(t.worker_address());
    return workers;
  };
  using Set = std::set<std::string>;
  CHECK(tasks_seen(service::SHARDING_OFF, service::TARGET_WORKERS_ANY, "hostA") == Set{"hostA:1", "hostB:1"});
  CHECK(tasks_seen(service::SHARDING_OFF, service::TARGET_WORKERS_LOCAL, "hostA") == Set{"hostA:1"});
  CHECK(tasks_seen(service::SHARDING_OFF, service::TARGET_WORKERS_LOCAL, "hostZ") == Set{});
  CHECK(tasks_seen(service::SHARDING_OFF, service::TARGET_WORKERS_AUTO, "hostB") == Set{"hostB:1"});
  CHECK(tasks_seen(service::SHARDING_OFF, service::TARGET_WORKERS_AUTO, "hostZ") == Set{"hostA:1", "hostB:1"});
  // Under dynamic sharding every task holds splits nobody else reads: AUTO reads them all.
  CHECK(tasks_seen(service::SHARDING_DYNAMIC, service::TARGET_WORKERS_AUTO, "hostA") == Set{"hostA:1", "hostB:1"});

  service::ClientHeartbeatResponse resp;
  service::ClientHeartbeatRequest req;
  req.set_job_client_id(17);
  absl::Status s = h.service().ClientHeartbeat(req, &resp);
  CHECK(s.code() == absl::StatusCode::kNotFound);
  CHECK(s.message() == "job_client_id 17 is not known");
  req.set_job_client_id(1);
  req.set_current_round(-3);
  s = h.service().ClientHeartbeat(req, &resp);
  CHECK(Contains(s, "current_round is -3"));
  req.set_current_round(0);
  req.mutable_metrics()->set_wait_seconds_total(std::numeric_limits<double>::quiet_NaN());
  s = h.service().ClientHeartbeat(req, &resp);
  CHECK(s.code() == absl::StatusCode::kInvalidArgument);
  CHECK(Contains(s, "metrics.wait_seconds_total"));
  req.mutable_metrics()->set_wait_seconds_total(1);
  req.mutable_metrics()->set_elements_total(-1);
  CHECK(Contains(h.service().ClientHeartbeat(req, &resp), "metrics.elements_total is -1"));
}

TEST_CASE("client metrics are summed per job, also over released clients") {
  ServiceHarness h("");
  Driver d{h.service()};
  const std::string ds = d.Register(RangePipeline(100, 10));
  auto c1 = d.MustJob(ds, service::SHARDING_OFF, "shared");
  auto c2 = d.MustJob(ds, service::SHARDING_OFF, "shared");
  service::ClientMetrics m;
  m.set_wait_seconds_total(1.5);
  m.set_step_seconds_total(10);
  m.set_elements_total(100);
  m.set_bytes_total(1000);
  d.Client(c1.job_client_id(), 0, m);
  m.set_wait_seconds_total(2.5);  // totals: only the increase counts
  m.set_elements_total(150);
  d.Client(c1.job_client_id(), 0, m);
  service::ClientMetrics m2;
  m2.set_wait_seconds_total(4);
  m2.set_step_seconds_total(5);
  d.Client(c2.job_client_id(), 0, m2);
  service::ReleaseJobClientRequest rel;
  rel.set_job_client_id(c2.job_client_id());
  service::ReleaseJobClientResponse rr;
  REQUIRE(h.service().ReleaseJobClient(rel, &rr).ok());
  const auto info = d.JobInfo(c1.job_id());
  CHECK(info.metrics().wait_seconds_total() == Approx(6.5));
  CHECK(info.metrics().step_seconds_total() == Approx(15));
  CHECK(info.metrics().elements_total() == 150);
  CHECK(info.metrics().bytes_total() == 1000);
  CHECK(info.num_clients() == 1);
  CHECK(MetricValue(h.registry(), "sluice_client_wait_seconds_total", "shared") == Approx(6.5));
  CHECK(MetricValue(h.registry(), "sluice_client_elements_total", "shared") == Approx(150));
  // Released: unknown from now on.
  CHECK(h.service().ReleaseJobClient(rel, &rr).code() == absl::StatusCode::kNotFound);
}

TEST_CASE("client metrics after a restart continue from the clients' totals, without a jump") {
  TempDir dir;
  ServiceHarness h(dir.path().string());
  REQUIRE(h.start_status().ok());
  int64_t client = 0;
  std::string ds;
  service::ClientMetrics m;
  {
    Driver d{h.service()};
    ds = d.Register(RangePipeline(100, 10));
    client = d.MustJob(ds, service::SHARDING_OFF, "train").job_client_id();
    m.set_elements_total(100);
    m.set_step_seconds_total(10);
    m.set_wait_seconds_total(4);
    d.Client(client, 0, m);
    CHECK(MetricValue(h.registry(), "sluice_client_elements_total", "train") == Approx(100));
  }
  h.Restart();
  REQUIRE(h.start_status().ok());
  Driver d{h.service()};
  // The first report after the restart is the baseline (the old process counted it) ...
  m.set_elements_total(130);
  m.set_step_seconds_total(13);
  m.set_wait_seconds_total(5);
  d.Client(client, 0, m);
  CHECK(MetricValue(h.registry(), "sluice_client_elements_total", "train") == Approx(0));
  // ... and increments count from there.
  m.set_elements_total(150);
  m.set_step_seconds_total(15);
  d.Client(client, 0, m);
  CHECK(MetricValue(h.registry(), "sluice_client_elements_total", "train") == Approx(20));
  CHECK(MetricValue(h.registry(), "sluice_client_step_seconds_total", "train") == Approx(2));
  CHECK(MetricValue(h.registry(), "sluice_client_wait_seconds_total", "train") == Approx(0));
  // A client created after the restart counts from zero.
  auto late = d.MustJob(ds, service::SHARDING_OFF, "train");
  service::ClientMetrics first;
  first.set_elements_total(7);
  d.Client(late.job_client_id(), 0, first);
  CHECK(MetricValue(h.registry(), "sluice_client_elements_total", "train") == Approx(27));
}

TEST_CASE("GetSplits: batches, acknowledgements, end of splits, malformed requests") {
  ServiceHarness h("");
  Driver d{h.service()};
  int64_t n = 0;
  const std::string ds = d.Register(RangePipeline(100, 10), &n);
  auto job = d.MustJob(ds, service::SHARDING_DYNAMIC, "train");
  const int64_t t1 = d.TaskOf("w1:1", job.job_id());
  const int64_t t2 = d.TaskOf("w2:1", job.job_id());
  REQUIRE(t1 > 0);
  REQUIRE(t2 > 0);
  auto r = d.MustSplits(t1, 4);
  CHECK(Indices(r) == std::vector<uint64_t>{0, 1, 2, 3});
  CHECK(r.splits(1).path() == "range");
  CHECK(r.splits(1).begin() == 10);
  CHECK(r.splits(1).end() == 20);
  CHECK(!r.end_of_splits());
  CHECK(Indices(d.MustSplits(t2, 4, {})) == std::vector<uint64_t>{4, 5, 6, 7});
  CHECK(Indices(d.MustSplits(t1, 4, {0, 1, 2, 3})) == std::vector<uint64_t>{8, 9});
  // Queue empty, but t2 still holds unstarted splits: t1 waits (no splits, not the end).
  r = d.MustSplits(t1, 4, {8, 9});
  CHECK(r.splits_size() == 0);
  CHECK(!r.end_of_splits());
  r = d.MustSplits(t2, 4, {4, 5, 6, 7});
  CHECK(r.end_of_splits());
  CHECK(d.MustSplits(t1, 4).end_of_splits());
  const auto info = d.JobInfo(job.job_id());
  CHECK(info.splits_served() == 10);
  CHECK(info.splits_total() == 10);
  CHECK(MetricValue(h.registry(), "sluice_dispatcher_splits_served_total", "train") == 10);

  service::GetSplitsResponse resp;
  absl::Status s = d.Splits(999, 4, {}, 0, &resp);
  CHECK(s.code() == absl::StatusCode::kNotFound);
  CHECK(s.message() == "task_id 999 is not known");
  s = d.Splits(t1, -1, {}, 0, &resp);
  CHECK(Contains(s, "max_splits is -1"));
  s = d.Splits(t1, 4, {}, -2, &resp);
  CHECK(Contains(s, "epoch is -2"));
  s = d.Splits(t1, 4, {10}, 0, &resp);
  CHECK(s.code() == absl::StatusCode::kInvalidArgument);
  CHECK(Contains(s, "started_split_indices[0] is 10"));
  s = d.Splits(t1, 4, {}, 0, &resp, "w2:1");
  CHECK(s.code() == absl::StatusCode::kFailedPrecondition);
  CHECK(Contains(s, "belongs to worker 'w1:1', not 'w2:1'"));
  auto off = d.MustJob(ds, service::SHARDING_OFF);
  const int64_t off_task = d.TaskOf("w3:1", off.job_id());
  s = d.Splits(off_task, 4, {}, 0, &resp);
  CHECK(s.code() == absl::StatusCode::kFailedPrecondition);
  CHECK(Contains(s, "uses sharding OFF"));
}

TEST_CASE("GetSplits: absurd max_splits is clamped, epochs ahead are refused, early epoch changes") {
  DispatcherOptions options;
  options.max_splits_per_request = 16;
  ServiceHarness h("", options);
  Driver d{h.service()};
  const std::string ds = d.Register(RangePipeline(1000, 1));
  auto job = d.MustJob(ds, service::SHARDING_DYNAMIC, "", 3);
  const int64_t t = d.TaskOf("w1:1", job.job_id());
  CHECK(d.MustSplits(t, std::numeric_limits<int32_t>::max()).splits_size() == 16);
  service::GetSplitsResponse resp;
  absl::Status s = d.Splits(t, 4, {}, 2, &resp);
  CHECK(s.code() == absl::StatusCode::kInvalidArgument);
  CHECK(Contains(s, "epoch 2 is ahead of job"));
  // max_splits 0 acknowledges without taking more.
  auto ack = d.MustSplits(t, 0, {0, 1});
  CHECK(ack.splits_size() == 0);
  CHECK(!ack.end_of_splits());
  // A worker that left epoch 0 early (e.g. `take` before `repeat`) still gets epoch 0's queued
  // splits, marked as such, and may acknowledge epoch 0 splits from epoch 1.
  auto early = d.MustSplits(t, 4, {2, 3}, 1);
  CHECK(early.epoch() == 0);
  CHECK(Indices(early) == std::vector<uint64_t>{16, 17, 18, 19});
  CHECK(!early.end_of_splits());
}

TEST_CASE("epochs: the next one opens when every task reached the end") {
  ServiceHarness h("");
  Driver d{h.service()};
  const std::string ds = d.Register(RangePipeline(40, 10));
  auto job = d.MustJob(ds, service::SHARDING_DYNAMIC, "", 2);
  const int64_t t1 = d.TaskOf("w1:1", job.job_id());
  const int64_t t2 = d.TaskOf("w2:1", job.job_id());
  std::multiset<uint64_t> handed[2];
  auto take = [&](int64_t task, std::vector<uint64_t> started, int64_t epoch) {
    auto r = d.MustSplits(task, 2, std::move(started), epoch);
    for (auto i : Indices(r)) handed[epoch].insert(i);
    return r;
  };
  CHECK(Indices(take(t1, {}, 0)) == std::vector<uint64_t>{0, 1});
  CHECK(Indices(take(t2, {}, 0)) == std::vector<uint64_t>{2, 3});
  CHECK(take(t1, {0, 1}, 0).splits_size() == 0);        // t2's splits are not started yet
  CHECK(take(t2, {2, 3}, 0).end_of_splits());           // all started: t2 reached the end
  auto early = take(t2, {}, 1);                          // t1 has not reached the end: wait
  CHECK(early.splits_size() == 0);
  CHECK(!early.end_of_splits());
  CHECK(take(t1, {}, 0).end_of_splits());               // t1 reaches the end: epoch 1 opens
  CHECK(Indices(take(t2, {}, 1)) == std::vector<uint64_t>{0, 1});
  CHECK(take(t1, {}, 0).end_of_splits());               // a late ask for an old epoch: over
  CHECK(Indices(take(t1, {}, 1)) == std::vector<uint64_t>{2, 3});
  take(t1, {2, 3}, 1);
  CHECK(take(t2, {0, 1}, 1).end_of_splits());
  CHECK(take(t1, {}, 1).end_of_splits());
  // Both reached the end of the last epoch: exhausted, whatever is asked.
  CHECK(take(t1, {}, 2).end_of_splits());
  CHECK(handed[0] == std::multiset<uint64_t>{0, 1, 2, 3});
  CHECK(handed[1] == std::multiset<uint64_t>{0, 1, 2, 3});
  // Tasks finishing finishes the job.
  d.Heartbeat("w1:1", {t1}, false, {t1});
  CHECK(!d.Client(job.job_client_id()).job_finished());
  auto last = d.Heartbeat("w2:1", {t2}, false, {t2});
  CHECK(d.Client(job.job_client_id()).job_finished());
  CHECK(d.Client(job.job_client_id()).tasks_size() == 0);
  CHECK(std::vector<int64_t>(last.tasks_to_delete().begin(), last.tasks_to_delete().end()) == std::vector<int64_t>{});
  auto after = d.Heartbeat("w2:1", {t2});
  CHECK(std::vector<int64_t>(after.tasks_to_delete().begin(), after.tasks_to_delete().end()) ==
        std::vector<int64_t>{t2});
}

TEST_CASE("position leases: a lost worker's split comes back from its lease's end - others wait for it") {
  DispatcherOptions options;
  options.worker_timeout = absl::Seconds(5);
  ServiceHarness h("", options);
  Driver d{h.service()};
  const std::string ds = d.Register(RangePipeline(20, 10));  // splits [0,10) and [10,20)
  auto job = d.MustJob(ds, service::SHARDING_DYNAMIC, "train");
  const int64_t t1 = d.TaskOf("w1:1", job.job_id());
  const int64_t t2 = d.TaskOf("w2:1", job.job_id());
  auto call = [&](int64_t task, const std::string& address, int max, std::vector<uint64_t> started,
                  std::vector<service::SplitProgress> progress) {
    service::GetSplitsRequest req;
    req.set_task_id(task);
    req.set_worker_address(address);
    req.set_max_splits(max);
    for (auto i : started) req.add_started_split_indices(i);
    for (auto& p : progress) *req.add_progress() = p;
    service::GetSplitsResponse resp;
    absl::Status st = h.service().GetSplits(req, &resp);
    INFO(st.ToString());
    REQUIRE(st.ok());
    return resp;
  };
  auto lease = [](uint64_t index, int64_t end, bool finished = false) {
    service::SplitProgress p;
    p.set_index(index);
    p.set_lease_end(end);
    p.set_finished(finished);
    return p;
  };
  CHECK(Indices(call(t1, "w1:1", 1, {}, {})) == std::vector<uint64_t>{0});
  CHECK(Indices(call(t2, "w2:1", 1, {}, {})) == std::vector<uint64_t>{1});
  // Both start with a lease; t2 reads its split to the end.
  call(t1, "w1:1", 0, {0}, {lease(0, 4)});
  call(t2, "w2:1", 0, {1}, {lease(1, 4)});
  call(t2, "w2:1", 0, {}, {lease(1, 10, true)});
  // Everything is started, but t1 reads split 0 under a lease: t2 is not told the end yet.
  auto wait = call(t2, "w2:1", 4, {}, {});
  CHECK(wait.splits_size() == 0);
  CHECK(!wait.end_of_splits());
  // Malformed progress is refused, naming the entry.
  service::GetSplitsRequest bad;
  bad.set_task_id(t2);
  *bad.add_progress() = lease(7, 1);
  service::GetSplitsResponse bad_resp;
  absl::Status st = h.service().GetSplits(bad, &bad_resp);
  CHECK(st.code() == absl::StatusCode::kInvalidArgument);
  CHECK(Contains(st, "progress[0] has index 7"));
  // Progress for a split another task reads changes nothing.
  call(t2, "w2:1", 0, {}, {lease(0, 100, true)});
  CHECK(!call(t2, "w2:1", 4, {}, {}).end_of_splits());
  // w1 goes silent and is removed: split 0 comes back from element 4 on.
  h.clock().Advance(absl::Seconds(3));
  d.Heartbeat("w2:1", {t2});
  h.clock().Advance(absl::Seconds(3));
  h.service().Tick();
  CHECK(MetricValue(h.registry(), "sluice_dispatcher_split_remainders_total", "train") == 1);
  auto remainder = call(t2, "w2:1", 4, {}, {});
  REQUIRE(remainder.splits_size() == 1);
  CHECK(remainder.splits(0).index() == 0);
  CHECK(remainder.splits(0).skip() == 4);
  call(t2, "w2:1", 0, {0}, {lease(0, 12)});
  CHECK(call(t2, "w2:1", 0, {}, {lease(0, -1, true)}).end_of_splits());
  CHECK(d.JobInfo(job.job_id()).splits_served() == 3);
}

TEST_CASE("a timed-out worker's unstarted splits go to the front - started ones never come back") {
  DispatcherOptions options;
  options.worker_timeout = absl::Seconds(5);
  ServiceHarness h("", options);
  Driver d{h.service()};
  const std::string ds = d.Register(RangePipeline(100, 10));
  auto job = d.MustJob(ds, service::SHARDING_DYNAMIC, "train");
  const int64_t t1 = d.TaskOf("w1:1", job.job_id());
  const int64_t t2 = d.TaskOf("w2:1", job.job_id());
  std::multiset<uint64_t> handed;
  auto take = [&](int64_t task, int max, std::vector<uint64_t> started) {
    auto r = d.MustSplits(task, max, std::move(started));
    for (auto i : Indices(r)) handed.insert(i);
    return Indices(r);
  };
  CHECK(take(t1, 4, {}) == std::vector<uint64_t>{0, 1, 2, 3});
  CHECK(take(t2, 2, {}) == std::vector<uint64_t>{4, 5});
  // w1 acknowledges 0 and 1 through its heartbeat, then goes silent.
  d.Heartbeat("w1:1", {t1}, false, {}, {{t1, {0, 1}}});
  h.clock().Advance(absl::Seconds(3));
  d.Heartbeat("w2:1", {t2});
  h.service().Tick();
  CHECK(d.State().workers_size() == 2);  // not yet
  h.clock().Advance(absl::Seconds(3));
  h.service().Tick();
  CHECK(d.State().workers_size() == 1);
  CHECK(MetricValue(h.registry(), "sluice_dispatcher_worker_removals_total", "heartbeat timeout") == 1);
  CHECK(MetricValue(h.registry(), "sluice_dispatcher_workers") == 1);
  // 2 and 3 come back first, then the rest of the queue.
  CHECK(take(t2, 3, {4, 5}) == std::vector<uint64_t>{2, 3, 6});
  CHECK(take(t2, 10, {2, 3, 6}) == std::vector<uint64_t>{7, 8, 9});
  auto end = d.MustSplits(t2, 10, {7, 8, 9});
  CHECK(end.end_of_splits());
  // Only the re-queued splits were handed out twice; 0 and 1 (started) never.
  CHECK(handed.count(0) == 1);
  CHECK(handed.count(1) == 1);
  CHECK(handed.count(2) == 2);
  CHECK(handed.count(3) == 2);
  // The dead worker's task is gone.
  service::GetSplitsResponse resp;
  CHECK(d.Splits(t1, 1, {}, 0, &resp).code() == absl::StatusCode::kNotFound);
}

TEST_CASE("a worker that forgets its tasks restarted: it starts over and its splits return") {
  ServiceHarness h("");
  Driver d{h.service()};
  const std::string ds = d.Register(RangePipeline(30, 10));
  auto job = d.MustJob(ds, service::SHARDING_DYNAMIC);
  const int64_t t1 = d.TaskOf("w1:1", job.job_id());
  CHECK(Indices(d.MustSplits(t1, 2)) == std::vector<uint64_t>{0, 1});
  d.Heartbeat("w1:1", {t1});
  auto after_restart = d.Heartbeat("w1:1", {});
  REQUIRE(after_restart.new_tasks_size() == 1);
  const int64_t fresh = after_restart.new_tasks(0).task_id();
  CHECK(fresh != t1);
  CHECK(MetricValue(h.registry(), "sluice_dispatcher_worker_removals_total", "restarted") == 1);
  CHECK(Indices(d.MustSplits(fresh, 5)) == std::vector<uint64_t>{0, 1, 2});
}

TEST_CASE("WorkerDeregister and DrainWorkers") {
  ServiceHarness h("");
  Driver d{h.service()};
  const std::string ds = d.Register(RangePipeline(100, 10));
  auto job = d.MustJob(ds, service::SHARDING_DYNAMIC, "train");
  const int64_t t1 = d.TaskOf("w1:1", job.job_id());
  const int64_t t2 = d.TaskOf("w2:1", job.job_id());
  d.Heartbeat("w3:1");

  service::DrainWorkersRequest drain;
  drain.add_worker_addresses("w1:1");
  drain.add_worker_addresses("gone:1");
  service::DrainWorkersResponse drained;
  REQUIRE(h.service().DrainWorkers(drain, &drained).ok());
  CHECK(std::vector<std::string>(drained.drained().begin(), drained.drained().end()) ==
        std::vector<std::string>{"w1:1"});
  // A draining worker takes no new splits and no new tasks.
  auto r = d.MustSplits(t1, 4);
  CHECK(r.splits_size() == 0);
  CHECK(!r.end_of_splits());
  auto job2 = d.MustJob(ds, service::SHARDING_OFF);
  CHECK(d.Heartbeat("w1:1", {t1}).new_tasks_size() == 0);
  CHECK(d.TaskOf("w2:1", job2.job_id()) > 0);
  service::DrainWorkersRequest bad;
  bad.add_worker_addresses("");
  CHECK(h.service().DrainWorkers(bad, &drained).code() == absl::StatusCode::kInvalidArgument);
  // An empty list drains nothing: it names the field (it used to mean "every worker").
  absl::Status empty = h.service().DrainWorkers({}, &drained);
  CHECK(empty.code() == absl::StatusCode::kInvalidArgument);
  CHECK(Contains(empty, "worker_addresses is empty"));
  service::DrainWorkersRequest both;
  both.set_all_workers(true);
  both.add_worker_addresses("w2:1");
  CHECK(h.service().DrainWorkers(both, &drained).code() == absl::StatusCode::kInvalidArgument);
  const auto unchanged = d.State();
  CHECK(unchanged.workers_size() == 3);
  for (const auto& w : unchanged.workers()) CHECK(w.draining() == (w.address() == "w1:1"));
  service::DrainWorkersRequest every;
  every.set_all_workers(true);
  service::DrainWorkersResponse all;
  REQUIRE(h.service().DrainWorkers(every, &all).ok());
  CHECK(all.drained_size() == 3);
  const auto state = d.State();
  for (const auto& w : state.workers()) CHECK(w.draining());

  CHECK(Indices(d.MustSplits(t2, 2)) == std::vector<uint64_t>{});  // w2 drains now too
  service::WorkerDeregisterRequest dereg;
  dereg.set_worker_address("nobody:1");
  service::WorkerDeregisterResponse dr;
  absl::Status s = h.service().WorkerDeregister(dereg, &dr);
  CHECK(s.code() == absl::StatusCode::kNotFound);
  CHECK(s.message() == "worker_address 'nobody:1' is not known");
  dereg.set_worker_address("w1:1");
  REQUIRE(h.service().WorkerDeregister(dereg, &dr).ok());
  CHECK(MetricValue(h.registry(), "sluice_dispatcher_worker_removals_total", "deregistered") == 1);
  CHECK(d.State().workers_size() == 2);
}

TEST_CASE("jobs without clients finish after the grace period - silent clients are released") {
  DispatcherOptions options;
  options.job_gc_grace = absl::Seconds(30);
  options.client_timeout = absl::Seconds(10);
  options.worker_timeout = absl::Hours(1);
  ServiceHarness h("", options);
  Driver d{h.service()};
  const std::string ds = d.Register(RangePipeline(100, 10));
  auto job = d.MustJob(ds, service::SHARDING_OFF, "train");
  const int64_t task = d.TaskOf("w1:1", job.job_id());
  service::ReleaseJobClientRequest rel;
  rel.set_job_client_id(job.job_client_id());
  service::ReleaseJobClientResponse rr;
  REQUIRE(h.service().ReleaseJobClient(rel, &rr).ok());
  h.clock().Advance(absl::Seconds(29));
  h.service().Tick();
  CHECK(!d.JobInfo(job.job_id()).finished());
  h.clock().Advance(absl::Seconds(2));
  h.service().Tick();
  CHECK(d.JobInfo(job.job_id()).finished());
  auto hb = d.Heartbeat("w1:1", {task});
  CHECK(std::vector<int64_t>(hb.tasks_to_delete().begin(), hb.tasks_to_delete().end()) == std::vector<int64_t>{task});
  // The name is free again: a new job.
  auto again = d.MustJob(ds, service::SHARDING_OFF, "train");
  CHECK(again.job_id() != job.job_id());
  // A client that stops heartbeating is released after client_timeout.
  h.clock().Advance(absl::Seconds(11));
  h.service().Tick();
  service::ClientHeartbeatRequest req;
  req.set_job_client_id(again.job_client_id());
  service::ClientHeartbeatResponse resp;
  CHECK(h.service().ClientHeartbeat(req, &resp).code() == absl::StatusCode::kNotFound);
  CHECK(d.JobInfo(again.job_id()).num_clients() == 0);
}

TEST_CASE("coordinated reads: one client per consumer index - a new one replaces the holder, which learns why") {
  ServiceHarness h("");
  Driver d{h.service()};
  const std::string ds = d.Register(RangePipeline(100, 10));
  d.Heartbeat("w1:1");
  service::GetOrCreateJobResponse first, second, third;
  REQUIRE(d.Job(ds, service::SHARDING_OFF, "coord", &first, 1, service::TARGET_WORKERS_ANY, "trainer-a", 2, 0).ok());
  REQUIRE(d.Job(ds, service::SHARDING_OFF, "coord", &second, 1, service::TARGET_WORKERS_ANY, "trainer-b", 2, 1).ok());
  service::GetOrCreateJobResponse bad;
  absl::Status s = d.Job(ds, service::SHARDING_OFF, "coord", &bad, 1, service::TARGET_WORKERS_ANY, "x", 2, 2);
  CHECK(s.code() == absl::StatusCode::kInvalidArgument);
  CHECK(Contains(s, "consumer_index is 2; must be in [0, 2)"));
  CHECK(d.JobInfo(first.job_id()).num_clients() == 2);
  // Trainer a restarts: its new client takes index 0 over.
  REQUIRE(d.Job(ds, service::SHARDING_OFF, "coord", &third, 1, service::TARGET_WORKERS_ANY, "trainer-a2", 2, 0).ok());
  CHECK(third.job_id() == first.job_id());
  CHECK(d.JobInfo(first.job_id()).num_clients() == 2);
  service::ClientHeartbeatRequest req;
  req.set_job_client_id(first.job_client_id());
  service::ClientHeartbeatResponse resp;
  s = h.service().ClientHeartbeat(req, &resp);
  CHECK(s.code() == absl::StatusCode::kFailedPrecondition);
  CHECK(Contains(s, absl::StrCat("was replaced by job client ", third.job_client_id(), " from host 'trainer-a2'")));
  CHECK(Contains(s, "consumer_index 0"));
  d.Client(second.job_client_id(), 3);  // the other consumer is untouched
  d.Client(third.job_client_id(), 3);
}

TEST_CASE("coordinated reads: a late worker starts at a round every consumer agreed to hold, also after a restart") {
  TempDir dir;
  ServiceHarness h(dir.path().string());
  REQUIRE(h.start_status().ok());
  std::string ds;
  int64_t job_id = 0;
  int64_t c0 = 0;
  {
    Driver d{h.service()};
    ds = d.Register(RangePipeline(100, 10));
    d.Heartbeat("w1:1");
    service::GetOrCreateJobResponse job;
    REQUIRE(d.Job(ds, service::SHARDING_OFF, "coord", &job, 1, service::TARGET_WORKERS_LOCAL, "elsewhere", 2).ok());
    job_id = job.job_id();
    c0 = job.job_client_id();
    service::GetOrCreateJobResponse second;
    REQUIRE(d.Job(ds, service::SHARDING_OFF, "coord", &second, 1, service::TARGET_WORKERS_LOCAL, "elsewhere", 2, 1).ok());
    const int64_t c1 = second.job_client_id();
    CHECK(d.Client(c0, 0).tasks().size() == 1);  // coordinated reads see every task regardless of locality
    d.Client(c0, 100);
    d.Client(c1, 98);
    // A worker joins: no task yet; the consumers are asked to hold round 100 + margin.
    auto hb = d.Heartbeat("w2:1");
    CHECK(hb.new_tasks_size() == 0);
    const int64_t proposed = 100 + kStartingRoundMargin;
    auto r0 = d.Client(c0, 101);
    CHECK(r0.block_round() == proposed);
    CHECK(r0.tasks_size() == 1);
    d.Client(c0, 102, {}, proposed);  // c0 holds it
    // c1 has already started that round (it raced ahead): a later round is proposed, further ahead.
    auto r1 = d.Client(c1, proposed);
    const int64_t again = proposed + 2 * kStartingRoundMargin;
    CHECK(r1.block_round() == again);
    // An acknowledgement of the old proposal counts for nothing.
    CHECK(d.Client(c0, 103, {}, proposed).block_round() == again);
    CHECK(d.Client(c1, proposed + 1, {}, again).block_round() == again);
    CHECK(d.State().workers_size() == 2);
    // The last consumer to hold the round completes the join: its answer lists the new task.
    auto done = d.Client(c0, 104, {}, again);
    CHECK(done.block_round() == 0);
    REQUIRE(done.tasks_size() == 2);
    CHECK(done.tasks(1).starting_round() == again);
    auto w2 = d.Heartbeat("w2:1");
    REQUIRE(w2.new_tasks_size() == 1);
    CHECK(w2.new_tasks(0).starting_round() == again);
    CHECK(w2.new_tasks(0).num_consumers() == 2);
    // A worker that leaves while joining is dropped from the join; releasing the last consumer
    // that did not hold the round completes it.
    d.Heartbeat("w3:1");
    auto r = d.Client(c0, 140);
    REQUIRE(r.block_round() > 140);
    d.Client(c0, 141, {}, r.block_round());
    service::ReleaseJobClientRequest release;
    release.set_job_client_id(c1);
    service::ReleaseJobClientResponse released;
    REQUIRE(h.service().ReleaseJobClient(release, &released).ok());
    auto after = d.Client(c0, 142);
    CHECK(after.block_round() == 0);
    CHECK(after.tasks_size() == 3);
    d.Client(c0, 150);
  }
  h.Restart();
  REQUIRE(h.start_status().ok());
  Driver d{h.service()};
  // No client has reported since the restart: the journaled watermark bounds the rounds.
  auto late = d.Heartbeat("w4:1");
  // The restarted dispatcher knows the job's client; the new worker waits for it to agree, on a
  // round past what it reached before the restart.
  CHECK(late.new_tasks_size() == 0);
  auto proposal = d.Client(c0, 151);
  CHECK(proposal.block_round() >= 151 + kStartingRoundMargin);
  auto joined = d.Client(c0, 151, {}, proposal.block_round());
  REQUIRE(joined.tasks_size() == 4);
  CHECK(joined.tasks(3).starting_round() == proposal.block_round());
  CHECK(joined.tasks(3).job_id() == job_id);
}


// ---------------------------------------------------------------- locality: tasks follow readers

// The workers (addresses) that hold a task of `job_id`, from GetState.
std::set<std::string> WorkersOf(Driver& d, int64_t job_id) {
  const auto state = d.State();
  std::set<std::string> out;
  // Heartbeats that list no task get every task of the worker in new_tasks.
  for (const auto& w : state.workers()) {
    auto resp = d.Heartbeat(w.address());
    for (const auto& t : resp.new_tasks()) {
      if (t.job_id() == job_id) out.insert(w.address());
    }
  }
  return out;
}

TEST_CASE("locality: a LOCAL job gets tasks only on its clients' hosts - a client from a new host adds its workers") {
  ServiceHarness h("");
  Driver d{h.service()};
  const std::string ds = d.Register(RangePipeline(100, 10));
  d.Heartbeat("hostA:1");
  d.Heartbeat("hostA:2");
  d.Heartbeat("hostB:1");
  using Set = std::set<std::string>;
  service::GetOrCreateJobResponse a;
  REQUIRE(d.Job(ds, service::SHARDING_DYNAMIC, "local", &a, 1, service::TARGET_WORKERS_LOCAL, "hostA").ok());
  CHECK(WorkersOf(d, a.job_id()) == Set{"hostA:1", "hostA:2"});
  // A worker on another host registering later gets no task; one on hostA does.
  CHECK(d.TaskOf("hostB:2", a.job_id()) == 0);
  CHECK(d.TaskOf("hostA:3", a.job_id()) > 0);
  // A second client of the job from hostB: hostB's workers join the job.
  service::GetOrCreateJobResponse b;
  REQUIRE(d.Job(ds, service::SHARDING_DYNAMIC, "local", &b, 1, service::TARGET_WORKERS_LOCAL, "hostB").ok());
  CHECK(b.job_id() == a.job_id());
  CHECK(WorkersOf(d, a.job_id()) == Set{"hostA:1", "hostA:2", "hostA:3", "hostB:1", "hostB:2"});
  // Each client is told its own host's tasks.
  std::set<std::string> seen_b;
  const auto heartbeat_b = d.Client(b.job_client_id());
  for (const auto& t : heartbeat_b.tasks()) seen_b.insert(t.worker_address());
  CHECK(seen_b == Set{"hostB:1", "hostB:2"});
  // An ANY client makes a job take every worker; LOCAL from a host without workers takes none
  // (the client waits for a local worker).
  service::GetOrCreateJobResponse any;
  REQUIRE(d.Job(ds, service::SHARDING_OFF, "", &any, 1, service::TARGET_WORKERS_ANY, "hostZ").ok());
  CHECK(WorkersOf(d, any.job_id()).size() == 5);
  service::GetOrCreateJobResponse nowhere;
  REQUIRE(d.Job(ds, service::SHARDING_DYNAMIC, "", &nowhere, 1, service::TARGET_WORKERS_LOCAL, "hostZ").ok());
  CHECK(WorkersOf(d, nowhere.job_id()).empty());
  CHECK(d.TaskOf("hostZ:1", nowhere.job_id()) > 0);
}

TEST_CASE("locality: LOCAL under dynamic sharding completes an epoch on the local workers alone") {
  ServiceHarness h("");
  Driver d{h.service()};
  const std::string ds = d.Register(RangePipeline(60, 10));  // 6 splits
  d.Heartbeat("hostA:1");
  d.Heartbeat("hostB:1");
  service::GetOrCreateJobResponse job;
  REQUIRE(d.Job(ds, service::SHARDING_DYNAMIC, "", &job, 1, service::TARGET_WORKERS_LOCAL, "hostA").ok());
  const int64_t task = d.TaskOf("hostA:1", job.job_id());
  REQUIRE(task > 0);
  CHECK(d.TaskOf("hostB:1", job.job_id()) == 0);
  std::vector<uint64_t> got = Indices(d.MustSplits(task, 8));
  CHECK(got.size() == 6);
  auto end = d.MustSplits(task, 8, got);
  CHECK(end.end_of_splits());
  d.Heartbeat("hostA:1", {task}, false, {task});
  CHECK(d.JobInfo(job.job_id()).finished());
}

TEST_CASE("locality: a dynamic task no remaining client reads gives its splits back") {
  ServiceHarness h("");
  Driver d{h.service()};
  const std::string ds = d.Register(RangePipeline(60, 10));  // 6 splits
  d.Heartbeat("hostA:1");
  d.Heartbeat("hostB:1");
  service::GetOrCreateJobResponse a, b;
  REQUIRE(d.Job(ds, service::SHARDING_DYNAMIC, "shared", &a, 1, service::TARGET_WORKERS_LOCAL, "hostA").ok());
  REQUIRE(d.Job(ds, service::SHARDING_DYNAMIC, "shared", &b, 1, service::TARGET_WORKERS_LOCAL, "hostB").ok());
  const int64_t ta = d.TaskOf("hostA:1", a.job_id());
  const int64_t tb = d.TaskOf("hostB:1", a.job_id());
  REQUIRE(ta > 0);
  REQUIRE(tb > 0);
  CHECK(Indices(d.MustSplits(tb, 2)) == std::vector<uint64_t>{0, 1});  // hostB took two, unstarted
  service::ReleaseJobClientRequest release;
  release.set_job_client_id(b.job_client_id());
  service::ReleaseJobClientResponse released;
  REQUIRE(h.service().ReleaseJobClient(release, &released).ok());
  // hostB's task is finished (no one reads it); its splits come back to hostA.
  std::vector<uint64_t> got = Indices(d.MustSplits(ta, 8));
  CHECK(got == std::vector<uint64_t>{0, 1, 2, 3, 4, 5});
  CHECK(d.MustSplits(ta, 8, got).end_of_splits());
}

TEST_CASE("locality: AUTO under SHARDING_OFF finishes when the local tasks it reads are done") {
  ServiceHarness h("");
  Driver d{h.service()};
  const std::string ds = d.Register(RangePipeline(10, 10));
  d.Heartbeat("hostB:1");
  service::GetOrCreateJobResponse job;
  // No worker on hostA yet: AUTO reads the remote one.
  REQUIRE(d.Job(ds, service::SHARDING_OFF, "", &job, 1, service::TARGET_WORKERS_AUTO, "hostA").ok());
  const int64_t remote = d.TaskOf("hostB:1", job.job_id());
  REQUIRE(remote > 0);
  // A local worker arrives: the job gets a task there, and the client reads only it.
  const int64_t local = d.TaskOf("hostA:1", job.job_id());
  REQUIRE(local > 0);
  auto listed = d.Client(job.job_client_id());
  REQUIRE(listed.tasks_size() == 1);
  CHECK(listed.tasks(0).task_id() == local);
  // The remote task, no longer read, does not hold the job up.
  d.Heartbeat("hostA:1", {local}, false, {local});
  CHECK(d.JobInfo(job.job_id()).finished());
}

TEST_CASE("locality: static sharding with LOCAL fixes the shards over the client's host's workers") {
  ServiceHarness h("");
  Driver d{h.service()};
  const std::string ds = d.Register(RangePipeline(100, 10));
  d.Heartbeat("hostA:1");
  d.Heartbeat("hostA:2");
  d.Heartbeat("hostB:1");
  service::GetOrCreateJobResponse job;
  REQUIRE(d.Job(ds, service::SHARDING_FILE, "", &job, 1, service::TARGET_WORKERS_LOCAL, "hostA").ok());
  std::map<std::string, std::pair<int32_t, int32_t>> shards;
  for (const std::string w : {"hostA:1", "hostA:2", "hostB:1"}) {
    const auto heartbeat = d.Heartbeat(w);
    for (const auto& t : heartbeat.new_tasks()) {
      if (t.job_id() == job.job_id()) shards[w] = {t.worker_index(), t.num_workers()};
    }
  }
  CHECK(shards.size() == 2);
  CHECK(shards["hostA:1"] == std::make_pair(0, 2));
  CHECK(shards["hostA:2"] == std::make_pair(1, 2));
  service::GetOrCreateJobResponse none;
  absl::Status s = d.Job(ds, service::SHARDING_DATA, "", &none, 1, service::TARGET_WORKERS_LOCAL, "hostZ");
  CHECK(s.code() == absl::StatusCode::kUnavailable);
  CHECK(Contains(s, "no worker on the client's host 'hostZ'"));
}

// ---------------------------------------------------------------- plugins

TEST_CASE("plugins: a pipeline naming a plugin outside --plugin_dir is refused before anything loads it") {
  TempDir allowed;
  TempDir outside;
  const std::string real = sluice::testing::BinaryDir() + "/dataplane/pipeline/libsluice_test_plugin.so";
  std::filesystem::copy_file(real, allowed.File("libops.so"));
  std::filesystem::copy_file(real, outside.File("libevil.so"));
  std::filesystem::create_symlink(outside.File("libevil.so"), allowed.File("link-out.so"));
  auto with_plugin = [](const std::string& path) {
    pipeline::PipelineDef def = RangePipeline(10, 5);
    def.add_plugins()->set_path(path);
    return def;
  };
  auto refused = [](Driver& d, const pipeline::PipelineDef& def) {
    service::RegisterDatasetRequest req;
    *req.mutable_pipeline() = def;
    service::RegisterDatasetResponse resp;
    return d.svc.RegisterDataset(req, &resp);
  };

  SECTION("without --plugin_dir every plugin is refused") {
    ServiceHarness h("");
    Driver d{h.service()};
    absl::Status s = refused(d, with_plugin(allowed.File("libops.so")));
    CHECK(s.code() == absl::StatusCode::kFailedPrecondition);
    CHECK(Contains(s, allowed.File("libops.so")));
    CHECK(Contains(s, "--plugin_dir"));
    CHECK(d.State().jobs_size() == 0);
  }
  SECTION("with --plugin_dir: inside loads; outside, via .. or a symlink, is refused") {
    DispatcherOptions options;
    options.plugin_dirs = {allowed.path().string()};
    ServiceHarness h("", options);
    Driver d{h.service()};
    for (const std::string& bad : {outside.File("libevil.so"), allowed.File("../") + outside.path().filename().string() + "/libevil.so",
                                   allowed.File("link-out.so"), std::string("libops.so"), allowed.File("missing.so")}) {
      absl::Status s = refused(d, with_plugin(bad));
      INFO(bad << ": " << s.ToString());
      CHECK(s.code() == absl::StatusCode::kFailedPrecondition);
      CHECK(Contains(s, "plugins[0]"));
      CHECK(Contains(s, "--plugin_dir"));
    }
    // The real plugin, inside the allowed directory, registers.
    auto spec = pipeline::ParsePipelineSpec(
        absl::StrCat("plugins: ['", allowed.File("libops.so"),
                     "']\nsource: {range: {stop: 4}}\nsteps:\n  - add_constant: {config: {field: value, add: 10}}\n"),
        "plugin.yaml");
    REQUIRE(spec.ok());
    const std::string id = d.Register(*spec);
    CHECK(!id.empty());
  }
}

// ---------------------------------------------------------------- default pipeline and sharing

TEST_CASE("default pipeline: an empty dataset_id reads it - without one it is FAILED_PRECONDITION") {
  TempDir dir;
  const std::string journal = dir.File("journal");
  std::string default_id;
  {
    ServiceHarness h(journal);
    Driver d{h.service()};
    d.Heartbeat("w1:1");
    service::GetOrCreateJobResponse job;
    absl::Status s = d.Job("", service::SHARDING_DYNAMIC, "train", &job);
    CHECK(s.code() == absl::StatusCode::kFailedPrecondition);
    CHECK(s.message() == "dataset_id is empty and this dispatcher serves no default pipeline (start it with --pipeline)");
    CHECK(d.State().jobs_size() == 0);
    CHECK(d.State().default_dataset_id().empty());
    auto id = h.service().SetDefaultPipeline(RangePipeline(30, 10));
    REQUIRE(id.ok());
    default_id = *id;
    CHECK(d.State().default_dataset_id() == default_id);
    REQUIRE(d.Job("", service::SHARDING_DYNAMIC, "train", &job).ok());
    CHECK(job.dataset_id() == default_id);
    CHECK(d.JobInfo(job.job_id()).spec().dataset_id() == default_id);
    // A second client naming the dataset explicitly joins the same job.
    service::GetOrCreateJobResponse same;
    REQUIRE(d.Job(default_id, service::SHARDING_DYNAMIC, "train", &same).ok());
    CHECK(same.job_id() == job.job_id());
    // Retention never forgets the default dataset, even unused.
    h.clock().Advance(absl::Hours(10));
    h.service().Tick();
    h.clock().Advance(absl::Hours(10));
    h.service().Tick();
    service::GetOrCreateJobResponse later;
    REQUIRE(d.Job("", service::SHARDING_OFF, "", &later).ok());
  }
  {
    // Registered through the journal like any dataset: after a restart it is known (the binary
    // registers its --pipeline again at every start).
    ServiceHarness h(journal);
    REQUIRE(h.start_status().ok());
    Driver d{h.service()};
    CHECK(d.State().default_dataset_id().empty());
    auto id = h.service().SetDefaultPipeline(RangePipeline(30, 10));
    REQUIRE(id.ok());
    CHECK(*id == default_id);
  }
}

TEST_CASE("sharing default: --sharing makes OFF jobs cross-job shared unless they say otherwise") {
  DispatcherOptions options;
  options.default_cross_job_sharing = true;
  ServiceHarness h("", options);
  Driver d{h.service()};
  const std::string ds = d.Register(RangePipeline(30, 10));
  d.Heartbeat("w1:1");
  auto job_with = [&](service::ShardingPolicy sharding, std::optional<bool> sharing, const std::string& name = "") {
    service::GetOrCreateJobRequest req;
    req.mutable_spec()->set_dataset_id(ds);
    req.mutable_spec()->set_sharding(sharding);
    req.mutable_spec()->set_job_name(name);
    if (sharing) req.mutable_spec()->set_cross_job_sharing(*sharing);
    req.set_client_host("h");
    service::GetOrCreateJobResponse resp;
    absl::Status s = h.service().GetOrCreateJob(req, &resp);
    INFO(s.ToString());
    REQUIRE(s.ok());
    return d.JobInfo(resp.job_id()).spec();
  };
  CHECK(job_with(service::SHARDING_OFF, std::nullopt).cross_job_sharing());
  CHECK(!job_with(service::SHARDING_OFF, false).cross_job_sharing());
  CHECK(!job_with(service::SHARDING_DYNAMIC, std::nullopt).cross_job_sharing());
  // The task the worker gets says so.
  auto shared = job_with(service::SHARDING_OFF, std::nullopt, "shared");
  CHECK(shared.has_cross_job_sharing());
  bool sharing_task = false;
  const auto heartbeat = d.Heartbeat("w1:1");
  for (const auto& t : heartbeat.new_tasks()) sharing_task |= t.cross_job_sharing();
  CHECK(sharing_task);
  // A named job compares the resolved value: unset matches a shared job, false does not.
  service::GetOrCreateJobRequest again;
  again.mutable_spec()->set_dataset_id(ds);
  again.mutable_spec()->set_job_name("shared");
  service::GetOrCreateJobResponse resp;
  CHECK(h.service().GetOrCreateJob(again, &resp).ok());
  again.mutable_spec()->set_cross_job_sharing(false);
  absl::Status s = h.service().GetOrCreateJob(again, &resp);
  CHECK(s.code() == absl::StatusCode::kFailedPrecondition);
  CHECK(Contains(s, "cross_job_sharing true, request has false"));

  ServiceHarness plain("");
  Driver p{plain.service()};
  const std::string ds2 = p.Register(RangePipeline(30, 10));
  service::GetOrCreateJobRequest req;
  req.mutable_spec()->set_dataset_id(ds2);
  service::GetOrCreateJobResponse r2;
  REQUIRE(plain.service().GetOrCreateJob(req, &r2).ok());
  CHECK(!p.JobInfo(r2.job_id()).spec().cross_job_sharing());
}

// The dispatcher's own gauges and counters, read from its registry: unfinished jobs, the journal's
// bytes (against the files in its directory), snapshots (one per compaction), and the clients'
// decoded bytes per job.
TEST_CASE("metrics: jobs, journal bytes and snapshots follow the state and the journal - client bytes per job") {
  TempDir tmp;
  const std::string dir = tmp.File("journal");
  auto dir_bytes = [&] {
    int64_t total = 0;
    for (const auto& e : std::filesystem::directory_iterator(dir)) total += static_cast<int64_t>(e.file_size());
    return total;
  };
  auto metric = [](ServiceHarness& h, const std::string& name) { return MetricValue(h.registry(), name); };

  SECTION("without snapshots: jobs come and go, the journal only grows") {
    DispatcherOptions options;
    options.snapshot_every = 0;
    options.job_gc_grace = absl::Seconds(10);
    ServiceHarness h(dir, options);
    Driver d{h.service()};
    h.service().Tick();
    CHECK(metric(h, "sluice_dispatcher_jobs") == 0);
    const std::string ds = d.Register(RangePipeline(100, 10));
    auto a = d.MustJob(ds, service::SHARDING_DYNAMIC, "a");
    auto b = d.MustJob(ds, service::SHARDING_OFF, "b");
    auto b2 = d.MustJob(ds, service::SHARDING_OFF, "b");
    h.service().Tick();
    h.service().Tick();  // the second tick sees what the first one synced
    CHECK(metric(h, "sluice_dispatcher_jobs") == 2);
    const double bytes_with_jobs = metric(h, "sluice_dispatcher_journal_bytes");
    CHECK(bytes_with_jobs > 0);
    CHECK(bytes_with_jobs == dir_bytes());

    // The clients' decoded bytes: the increases of each client's totals, summed per job.
    service::ClientMetrics m;
    m.set_bytes_total(1000);
    d.Client(b.job_client_id(), 0, m);
    m.set_bytes_total(1500);
    d.Client(b.job_client_id(), 0, m);
    service::ClientMetrics m2;
    m2.set_bytes_total(300);
    d.Client(b2.job_client_id(), 0, m2);
    CHECK(MetricValue(h.registry(), "sluice_client_bytes_total", "b") == Approx(1800));
    CHECK(MetricValue(h.registry(), "sluice_client_bytes_total", "a") == Approx(0));

    // Job b loses its clients and finishes after the grace period: one job left, more journal.
    for (int64_t client : {b.job_client_id(), b2.job_client_id()}) {
      service::ReleaseJobClientRequest rel;
      rel.set_job_client_id(client);
      service::ReleaseJobClientResponse rr;
      REQUIRE(h.service().ReleaseJobClient(rel, &rr).ok());
    }
    h.clock().Advance(absl::Seconds(11));
    h.service().Tick();
    h.service().Tick();
    CHECK(d.JobInfo(b.job_id()).finished());
    CHECK_FALSE(d.JobInfo(a.job_id()).finished());
    CHECK(metric(h, "sluice_dispatcher_jobs") == 1);
    CHECK(metric(h, "sluice_dispatcher_journal_bytes") > bytes_with_jobs);
    CHECK(metric(h, "sluice_dispatcher_journal_bytes") == dir_bytes());
    CHECK(metric(h, "sluice_dispatcher_snapshots_total") == 0);
  }

  SECTION("with --snapshot_every: one snapshot per tick that finds enough updates") {
    DispatcherOptions options;
    options.snapshot_every = 4;
    ServiceHarness h(dir, options);
    Driver d{h.service()};
    h.service().Tick();
    CHECK(metric(h, "sluice_dispatcher_snapshots_total") == 0);  // nothing journaled yet
    const std::string ds = d.Register(RangePipeline(100, 10));
    for (int i = 0; i < 4; ++i) d.MustJob(ds, service::SHARDING_OFF, absl::StrCat("job", i));
    h.service().Tick();  // 5 updates: due
    CHECK(metric(h, "sluice_dispatcher_snapshots_total") == 1);
    CHECK(h.journal()->snapshots_written() == 1);
    h.service().Tick();  // nothing new
    CHECK(metric(h, "sluice_dispatcher_snapshots_total") == 1);
    d.MustJob(ds, service::SHARDING_OFF, "one-more");
    h.service().Tick();  // 1 update: not due
    CHECK(metric(h, "sluice_dispatcher_snapshots_total") == 1);
    for (int i = 0; i < 3; ++i) d.MustJob(ds, service::SHARDING_OFF, absl::StrCat("more", i));
    h.service().Tick();  // 4 updates: due
    CHECK(metric(h, "sluice_dispatcher_snapshots_total") == 2);
    CHECK(h.journal()->snapshots_written() == 2);
    h.service().Tick();
    CHECK(metric(h, "sluice_dispatcher_journal_bytes") == dir_bytes());
    CHECK(metric(h, "sluice_dispatcher_jobs") == 8);
    // A restarted dispatcher is a new process: its counter starts again (its gauges do not).
    h.Restart();
    h.service().Tick();
    CHECK(metric(h, "sluice_dispatcher_snapshots_total") == 0);
    CHECK(metric(h, "sluice_dispatcher_jobs") == 8);
    CHECK(metric(h, "sluice_dispatcher_journal_bytes") == dir_bytes());
  }
}

}  // namespace
}  // namespace sluice::dispatcher
