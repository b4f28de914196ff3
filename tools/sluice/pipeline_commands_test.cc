#include "tools/sluice/pipeline_commands.h"

#include <catch2/catch.hpp>
#include <sstream>

#include "testing/test_util.h"

namespace sluice::cli {
namespace {

TEST_CASE("pipeline check prints the canonical spec and fingerprint") {
  sluice::testing::TempDir dir;
  sluice::testing::WriteFile(dir.File("p.yaml"), "source: {range: {stop: 10}}\nsteps:\n  - batch: 3\n");
  std::ostringstream out, err;
  REQUIRE(PipelineCheck(dir.File("p.yaml"), out, err) == 0);
  CHECK_THAT(out.str(), Catch::Contains("valid; fingerprint"));
  CHECK_THAT(out.str(), Catch::Contains("drop_remainder: false"));
  CHECK(err.str().empty());
}

TEST_CASE("pipeline check reports errors with file and line and exits non-zero") {
  sluice::testing::TempDir dir;
  sluice::testing::WriteFile(dir.File("bad.yaml"), "source: {range: {stop: 10}}\nsteps:\n  - batch: {size: 3, colour: red}\n");
  std::ostringstream out, err;
  CHECK(PipelineCheck(dir.File("bad.yaml"), out, err) == 1);
  CHECK_THAT(err.str(), Catch::Contains("bad.yaml:3:"));
  CHECK_THAT(err.str(), Catch::Contains("unknown field 'colour'"));
}

TEST_CASE("pipeline run reports throughput and a per-stage table") {
  sluice::testing::TempDir dir;
  sluice::testing::WriteFile(dir.File("p.yaml"), "name: demo\nsource: {range: {stop: 1000}}\nsteps:\n  - batch: 10\n");
  std::ostringstream out, err;
  RunOptions options;
  options.take = 50;
  REQUIRE(PipelineRun(dir.File("p.yaml"), options, out, err) == 0);
  CHECK_THAT(out.str(), Catch::Contains("50 elements"));
  CHECK_THAT(out.str(), Catch::Contains("source[range]"));
  CHECK_THAT(out.str(), Catch::Contains("batch"));
  std::ostringstream json, err2;
  options.json = true;
  REQUIRE(PipelineRun(dir.File("p.yaml"), options, json, err2) == 0);
  CHECK_THAT(json.str(), Catch::Contains("\"elements\": 50"));
}

TEST_CASE("pipeline run reports a data error after the elements it delivered") {
  sluice::testing::TempDir dir;
  sluice::testing::WriteFile(dir.File("p.yaml"), "source: {range: {stop: 10}}\nsteps:\n  - one_hot: {field: value, depth: 5}\n");
  std::ostringstream out, err;
  RunOptions options;
  options.progress = false;
  CHECK(PipelineRun(dir.File("p.yaml"), options, out, err) == 1);
  CHECK_THAT(err.str(), Catch::Contains("after 5 elements"));
}

TEST_CASE("pipeline explain --auto-order prints both orders, the measured costs and the speed-up, then the new plan") {
  sluice::testing::TempDir dir;
  sluice::testing::WriteFile(dir.File("p.yaml"), R"(name: crop
source: {synthetic: {count: 32, shape: [96, 96, 3], dtype: uint8, split_size: 8}}
steps:
  - cast: {field: data, dtype: float32}
  - random_crop: {field: data, size: [8, 8]}
  - filter: {field: index, lt: 24}
)");
  std::ostringstream out, err;
  AutoOrderFlags flags;
  flags.mode = "strict";
  flags.sample = 16;
  REQUIRE(PipelineExplain(dir.File("p.yaml"), flags, out, err) == 0);
  const std::string text = out.str();
  CHECK_THAT(text, Catch::Contains("AutoOrder (strict): "));
  CHECK_THAT(text, Catch::Contains("as written: cast(data->float32) -> random_crop(data) -> filter(index)"));
  CHECK_THAT(text, Catch::Contains("chosen:"));
  CHECK_THAT(text, Catch::Contains("cpu us/elem"));
  CHECK_THAT(text, Catch::Contains("predicted"));
  CHECK_THAT(text, Catch::Contains("pipeline crop"));  // then the plan
  std::ostringstream out2, err2;
  flags.mode = "sideways";
  CHECK(PipelineExplain(dir.File("p.yaml"), flags, out2, err2) == 1);
  CHECK_THAT(err2.str(), Catch::Contains("--auto-order: unknown AutoOrder mode 'sideways'; use off, strict or relaxed"));
  std::ostringstream out3, err3;
  RunOptions run;
  run.progress = false;
  run.auto_order.mode = "relaxed";
  run.auto_order.sample = 16;
  REQUIRE(PipelineRun(dir.File("p.yaml"), run, out3, err3) == 0);
  CHECK_THAT(err3.str(), Catch::Contains("AutoOrder (relaxed): "));
  CHECK_THAT(out3.str(), Catch::Contains("24 elements"));
}

TEST_CASE("pipeline ops --order-properties lists every op's declaration") {
  std::ostringstream out;
  REQUIRE(PipelineOrderProperties(out) == 0);
  CHECK_THAT(out.str(), Catch::Contains("| `filter` | arg `field` | - |"));
  CHECK_THAT(out.str(), Catch::Contains("`random_flip` exact (layout hwc)"));
  CHECK_THAT(out.str(), Catch::Contains("| `decode_jpeg` |"));
}

TEST_CASE("pipeline ops lists sources, steps and ops") {
  std::ostringstream out;
  REQUIRE(PipelineOps(true, out) == 0);
  for (const char* name : {"### `range`", "### `idx`", "### `batch`", "### `interleave`", "### `cast`", "### `tokenize`"}) {
    CHECK_THAT(out.str(), Catch::Contains(name));
  }
}

}  // namespace
}  // namespace sluice::cli
