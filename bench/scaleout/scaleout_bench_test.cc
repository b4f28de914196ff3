#include "bench/scaleout/scaleout_bench.h"

#include <catch2/catch.hpp>

#include "bench/dataservice/bench_report.h"
#include "bench/dataservice/trial_spread.h"
#include "dataplane/pipeline/pipeline.h"
#include "dataplane/pipeline/source.h"

namespace sluice::bench {
namespace {

TEST_CASE("The scale-out pipeline resizes and normalises synthetic images") {
  ScaleoutBenchOptions o;
  o.image_size = 64;
  o.output_size = 16;
  auto def = ParseBenchPipeline(ScaleoutPipelineSpec(o), "scaleout");
  REQUIRE(def.ok());
  auto p = pipeline::Pipeline::Create(*def);
  REQUIRE(p.ok());
  auto it = (*p)->MakeIterator();
  REQUIRE(it.ok());
  auto e = (*it)->Next();
  REQUIRE(e.ok());
  REQUIRE(e->has_value());
  const pipeline::Tensor* data = (*e)->Find("data");
  REQUIRE(data != nullptr);
  CHECK(data->dtype() == pipeline::DType::kFloat32);
  CHECK(data->nbytes() == 16 * 16 * 3 * 4);
  // The dispatcher refuses datasets above its default --max_dataset_splits (1,000,000).
  auto source = pipeline::SourceRegistry::Builtin().Find(def->source().kind())->factory(pipeline::Args(def->source().args()));
  REQUIRE(source.ok());
  auto splits = (*source)->NumSplits();
  REQUIRE(splits.ok());
  CHECK(*splits <= 1000000);
}

// SpreadOfRuns itself is tested in bench/common/bench_util_test.cc.
TEST_CASE("TrialSpreadJson rounds the spread") {
  auto j = TrialSpreadJson(SpreadOfRuns({1.234, 2.345}), 1);
  CHECK(j["median"].get<double>() == Approx(1.8));
  CHECK(j["n"] == 2);
}

TEST_CASE("ScalingEfficiency") {
  CHECK(ScalingEfficiency(800, 8, 100) == Approx(1.0));
  CHECK(ScalingEfficiency(400, 8, 100) == Approx(0.5));
  CHECK(ScalingEfficiency(400, 8, 0) == 0);
  CHECK(ScalingEfficiency(400, 0, 100) == 0);
}

TEST_CASE("ScaleoutResultJson: per-count keys and efficiency at the largest count") {
  std::vector<ScaleoutPoint> points = {{1, 100, 0.2, 0.9, {90, 100, 110}},
                                       {2, 190, 0.2, 0.9, {}},
                                       {4, 360, 0.2, 0.9, {}},
                                       {8, 640, 0.19, 0.8, {600, 640, 700}}};
  auto j = ScaleoutResultJson(points, "cgroup-v1", {{"cpus_per_worker", 0.2}});
  CHECK(j["benchmark"] == "scaleout");
  CHECK(j["quota_mechanism"] == "cgroup-v1");
  CHECK(j["throughput_1"].get<double>() == Approx(100));
  CHECK(j["throughput_8"].get<double>() == Approx(640));
  CHECK(j["efficiency_2"].get<double>() == Approx(0.95));
  CHECK(j["max_workers"] == 8);
  CHECK(j["efficiency_at_max"].get<double>() == Approx(0.8));
  CHECK(j["points"].size() == 4);
  CHECK(j["points"][3]["per_worker_elements_per_second"].get<double>() == Approx(80));
  CHECK(j["cpus_per_worker"].get<double>() == Approx(0.2));
  // Median and spread of each point's windows; a point without windows is its one figure.
  CHECK(j["points"][0]["elements_per_second_spread"]["median"].get<double>() == Approx(100));
  CHECK(j["points"][0]["elements_per_second_spread"]["min"].get<double>() == Approx(90));
  CHECK(j["points"][0]["elements_per_second_spread"]["max"].get<double>() == Approx(110));
  CHECK(j["points"][0]["elements_per_second_spread"]["n"] == 3);
  CHECK(j["points"][0]["elements_per_second_spread"]["relative_range"].get<double>() == Approx(0.2));
  CHECK(j["points"][0]["window_elements_per_second"].size() == 3);
  CHECK(j["points"][1]["elements_per_second_spread"]["n"] == 1);
  CHECK(j["points"][1]["elements_per_second_spread"]["relative_range"].get<double>() == 0);
  // Efficiency range: 600 / (8 x 110) .. 700 / (8 x 90).
  REQUIRE(j["efficiency_at_max_range"].is_array());
  CHECK(j["efficiency_at_max_range"][0].get<double>() == Approx(0.682));
  CHECK(j["efficiency_at_max_range"][1].get<double>() == Approx(0.972));
  // Without a one-worker measurement there is no baseline.
  auto no_base = ScaleoutResultJson({{2, 190, 0.2, 0, {}}}, "taskset", {});
  CHECK(no_base["efficiency_at_max"] == 0.0);
  CHECK(no_base["efficiency_at_max_range"].is_null());
  CHECK(ScaleoutResultJson({}, "taskset", {})["max_workers"] == 0);
}

TEST_CASE("Invalid scale-out options fail before any process starts") {
  ScaleoutBenchOptions o;
  o.worker_counts = {};
  CHECK(RunScaleoutBenchmark(o) == 1);
  o = ScaleoutBenchOptions();
  o.worker_counts = {0};
  CHECK(RunScaleoutBenchmark(o) == 1);
  o = ScaleoutBenchOptions();
  o.cpus_per_worker = 0;
  CHECK(RunScaleoutBenchmark(o) == 1);
  o = ScaleoutBenchOptions();
  o.output_size = 1000;
  CHECK(RunScaleoutBenchmark(o) == 1);
  o = ScaleoutBenchOptions();
  o.windows = 0;
  CHECK(RunScaleoutBenchmark(o) == 1);
  o = ScaleoutBenchOptions();
  o.quota = "docker";
  CHECK(RunScaleoutBenchmark(o) == 1);
}

}  // namespace
}  // namespace sluice::bench
