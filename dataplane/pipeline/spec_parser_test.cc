#include "dataplane/pipeline/spec_parser.h"

#include <catch2/catch.hpp>

#include "dataplane/pipeline/pipeline_test_util.h"
#include "testing/test_util.h"

namespace sluice::pipeline {
namespace {

std::string ErrorOf(const std::string& yaml) {
  auto def = ParsePipelineSpec(yaml, "spec.yaml");
  REQUIRE_FALSE(def.ok());
  return std::string(def.status().message());
}

TEST_CASE("a minimal spec parses and fills defaults") {
  auto def = ParsePipelineSpec("source: {range: {stop: 10}}\nsteps:\n  - batch: 4\n", "spec.yaml");
  REQUIRE(def.ok());
  CHECK(def->source().kind() == "range");
  REQUIRE(def->steps_size() == 1);
  Args args(def->steps(0).args());
  CHECK(args.Int("size") == 4);
  CHECK(args.Bool("drop_remainder") == false);  // default filled
  CHECK(Args(def->source().args()).Int("step") == 1);
  CHECK(def->options().max_element_bytes() == (int64_t{256} << 20));
}

TEST_CASE("JSON specs are accepted") {
  auto def = ParsePipelineSpec(R"({"source": {"range": {"stop": 5}}, "steps": [{"take": {"count": 2}}]})", "spec.json");
  REQUIRE(def.ok());
  CHECK(def->steps(0).kind() == "take");
}

TEST_CASE("'auto' may be quoted: JSON, and so a Python dict, has only quoted strings") {
  const std::string plain =
      "source: {range: {stop: 10}}\noptions: {cpu_budget: auto}\nsteps:\n"
      "  - map: {parallelism: auto, ops: [{cast: {field: value, dtype: float32}}]}\n  - prefetch: auto\n";
  auto a = ParsePipelineSpec(plain, "plain.yaml");
  REQUIRE(a.ok());
  auto json = ParsePipelineSpec(
      R"({"source": {"range": {"stop": 10}}, "options": {"cpu_budget": "auto"}, "steps": [)"
      R"({"map": {"parallelism": "auto", "ops": [{"cast": {"field": "value", "dtype": "float32"}}]}},)"
      R"({"prefetch": "auto"}]})",
      "<dict>");
  INFO(json.status());
  REQUIRE(json.ok());
  CHECK(Fingerprint(*json) == Fingerprint(*a));
  auto quoted = ParsePipelineSpec(
      "source: {range: {stop: 10}}\noptions: {cpu_budget: 'auto'}\nsteps:\n"
      "  - map: {parallelism: \"AUTO\", ops: [{cast: {field: value, dtype: float32}}]}\n  - prefetch: {buffer: \"auto\"}\n",
      "quoted.yaml");
  INFO(quoted.status());
  REQUIRE(quoted.ok());
  CHECK(Fingerprint(*quoted) == Fingerprint(*a));
  // Other quoted text is still not a number.
  auto bad = ParsePipelineSpec("source: {range: {stop: 10}}\nsteps:\n  - prefetch: \"many\"\n", "bad.yaml");
  REQUIRE_FALSE(bad.ok());
  CHECK_THAT(std::string(bad.status().message()), Catch::Contains("expected integer or 'auto'"));
}

TEST_CASE("an op used as a step becomes a one-op map") {
  auto def = ParsePipelineSpec("source: {range: {stop: 3}}\nsteps:\n  - cast: {field: value, dtype: float32}\n", "s.yaml");
  REQUIRE(def.ok());
  CHECK(def->steps(0).kind() == "map");
  REQUIRE(def->steps(0).ops_size() == 1);
  CHECK(def->steps(0).ops(0).op() == "cast");
}

TEST_CASE("malformed YAML names the file and line") {
  std::string msg = ErrorOf("source: {range: {stop: 3}\nsteps: [\n");
  CHECK_THAT(msg, Catch::Contains("spec.yaml:"));
  CHECK_THAT(msg, Catch::Contains("malformed YAML"));
}

TEST_CASE("unknown fields name the line and the field path and list the known fields") {
  std::string msg = ErrorOf("source:\n  range: {stop: 3}\nsteps:\n  - batch:\n      size: 2\n      sise: 3\n");
  CHECK_THAT(msg, Catch::Contains("spec.yaml:6:"));
  CHECK_THAT(msg, Catch::Contains("steps[0].batch.sise"));
  CHECK_THAT(msg, Catch::Contains("known fields: size, drop_remainder"));
  std::string top = ErrorOf("source: {range: {stop: 3}}\nstepz: []\n");
  CHECK_THAT(top, Catch::Contains("unknown field 'stepz'"));
}

TEST_CASE("wrong types are reported with the line of the value") {
  std::string msg = ErrorOf("source: {range: {stop: 3}}\nsteps:\n  - batch: {size: abc}\n");
  CHECK_THAT(msg, Catch::Contains("spec.yaml:3:"));
  CHECK_THAT(msg, Catch::Contains("steps[0].batch.size"));
  CHECK_THAT(msg, Catch::Contains("expected integer"));
}

TEST_CASE("unknown ops list the known ops") {
  std::string msg = ErrorOf("source: {range: {stop: 3}}\nsteps:\n  - map: {ops: [{frobnicate: {}}]}\n");
  CHECK_THAT(msg, Catch::Contains("unknown op 'frobnicate'"));
  CHECK_THAT(msg, Catch::Contains("cast"));
  CHECK_THAT(msg, Catch::Contains("one_hot"));
  std::string step = ErrorOf("source: {range: {stop: 3}}\nsteps:\n  - frobnicate: {}\n");
  CHECK_THAT(step, Catch::Contains("unknown step 'frobnicate'"));
  CHECK_THAT(step, Catch::Contains("known steps: map, filter"));
}

TEST_CASE("missing required fields, bounds and choices are checked") {
  CHECK_THAT(ErrorOf("source: {range: {}}\n"), Catch::Contains("missing required field 'stop'"));
  CHECK_THAT(ErrorOf("source: {range: {stop: 3}}\nsteps: [{batch: {size: 0}}]\n"), Catch::Contains("below the minimum"));
  CHECK_THAT(ErrorOf("source: {range: {stop: 3, on_error: ignore}}\n"), Catch::Contains("not one of: fail, skip"));
  CHECK_THAT(ErrorOf("steps: []\n"), Catch::Contains("missing `source:`"));
  CHECK_THAT(ErrorOf("source: {nosuch: {}}\n"), Catch::Contains("known sources:"));
  CHECK_THAT(ErrorOf("source: {range: {stop: 3}}\nsteps: [{map: {parallelism: 2}}]\n"), Catch::Contains("needs `ops:`"));
  CHECK_THAT(ErrorOf("source: {range: {stop: 3}}\nsteps: [{take: 1}, {interleave: {}}]\n"), Catch::Contains("must be the first step"));
  CHECK_THAT(ErrorOf("source: {range: {stop: 3}}\nsteps: [{shard: {num_shards: 2, index: 2}}]\n"), Catch::Contains("below num_shards"));
  CHECK_THAT(ErrorOf("source: {range: {stop: 3}}\nsteps: [{filter: {field: value}}]\n"), Catch::Contains("at least one condition"));
  CHECK_THAT(ErrorOf("version: 7\nsource: {range: {stop: 3}}\n"), Catch::Contains("unsupported spec version"));
  CHECK_THAT(ErrorOf(""), Catch::Contains("empty"));
  CHECK_THAT(ErrorOf("[1, 2]"), Catch::Contains("expected a map"));
}

TEST_CASE("strings must be valid UTF-8") {
  CHECK_THAT(ErrorOf("source: {range: {stop: 3}}\nname: a\xff" "b\n"), Catch::Contains("name: not valid UTF-8"));
  CHECK_THAT(ErrorOf("source: {jsonl: {files: \"a.js\xffnl\"}}\n"), Catch::Contains("not valid UTF-8"));
}

TEST_CASE("files take a glob, comma-separated globs or a list") {
  sluice::testing::TempDir dir;
  sluice::testing::WriteFile(dir.File("a.jsonl"), "{\"x\": 1}\n");
  sluice::testing::WriteFile(dir.File("b.jsonl"), "{\"x\": 2}\n");
  auto list = testing::RunSpec("source: {jsonl: {files: ['" + dir.File("a.jsonl") + "', '" + dir.File("b.jsonl") + "']}}\n");
  REQUIRE(list.ok());
  CHECK(testing::Ints(*list, "x") == std::vector<int64_t>{1, 2});
  CHECK_THAT(ErrorOf("source: {jsonl: {files: []}}\n"), Catch::Contains("expected string or list of strings"));
}

TEST_CASE("a missing spec file is a clear error") {
  auto def = ParsePipelineSpecFile("/nonexistent/pipeline.yaml");
  REQUIRE_FALSE(def.ok());
  CHECK_THAT(std::string(def.status().message()), Catch::Contains("/nonexistent/pipeline.yaml"));
}

TEST_CASE("the fingerprint ignores names, formatting, defaults and argument order") {
  auto a = ParsePipelineSpec("name: a\nsource: {range: {stop: 10}}\nsteps: [{batch: {size: 2, drop_remainder: false}}]\n", "a");
  auto b = ParsePipelineSpec("name: b\nsource:\n  range:\n    stop: 10\n    step: 1\nsteps:\n  - batch: 2\n", "b");
  auto c = ParsePipelineSpec("source: {range: {stop: 11}}\nsteps: [{batch: 2}]\n", "c");
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  REQUIRE(c.ok());
  CHECK(Fingerprint(*a) == Fingerprint(*b));
  CHECK(Fingerprint(*a) != Fingerprint(*c));
  CHECK(Fingerprint(*a).size() == 32);
}

TEST_CASE("canonical YAML round-trips to the same fingerprint") {
  auto a = ParsePipelineSpec(
      "source: {range: {stop: 10}}\nsteps:\n  - map: {parallelism: auto, ops: [{cast: {field: value, dtype: float32}}]}\n"
      "  - shuffle: {buffer: 4, seed: 3}\n  - prefetch: auto\n",
      "a");
  REQUIRE(a.ok());
  std::string yaml = ToYaml(*a);
  auto b = ParsePipelineSpec(yaml, "canonical");
  INFO(yaml);
  REQUIRE(b.ok());
  CHECK(Fingerprint(*a) == Fingerprint(*b));
}

TEST_CASE("Canonicalize validates defs that did not come from YAML") {
  PipelineDef def;
  def.mutable_source()->set_kind("range");
  SetArg(*def.mutable_source()->mutable_args(), "stop", IntValue(3));
  auto* step = def.add_steps();
  step->set_kind("batch");
  SetArg(*step->mutable_args(), "size", StringValue("big"));
  auto s = Canonicalize(def);
  REQUIRE_FALSE(s.ok());
  CHECK_THAT(std::string(s.message()), Catch::Contains("steps[0].batch.size"));
}

}  // namespace
}  // namespace sluice::pipeline
