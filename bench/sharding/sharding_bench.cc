#include "bench/sharding/sharding_bench.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "bench/dataservice/bench_report.h"
#include "bench/dataservice/bench_service.h"
#include "bench/dataservice/trial_spread.h"
#include "common/log.h"
#include "dataplane/client/data_service_client.h"

namespace sluice::bench {
namespace {

constexpr double kTargetRatio = 0.9;

absl::Status ValidateOptions(const ShardingBenchOptions& o) {
  if (o.workers < 1 || o.workers > 16) return absl::InvalidArgumentError(absl::StrCat("--workers must be in [1, 16], got ", o.workers));
  if (o.trials < 1) return absl::InvalidArgumentError(absl::StrCat("--trials must be >= 1, got ", o.trials));
  if (o.elements_per_epoch < 1) {
    return absl::InvalidArgumentError(absl::StrCat("--elements must be >= 1, got ", o.elements_per_epoch));
  }
  if (o.split_size < 1) return absl::InvalidArgumentError(absl::StrCat("--split_size must be >= 1, got ", o.split_size));
  if (o.num_epochs < 1) return absl::InvalidArgumentError(absl::StrCat("--epochs must be >= 1, got ", o.num_epochs));
  if (o.image_size < 2 || o.image_size > 4096) {
    return absl::InvalidArgumentError(absl::StrCat("--image_size must be in [2, 4096], got ", o.image_size));
  }
  if (o.cpu_budget < 0) return absl::InvalidArgumentError(absl::StrCat("--cpu_budget must be >= 0, got ", o.cpu_budget));
  return absl::OkStatus();
}

int Fail(const absl::Status& status, const std::string& log_dir) {
  std::cerr << "sharding: " << status.message() << "\n";
  if (!log_dir.empty()) std::cerr << "sharding: the processes' logs are kept in " << log_dir << "\n";
  return 1;
}

// One trial: a fresh anonymous job of `def` with `sharding`, read until `total` elements arrived.
absl::StatusOr<ShardingTrial> RunTrial(local::LocalDataService& ds, CountingDispatcherProxy& proxy,
                                       const pipeline::PipelineDef& def, service::ShardingPolicy sharding,
                                       const ShardingBenchOptions& o) {
  const int64_t total = o.num_epochs * o.elements_per_epoch;
  client::DataServiceClientOptions co;
  co.dispatcher_address = ds.dispatcher_address();
  co.pipeline = def;
  co.sharding = sharding;
  co.num_epochs = o.num_epochs;
  co.compression = service::COMPRESSION_NONE;
  co.heartbeat_interval = absl::Milliseconds(100);
  proxy.ResetCounts();
  auto created = client::DataServiceClient::Create(co);
  if (!created.ok()) return created.status();
  std::unique_ptr<client::DataServiceClient> c = *std::move(created);
  ShardingTrial trial;
  absl::flat_hash_map<uint64_t, int64_t> seen;  // key -> times (DYNAMIC: num_epochs each)
  absl::Time first = absl::InfiniteFuture(), last = absl::InfiniteFuture();
  while (trial.elements < total) {
    auto next = c->GetNext(absl::Seconds(60));
    if (!next.ok()) return next.status();
    if (!next->has_value()) break;
    last = absl::Now();
    if (first == absl::InfiniteFuture()) first = last;
    ++trial.elements;
    if (sharding == service::SHARDING_DYNAMIC) ++seen[(*next)->key()];
  }
  if (sharding == service::SHARDING_DYNAMIC) {
    // The job should end right after the last element: confirm, without counting that wait.
    auto end = c->GetNext(absl::Seconds(60));
    if (!end.ok()) return end.status();
    if (end->has_value()) {
      return absl::DataLossError(absl::StrCat("the distributed epoch yielded more than ", total, " elements"));
    }
    bool exactly = static_cast<int64_t>(seen.size()) == o.elements_per_epoch;
    for (const auto& [key, n] : seen) exactly = exactly && n == o.num_epochs;
    trial.distinct_elements = static_cast<int64_t>(seen.size());
    if (!exactly || trial.elements != total) {
      return absl::DataLossError(absl::StrCat("the distributed epoch delivered ", trial.elements, " elements (",
                                              seen.size(), " distinct) instead of ", o.num_epochs, " x ",
                                              o.elements_per_epoch, " exactly once each"));
    }
  } else if (trial.elements < total) {
    return absl::DataLossError(absl::StrCat("the parallel-epochs job ended after ", trial.elements, " of ", total,
                                            " elements"));
  }
  trial.calls = proxy.counts();
  const double seconds = absl::ToDoubleSeconds(last - first);
  trial.elements_per_second = seconds > 0 ? static_cast<double>(trial.elements - 1) / seconds : 0;
  c->Cancel();
  return trial;
}

// Every "dynamic sharding epoch done" line in the workers' logs under `log_dir`.
std::vector<DynamicEpochLog> ReadDynamicEpochLogs(const std::string& log_dir) {
  std::vector<DynamicEpochLog> out;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(log_dir, ec)) {
    if (!absl::StartsWith(entry.path().filename().string(), "worker-")) continue;
    std::ifstream in(entry.path());
    std::string line;
    while (std::getline(in, line)) {
      if (auto e = ParseDynamicEpochLog(line); e.has_value()) out.push_back(*e);
    }
  }
  return out;
}

}  // namespace

std::optional<DynamicEpochLog> ParseDynamicEpochLog(absl::string_view line) {
  constexpr absl::string_view kMsg = "msg=\"dynamic sharding epoch done\"";
  const size_t at = line.find(kMsg);
  if (at == absl::string_view::npos) return std::nullopt;
  DynamicEpochLog e;
  const absl::flat_hash_map<absl::string_view, int64_t*> ints = {
      {"task_id", &e.task_id}, {"epoch", &e.epoch}, {"elements", &e.elements}, {"splits", &e.splits}, {"rpcs", &e.rpcs}};
  const absl::flat_hash_map<absl::string_view, double*> doubles = {
      {"seconds", &e.seconds},
      {"rpc_seconds", &e.rpc_seconds},
      {"wait_first_split_seconds", &e.wait_first_split_seconds},
      {"wait_split_seconds", &e.wait_split_seconds},
      {"wait_end_seconds", &e.wait_end_seconds},
      {"wait_ack_seconds", &e.wait_ack_seconds},
      {"wait_lease_seconds", &e.wait_lease_seconds},
      {"wait_epoch_end_seconds", &e.wait_epoch_end_seconds}};
  int found = 0;
  for (absl::string_view field : absl::StrSplit(line.substr(at + kMsg.size()), ' ', absl::SkipEmpty())) {
    const size_t eq = field.find('=');
    if (eq == absl::string_view::npos) continue;
    const absl::string_view key = field.substr(0, eq), value = field.substr(eq + 1);
    if (auto it = ints.find(key); it != ints.end()) {
      if (!absl::SimpleAtoi(value, it->second)) return std::nullopt;
      ++found;
    } else if (auto dt = doubles.find(key); dt != doubles.end()) {
      if (!absl::SimpleAtod(value, dt->second)) return std::nullopt;
      ++found;
    }
  }
  if (found != static_cast<int>(ints.size() + doubles.size())) return std::nullopt;
  return e;
}

nlohmann::json DynamicEpochsJson(const std::vector<DynamicEpochLog>& epochs) {
  DynamicEpochLog sum;
  for (const auto& e : epochs) {
    sum.elements += e.elements;
    sum.splits += e.splits;
    sum.rpcs += e.rpcs;
    sum.seconds += e.seconds;
    sum.rpc_seconds += e.rpc_seconds;
    sum.wait_first_split_seconds += e.wait_first_split_seconds;
    sum.wait_split_seconds += e.wait_split_seconds;
    sum.wait_end_seconds += e.wait_end_seconds;
    sum.wait_ack_seconds += e.wait_ack_seconds;
    sum.wait_lease_seconds += e.wait_lease_seconds;
    sum.wait_epoch_end_seconds += e.wait_epoch_end_seconds;
  }
  const double n = static_cast<double>(epochs.size());
  const double waited = sum.wait_first_split_seconds + sum.wait_split_seconds + sum.wait_end_seconds +
                        sum.wait_ack_seconds + sum.wait_lease_seconds + sum.wait_epoch_end_seconds;
  return {{"task_epochs", epochs.size()},
          {"elements_per_task_epoch", Round(Ratio(static_cast<double>(sum.elements), n), 1)},
          {"splits_per_task_epoch", Round(Ratio(static_cast<double>(sum.splits), n), 2)},
          {"seconds_per_task_epoch", Round(Ratio(sum.seconds, n), 4)},
          {"getsplits_per_split", Round(Ratio(static_cast<double>(sum.rpcs), static_cast<double>(sum.splits)), 2)},
          {"getsplits_mean_ms", Round(1e3 * Ratio(sum.rpc_seconds, static_cast<double>(sum.rpcs)), 3)},
          {"wait_first_split_fraction", Round(Ratio(sum.wait_first_split_seconds, sum.seconds), 4)},
          {"wait_split_fraction", Round(Ratio(sum.wait_split_seconds, sum.seconds), 4)},
          {"wait_end_fraction", Round(Ratio(sum.wait_end_seconds, sum.seconds), 4)},
          {"wait_ack_fraction", Round(Ratio(sum.wait_ack_seconds, sum.seconds), 4)},
          {"wait_lease_fraction", Round(Ratio(sum.wait_lease_seconds, sum.seconds), 4)},
          {"wait_epoch_end_fraction", Round(Ratio(sum.wait_epoch_end_seconds, sum.seconds), 4)},
          {"wait_fraction", Round(Ratio(waited, sum.seconds), 4)},
          {"wait_ack_ms_per_split", Round(1e3 * Ratio(sum.wait_ack_seconds, static_cast<double>(sum.splits)), 3)}};
}

std::string ShardingPipelineSpec(const ShardingBenchOptions& o) {
  const int half = std::max(1, o.image_size / 2);
  return absl::StrCat("name: sharding-bench\n",
                      "source: {synthetic: {count: ", o.elements_per_epoch, ", shape: [", o.image_size, ", ",
                      o.image_size, ", 3], dtype: uint8, split_size: ", o.split_size, "}}\n",
                      "steps:\n",
                      "  - map:\n",
                      "      parallelism: 1\n",
                      "      ops:\n",
                      "        - resize: {field: data, size: [", half, "]}\n",
                      "        - normalize: {field: data, mean: [0.485, 0.456, 0.406], std: [0.229, 0.224, 0.225]}\n",
                      "options: {cpu_budget: ", o.cpu_budget, "}\n");
}

nlohmann::json ShardingResultJson(const std::vector<ShardingTrial>& dynamic, const std::vector<ShardingTrial>& off,
                                  const std::vector<ShardingTrial>& counted_dynamic,
                                  const std::vector<ShardingTrial>& counted_off, int64_t splits_per_epoch,
                                  const ShardingBenchOptions& o, double target, const nlohmann::json& extra) {
  std::vector<double> dyn_eps, off_eps;
  for (const auto& t : dynamic) dyn_eps.push_back(t.elements_per_second);
  for (const auto& t : off) off_eps.push_back(t.elements_per_second);
  DispatcherCallCounts sum;
  for (const auto& t : counted_dynamic) {
    sum.get_splits_calls += t.calls.get_splits_calls;
    sum.fetch_calls += t.calls.fetch_calls;
    sum.ack_only_calls += t.calls.ack_only_calls;
    sum.fetches_with_splits += t.calls.fetches_with_splits;
    sum.splits_handed_out += t.calls.splits_handed_out;
    sum.starts_acknowledged += t.calls.starts_acknowledged;
    sum.end_of_splits_answers += t.calls.end_of_splits_answers;
    sum.empty_answers += t.calls.empty_answers;
  }
  int64_t off_calls = 0;
  for (const auto& t : counted_off) off_calls += t.calls.get_splits_calls;
  std::vector<double> counted_dyn_eps, counted_off_eps;
  for (const auto& t : counted_dynamic) counted_dyn_eps.push_back(t.elements_per_second);
  for (const auto& t : counted_off) counted_off_eps.push_back(t.elements_per_second);
  const double dyn = Median(dyn_eps), par = Median(off_eps);
  const double ratio = Ratio(dyn, par);
  // Trial i of each mode ran next to each other (D O, then O D: ABBA), so their ratio pairs them.
  std::vector<double> pair_ratios;
  for (size_t i = 0; i < dyn_eps.size() && i < off_eps.size(); ++i) {
    if (off_eps[i] > 0) pair_ratios.push_back(dyn_eps[i] / off_eps[i]);
  }
  nlohmann::json out = {
      {"benchmark", "sharding"},
      {"ratio", Round(ratio, 3)},
      {"dynamic_elements_per_second", Round(dyn, 1)},
      {"off_elements_per_second", Round(par, 1)},
      {"dynamic_spread", TrialSpreadJson(SpreadOfRuns(dyn_eps), 1)},
      {"off_spread", TrialSpreadJson(SpreadOfRuns(off_eps), 1)},
      {"ratio_per_pair", TrialSpreadJson(SpreadOfRuns(pair_ratios), 3)},
      {"dynamic_trials", nlohmann::json::array()},
      {"off_trials", nlohmann::json::array()},
      {"target_ratio", target},
      {"meets_target", ratio >= target},
      {"workers", o.workers},
      {"elements_per_epoch", o.elements_per_epoch},
      {"num_epochs", o.num_epochs},
      {"splits_per_epoch", splits_per_epoch},
      {"getsplits_calls", sum.get_splits_calls},
      {"fetch_calls", sum.fetch_calls},
      {"ack_only_calls", sum.ack_only_calls},
      {"fetches_with_splits", sum.fetches_with_splits},
      {"splits_handed_out", sum.splits_handed_out},
      {"splits_expected", splits_per_epoch * o.num_epochs * static_cast<int64_t>(counted_dynamic.size())},
      {"splits_per_fetch", Round(Ratio(static_cast<double>(sum.splits_handed_out),
                                       static_cast<double>(sum.fetches_with_splits)), 2)},
      {"splits_per_call", Round(Ratio(static_cast<double>(sum.splits_handed_out),
                                      static_cast<double>(sum.get_splits_calls)), 2)},
      {"starts_acknowledged", sum.starts_acknowledged},
      {"end_of_splits_answers", sum.end_of_splits_answers},
      {"empty_answers", sum.empty_answers},
      {"getsplits_calls_sharding_off", off_calls},
      {"counted_trials", counted_dynamic.size()},
      {"dynamic_via_proxy_elements_per_second", Round(Median(counted_dyn_eps), 1)},
      {"off_via_proxy_elements_per_second", Round(Median(counted_off_eps), 1)},
  };
  for (double v : dyn_eps) out["dynamic_trials"].push_back(Round(v, 1));
  for (double v : off_eps) out["off_trials"].push_back(Round(v, 1));
  for (const auto& [key, value] : extra.items()) out[key] = value;
  return out;
}

void AddShardingBenchFlags(CLI::App* app, ShardingBenchOptions& o) {
  app->add_option("--workers", o.workers, "workers")->capture_default_str();
  app->add_option("--trials", o.trials, "trials per mode (modes alternate)")->capture_default_str();
  app->add_option("--elements", o.elements_per_epoch, "elements per epoch")->capture_default_str();
  app->add_option("--split_size", o.split_size, "elements per split")->capture_default_str();
  app->add_option("--epochs", o.num_epochs, "epochs per trial")->capture_default_str();
  app->add_option("--image_size", o.image_size, "side of the synthetic images (pixels)")->capture_default_str();
  app->add_option("--cpu_budget", o.cpu_budget, "threads per task pipeline on the workers")->capture_default_str();
  app->add_option("--bin_dir", o.bin_dir, "directory of sluice-dispatcher and sluice-worker (default: this binary's)");
  app->add_flag("--keep_logs", o.keep_logs, "keep the processes' logs");
}

int RunShardingBenchmark(const ShardingBenchOptions& o) {
  if (absl::Status s = ValidateOptions(o); !s.ok()) return Fail(s, "");
  log::SetMinLevel(log::Level::kWarning);  // the client's start-up lines would drown the progress
  auto def = ParseBenchPipeline(ShardingPipelineSpec(o), "sharding");
  if (!def.ok()) return Fail(def.status(), "");
  const int64_t splits_per_epoch = (o.elements_per_epoch + o.split_size - 1) / o.split_size;
  const MachineInfo machine = ReadMachineInfo();
  auto log_dir = MakeLogDir("sharding");
  if (!log_dir.ok()) return Fail(log_dir.status(), "");
  std::cerr << "sharding: starting sluice-dispatcher, a counting proxy and " << o.workers
            << " sluice-worker processes (logs in " << *log_dir << ")" << std::endl;
  auto ds = StartBenchService(BenchServiceOptions(o.bin_dir, *log_dir, {"--job_gc_grace_ms=0", "--tick_interval_ms=50"}));
  if (!ds.ok()) return Fail(ds.status(), *log_dir);
  auto proxy = CountingDispatcherProxy::Start((*ds)->dispatcher_address());
  if (!proxy.ok()) return Fail(proxy.status(), *log_dir);

  // Runs `trials` trials per mode (ABBA order) on the current workers.
  auto run_trials = [&](int trials, const char* phase, std::vector<ShardingTrial>& dynamic,
                        std::vector<ShardingTrial>& off) -> absl::Status {
    for (int i = 0; i < o.workers; ++i) {
      if (absl::Status s = AddBenchWorker(**ds); !s.ok()) return s;
    }
    if (absl::Status s = (*ds)->WaitForWorkers(o.workers, absl::Seconds(20)); !s.ok()) return s;
    for (int trial = 0; trial < trials; ++trial) {
      for (int side = 0; side < 2; ++side) {
        const bool dyn = (side == 0) == (trial % 2 == 0);
        if (absl::Status s = (*ds)->WaitForJobsFinished(absl::Seconds(20)); !s.ok()) return s;
        auto t = RunTrial(**ds, **proxy, *def, dyn ? service::SHARDING_DYNAMIC : service::SHARDING_OFF, o);
        if (!t.ok()) {
          return absl::Status(t.status().code(), absl::StrCat(phase, " ", dyn ? "DYNAMIC" : "OFF", " trial ",
                                                              trial + 1, " failed: ", t.status().message()));
        }
        std::fprintf(stderr, "sharding: %s trial %d/%d %-7s %9.1f elements/s", phase, trial + 1, trials,
                    dyn ? "dynamic" : "off", t->elements_per_second);
        if (t->calls.get_splits_calls > 0) {
          std::fprintf(stderr, "  GetSplits: %lld calls (%lld fetches, %lld with splits, %lld polls; %lld ack-only), %lld splits",
                      static_cast<long long>(t->calls.get_splits_calls), static_cast<long long>(t->calls.fetch_calls),
                      static_cast<long long>(t->calls.fetches_with_splits),
                      static_cast<long long>(t->calls.empty_answers), static_cast<long long>(t->calls.ack_only_calls),
                      static_cast<long long>(t->calls.splits_handed_out));
        }
        std::fprintf(stderr, "\n");
        (dyn ? dynamic : off).push_back(*t);
      }
    }
    return StopAllWorkers(**ds);
  };
  // Timed: workers talk to the dispatcher directly.
  std::vector<ShardingTrial> dynamic, off, counted_dynamic, counted_off;
  if (absl::Status s = run_trials(o.trials, "timed", dynamic, off); !s.ok()) return Fail(s, *log_dir);
  // Only the timed trials' workers have logged so far.
  const std::vector<DynamicEpochLog> epochs = ReadDynamicEpochLogs(*log_dir);
  const nlohmann::json waits = DynamicEpochsJson(epochs);
  std::cerr << "sharding: DYNAMIC workers' split readers during the timed trials: " << waits.dump() << std::endl;
  // Counted: new workers reach the dispatcher through the proxy.
  (*ds)->set_worker_dispatcher_address((*proxy)->address());
  if (absl::Status s = run_trials(1, "counted", counted_dynamic, counted_off); !s.ok()) return Fail(s, *log_dir);
  const MachineInfo after = ReadMachineInfo();
  nlohmann::json extra = {
      {"mode", "processes: sluice-dispatcher + workers, client in the benchmark process; timed trials direct, "
               "counted trials through a counting proxy"},
      {"pipeline", "synthetic uint8 images -> resize to half -> normalize (float32)"},
      {"image_size", o.image_size},
      {"split_size", o.split_size},
      {"trials", o.trials},
      {"machine", ToJson(machine)},
      {"load_avg_after", {after.load1, after.load5, after.load15}},
      {"dynamic_split_reader", waits},
  };
  StopBenchService(*ds);
  proxy->reset();
  if (!o.keep_logs) RemoveLogDir(*log_dir);
  std::cout << ShardingResultJson(dynamic, off, counted_dynamic, counted_off, splits_per_epoch, o, kTargetRatio, extra)
                   .dump()
            << std::endl;
  return 0;
}

}  // namespace sluice::bench
