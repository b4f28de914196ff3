#include "bench/sharding/sharding_bench.h"

#include <catch2/catch.hpp>

#include "bench/dataservice/bench_report.h"
#include "dataplane/pipeline/pipeline.h"

namespace sluice::bench {
namespace {

TEST_CASE("The sharding pipeline lists one split per split_size elements and yields normalised images") {
  ShardingBenchOptions o;
  o.elements_per_epoch = 100;
  o.split_size = 32;
  o.image_size = 16;
  auto def = ParseBenchPipeline(ShardingPipelineSpec(o), "sharding");
  REQUIRE(def.ok());
  auto p = pipeline::Pipeline::Create(*def);
  REQUIRE(p.ok());
  auto splits = (*p)->ListSplits();
  REQUIRE(splits.ok());
  CHECK(splits->size() == 4);  // 32 + 32 + 32 + 4
  auto it = (*p)->MakeIterator();
  REQUIRE(it.ok());
  auto e = (*it)->Next();
  REQUIRE(e.ok());
  REQUIRE(e->has_value());
  const pipeline::Tensor* data = (*e)->Find("data");
  REQUIRE(data != nullptr);
  CHECK(data->dtype() == pipeline::DType::kFloat32);
  CHECK(data->nbytes() == 8 * 8 * 3 * 4);
}

ShardingTrial Trial(double eps, int64_t calls, int64_t splits) {
  ShardingTrial t;
  t.elements_per_second = eps;
  t.calls.get_splits_calls = calls;
  t.calls.fetch_calls = calls / 2;
  t.calls.fetches_with_splits = calls / 4;
  t.calls.ack_only_calls = calls - calls / 2;
  t.calls.splits_handed_out = splits;
  return t;
}

TEST_CASE("ShardingResultJson: ratio of the timed medians, GetSplits batching from the counted trials") {
  ShardingBenchOptions o;
  o.num_epochs = 2;
  auto j = ShardingResultJson({Trial(90, 0, 0), Trial(95, 0, 0), Trial(80, 0, 0)},
                              {Trial(100, 0, 0), Trial(100, 0, 0), Trial(110, 0, 0)},
                              {Trial(70, 20, 100), Trial(75, 22, 100), Trial(60, 21, 100)}, {Trial(99, 0, 0)}, 50, o,
                              0.9, {{"mode", "x"}});
  CHECK(j["benchmark"] == "sharding");
  CHECK(j["ratio"].get<double>() == Approx(0.9));
  CHECK(j["meets_target"] == true);
  CHECK(j["dynamic_elements_per_second"].get<double>() == Approx(90));
  CHECK(j["off_elements_per_second"].get<double>() == Approx(100));
  CHECK(j["getsplits_calls"] == 63);
  CHECK(j["splits_handed_out"] == 300);
  CHECK(j["splits_expected"] == 300);  // 50 per epoch x 2 epochs x 3 trials
  CHECK(j["splits_per_call"].get<double>() == Approx(4.76));
  CHECK(j["fetch_calls"] == 31);  // 10 + 11 + 10
  CHECK(j["ack_only_calls"] == 32);
  CHECK(j["splits_per_fetch"].get<double>() == Approx(20.0));  // 300 / (5 + 5 + 5)
  CHECK(j["getsplits_calls_sharding_off"] == 0);
  CHECK(j["dynamic_trials"].size() == 3);
  CHECK(j["counted_trials"] == 3);
  CHECK(j["dynamic_via_proxy_elements_per_second"].get<double>() == Approx(70));
  CHECK(j["off_via_proxy_elements_per_second"].get<double>() == Approx(99));
  CHECK(j["mode"] == "x");
  // Medians and spreads of the timed trials, and the ratios of the adjacent (ABBA) pairs.
  CHECK(j["dynamic_spread"]["median"].get<double>() == Approx(90));
  CHECK(j["dynamic_spread"]["min"].get<double>() == Approx(80));
  CHECK(j["dynamic_spread"]["max"].get<double>() == Approx(95));
  CHECK(j["dynamic_spread"]["n"] == 3);
  CHECK(j["off_spread"]["relative_range"].get<double>() == Approx(0.1));
  CHECK(j["ratio_per_pair"]["n"] == 3);
  CHECK(j["ratio_per_pair"]["min"].get<double>() == Approx(0.727));  // 80 / 110
  CHECK(j["ratio_per_pair"]["max"].get<double>() == Approx(0.95));
  CHECK(j["ratio_per_pair"]["median"].get<double>() == Approx(0.9));

  auto slow = ShardingResultJson({Trial(50, 0, 0)}, {Trial(100, 0, 0)}, {}, {}, 1, o, 0.9, {});
  CHECK(slow["meets_target"] == false);
  auto none = ShardingResultJson({}, {}, {}, {}, 1, o, 0.9, {});
  CHECK(none["ratio"] == 0);
  CHECK(none["splits_per_call"] == 0);
}

TEST_CASE("ParseDynamicEpochLog reads the workers' epoch lines and nothing else") {
  const std::string line =
      "ts=2026-11-29T03:10:00.123Z level=info component=worker msg=\"dynamic sharding epoch done\" task_id=7 epoch=1 "
      "elements=4096 seconds=1.25 splits=32 rpcs=70 rpc_seconds=0.07 wait_first_split_seconds=0.01 "
      "wait_split_seconds=0.05 wait_end_seconds=0.03 wait_ack_seconds=0.04 "
      "wait_lease_seconds=0 wait_epoch_end_seconds=0.002";
  auto e = ParseDynamicEpochLog(line);
  REQUIRE(e.has_value());
  CHECK(e->task_id == 7);
  CHECK(e->epoch == 1);
  CHECK(e->elements == 4096);
  CHECK(e->splits == 32);
  CHECK(e->rpcs == 70);
  CHECK(e->seconds == Approx(1.25));
  CHECK(e->wait_ack_seconds == Approx(0.04));
  CHECK(e->wait_epoch_end_seconds == Approx(0.002));
  CHECK(e->wait_first_split_seconds == Approx(0.01));
  CHECK(e->wait_end_seconds == Approx(0.03));
  CHECK_FALSE(ParseDynamicEpochLog("ts=x level=info msg=\"task started\" task_id=7").has_value());
  // A line missing a field, or with a malformed number, is not counted.
  CHECK_FALSE(ParseDynamicEpochLog("msg=\"dynamic sharding epoch done\" task_id=7 epoch=1").has_value());
  std::string bad = line;
  bad.replace(bad.find("rpcs=70"), 7, "rpcs=7x");
  CHECK_FALSE(ParseDynamicEpochLog(bad).has_value());

  DynamicEpochLog other = *e;
  other.seconds = 0.75;
  other.wait_ack_seconds = 0.06;
  auto j = DynamicEpochsJson({*e, other});
  CHECK(j["task_epochs"] == 2);
  CHECK(j["seconds_per_task_epoch"].get<double>() == Approx(1.0));
  CHECK(j["wait_ack_fraction"].get<double>() == Approx(0.05));  // 0.1 of 2 s
  CHECK(j["getsplits_per_split"].get<double>() == Approx(2.19));  // 140 / 64
  CHECK(j["getsplits_mean_ms"].get<double>() == Approx(1.0));
  CHECK(j["wait_ack_ms_per_split"].get<double>() == Approx(1.563));
  CHECK(j["wait_end_fraction"].get<double>() == Approx(0.03));
  CHECK(j["wait_fraction"].get<double>() == Approx((0.02 + 0.1 + 0.06 + 0.1 + 0.004) / 2.0).epsilon(0.001));
  CHECK(DynamicEpochsJson({})["task_epochs"] == 0);
  CHECK(DynamicEpochsJson({})["wait_fraction"] == 0);
}

TEST_CASE("Invalid sharding options fail before any process starts") {
  ShardingBenchOptions o;
  o.workers = 0;
  CHECK(RunShardingBenchmark(o) == 1);
  o = ShardingBenchOptions();
  o.split_size = 0;
  CHECK(RunShardingBenchmark(o) == 1);
  o = ShardingBenchOptions();
  o.num_epochs = 0;
  CHECK(RunShardingBenchmark(o) == 1);
  o = ShardingBenchOptions();
  o.image_size = 1;
  CHECK(RunShardingBenchmark(o) == 1);
}

}  // namespace
}  // namespace sluice::bench
