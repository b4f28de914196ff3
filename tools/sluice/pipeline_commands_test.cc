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

TEST_CASE("pipeline ops lists sources, steps and ops") {
  std::ostringstream out;
  REQUIRE(PipelineOps(true, out) == 0);
  for (const char* name : {"### `range`", "### `idx`", "### `batch`", "### `interleave`", "### `cast`", "### `tokenize`"}) {
    CHECK_THAT(out.str(), Catch::Contains(name));
  }
}

}  // namespace
}  // namespace sluice::cli
