// PlanAutoOrder end to end on real pipelines (synthetic, JSON-lines and JPEG sources): what moves,
// what never moves (barriers, pinned ops, cardinality changes, field dependencies), that moved
// random ops keep their draws, strict verification, and pipelines left unchanged.
//
// Rewrites are accepted here whatever their measured speed-up (min_measured_speedup = 0), so no
// assertion depends on timing.
#include "dataplane/pipeline/autoorder/auto_order.h"

#include <catch2/catch.hpp>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "dataplane/pipeline/autoorder/chain.h"
#include "dataplane/pipeline/autoorder/order_profiler.h"
#include "dataplane/pipeline/image/image_test_util.h"
#include "dataplane/pipeline/pipeline_test_util.h"
#include "dataplane/pipeline/plugin.h"
#include "testing/test_util.h"

namespace sluice::pipeline {
namespace {

using autoorder::CompareOutputs;

PipelineDef Parse(const std::string& yaml) {
  auto def = ParsePipelineSpec(yaml, "test.yaml");
  INFO(yaml);
  REQUIRE(def.ok());
  return *def;
}

AutoOrderOptions Options(AutoOrderMode mode) {
  AutoOrderOptions o;
  o.mode = mode;
  o.sample_elements = 16;
  o.rounds = 1;
  o.profile_repetitions = 1;
  o.min_measured_speedup = 0;  // decide on the model and verification only: no timing in tests
  return o;
}

AutoOrderResult Plan(const PipelineDef& def, AutoOrderMode mode) {
  auto r = PlanAutoOrder(def, Options(mode));
  REQUIRE(r.ok());
  INFO(FormatAutoOrderReport(r->report));
  return *r;
}

std::vector<Element> RunDef(const PipelineDef& def) {
  auto p = Pipeline::Create(def);
  REQUIRE(p.ok());
  auto out = testing::Collect(**p);
  REQUIRE(out.ok());
  return *out;
}

// The ops and steps of `def` in order, by name ("map" steps expanded into their ops).
std::vector<std::string> Flatten(const PipelineDef& def) {
  std::vector<std::string> out;
  for (const auto& step : def.steps()) {
    if (step.kind() != "map") {
      out.push_back(step.kind());
      continue;
    }
    for (const auto& op : step.ops()) out.push_back(op.op());
  }
  return out;
}

size_t IndexOf(const std::vector<std::string>& v, const std::string& name, size_t nth = 0) {
  for (size_t i = 0; i < v.size(); ++i) {
    if (v[i] == name && nth-- == 0) return i;
  }
  FAIL("no " << name << " in " << absl::StrJoin(v, ", "));
  return 0;
}

const char* kCropSpec = R"(
options: {seed: 7}
source: {synthetic: {count: 40, shape: [128, 128, 3], dtype: uint8, split_size: 16}}
steps:
  - cast: {field: data, dtype: float32, scale: 0.5}
  - random_crop: {field: data, size: [16, 16]}
  - random_flip: {field: data}
  - filter: {field: index, lt: 30}
  - batch: 4
)";

TEST_CASE("a pipeline in natural order is rewritten and, in strict mode, gives bit-identical output") {
  PipelineDef def = Parse(kCropSpec);
  AutoOrderResult r = Plan(def, AutoOrderMode::kStrict);
  REQUIRE(r.report.outcome() == "applied");
  std::vector<std::string> order = Flatten(r.def);
  CHECK(order.front() == "filter");                                   // drops elements before any op runs
  CHECK(IndexOf(order, "random_crop") < IndexOf(order, "cast"));       // crop, then convert fewer pixels
  CHECK(IndexOf(order, "batch") == order.size() - 1);                  // never across the batch
  CHECK(r.report.predicted_speedup() > 1.5);
  CHECK(r.report.max_abs_diff() == 0);
  CHECK(r.report.original_order_size() == 4);
  CHECK(r.report.costs_size() == 4);
  // The whole rewritten pipeline, not just the sample, matches the original bit for bit: the moved
  // random ops kept their seeds.
  auto diff = CompareOutputs(RunDef(r.def), RunDef(def));
  INFO(diff.first_difference);
  CHECK(diff.identical);
  // ... which they need: the same order without seed slots draws other crops and flips.
  PipelineDef unslotted = r.def;
  for (auto& step : *unslotted.mutable_steps()) {
    for (auto& op : *step.mutable_ops()) op.clear_seed_slot();
  }
  CHECK_FALSE(CompareOutputs(RunDef(unslotted), RunDef(def)).identical);
}

TEST_CASE("the rewritten pipeline round-trips through YAML with its seed slots") {
  AutoOrderResult r = Plan(Parse(kCropSpec), AutoOrderMode::kRelaxed);
  REQUIRE(r.report.outcome() == "applied");
  const std::string yaml = ToYaml(r.def);
  CHECK_THAT(yaml, Catch::Contains("seed_slot: [1, 1]"));
  PipelineDef again = Parse(yaml);
  CHECK(Fingerprint(again) == Fingerprint(r.def));
  CHECK(CompareOutputs(RunDef(again), RunDef(r.def)).identical);
}

TEST_CASE("a pipeline the optimizer cannot improve is left unchanged") {
  PipelineDef def = Parse(R"(
source: {synthetic: {count: 20, shape: [64, 64, 3], dtype: uint8}}
steps:
  - filter: {field: index, lt: 15}
  - random_crop: {field: data, size: [8, 8]}
  - cast: {field: data, dtype: float32}
  - batch: 4
)");
  for (AutoOrderMode mode : {AutoOrderMode::kStrict, AutoOrderMode::kRelaxed}) {
    AutoOrderResult r = Plan(def, mode);
    CHECK(r.report.outcome() == "unchanged");
    CHECK_THAT(r.report.reason(), Catch::Contains("no legal order is predicted"));
    CHECK(r.def.SerializeAsString() == def.SerializeAsString());  // not even seed slots added
  }
  AutoOrderResult off = Plan(def, AutoOrderMode::kOff);
  CHECK(off.report.outcome() == "unchanged");
  CHECK(off.report.reason() == "AutoOrder is off");
  AutoOrderResult nothing = Plan(Parse("source: {range: {stop: 5}}\nsteps:\n  - batch: 2\n"), AutoOrderMode::kRelaxed);
  CHECK_THAT(nothing.report.reason(), Catch::Contains("nothing to reorder"));
}

TEST_CASE("barriers, pinned ops and old plugin ops are never crossed") {
  const std::string plugin = absl::StrCat(sluice::testing::BinaryDir(), "/dataplane/pipeline/libsluice_test_plugin.so");
  auto spec = [&](bool pin) {
    return absl::StrCat("plugins: ['", plugin, R"(']
source: {synthetic: {count: 24, shape: [96, 96, 3], dtype: uint8}}
steps:
  - cast: {field: data, dtype: float32}
  - random_crop: {field: data, size: [24, 24], keep_position: )", pin ? "true" : "false", R"(}
  - batch: 2
  - unbatch
  - cast: {field: data, dtype: float64}
  - add_constant: {config: {field: index, add: 1}}
  - center_crop: {field: data, size: [8, 8]}
)");
  };
  AutoOrderResult free = Plan(Parse(spec(false)), AutoOrderMode::kRelaxed);
  REQUIRE(free.report.outcome() == "applied");
  std::vector<std::string> order = Flatten(free.def);
  CHECK(order == std::vector<std::string>{"random_crop", "cast", "batch", "unbatch", "cast", "add_constant", "center_crop"});

  AutoOrderResult pinned = Plan(Parse(spec(true)), AutoOrderMode::kRelaxed);
  CHECK(pinned.report.outcome() == "unchanged");
  CHECK(Flatten(pinned.def) ==
        std::vector<std::string>{"cast", "random_crop", "batch", "unbatch", "cast", "add_constant", "center_crop"});

  auto chain = autoorder::BuildChain(pinned.def);
  REQUIRE(chain.ok());
  for (const auto& u : chain->units) {
    INFO(u.name);
    const bool barrier = u.name == "batch" || u.name == "unbatch" || u.name == "add_constant" || u.pinned;
    CHECK(u.movable() == !barrier);
  }
}

TEST_CASE("a filter moves above a map but not across a batch") {
  PipelineDef def = Parse(R"(
source: {synthetic: {count: 32, shape: [48, 48, 3], dtype: uint8, split_size: 8}}
steps:
  - cast: {field: data, dtype: float32}
  - filter: {field: index, lt: 16}
  - batch: 3
  - cast: {field: data, dtype: float64}
  - filter: {field: index, min_size: 3}
)");
  AutoOrderResult r = Plan(def, AutoOrderMode::kStrict);
  REQUIRE(r.report.outcome() == "applied");
  std::vector<std::string> order = Flatten(r.def);
  CHECK(order == std::vector<std::string>{"filter", "cast", "batch", "filter", "cast"});
  CHECK(CompareOutputs(RunDef(r.def), RunDef(def)).identical);
}

TEST_CASE("field dependencies hold: a filter on tokens stays after tokenize, one on the text moves first") {
  sluice::testing::TempDir dir;
  std::string lines;
  for (int i = 0; i < 60; ++i) {
    std::string text;
    for (int w = 0; w < 2 + (i * 7) % 30; ++w) absl::StrAppend(&text, w == 0 ? "" : " ", "word", (i * w) % 13);
    absl::StrAppend(&lines, "{\"text\": \"", text, "\", \"label\": ", i % 3, "}\n");
  }
  sluice::testing::WriteFile(dir.File("t.jsonl"), lines);
  PipelineDef def = Parse(absl::StrCat("source: {jsonl: {files: '", dir.File("t.jsonl"), R"('}}
steps:
  - tokenize: {field: text, output: tokens}
  - cast: {field: label, dtype: int32}
  - filter: {field: tokens, min_size: 5}
  - filter: {field: text, max_size: 100}
  - pad_or_truncate: {field: tokens, length: 16}
  - cast: {field: tokens, dtype: int32}
  - batch: 4
)"));
  AutoOrderResult r = Plan(def, AutoOrderMode::kStrict);
  REQUIRE(r.report.outcome() == "applied");
  std::vector<std::string> order = Flatten(r.def);
  CHECK(order.front() == "filter");                                  // the text filter, first
  CHECK(IndexOf(order, "filter", 1) > IndexOf(order, "tokenize"));    // the token filter after tokenize
  CHECK(IndexOf(order, "cast", 1) < IndexOf(order, "pad_or_truncate"));  // down-cast before padding
  CHECK(CompareOutputs(RunDef(r.def), RunDef(def)).identical);
}

TEST_CASE("strict mode refuses a rewrite whose sample output differs, relaxed applies it and reports the difference") {
  using namespace image::testing;  // NOLINT: JPEG encoder
  sluice::testing::TempDir dir;
  for (int i = 0; i < 24; ++i) {
    sluice::testing::WriteFile(dir.File(absl::StrCat(i % 2 == 0 ? "a/" : "b/", i, ".jpg")),
                               EncodeJpeg(SmoothImage(96 + i, 128, 3)));
  }
  // Moving the filter up lets decode_jpeg fuse with random_resized_crop into a region decode:
  // cheaper, and close to but not bit-identical with a full decode followed by the crop.
  PipelineDef def = Parse(absl::StrCat("source: {files: {files: '", dir.path().string(), R"(/*/*.jpg', label_from_dir: true}}
steps:
  - decode_jpeg: {}
  - filter: {field: label, eq: 1}
  - random_resized_crop: {size: [32, 32]}
)"));
  AutoOrderResult strict = Plan(def, AutoOrderMode::kStrict);
  CHECK(strict.report.outcome() == "refused");
  CHECK_THAT(strict.report.reason(), Catch::Contains("strict mode refuses"));
  CHECK_THAT(strict.report.reason(), Catch::Contains("fuses decode_jpeg(image)+random_resized_crop(image)"));
  CHECK(strict.def.SerializeAsString() == def.SerializeAsString());

  AutoOrderResult relaxed = Plan(def, AutoOrderMode::kRelaxed);
  REQUIRE(relaxed.report.outcome() == "applied");
  CHECK(Flatten(relaxed.def) == std::vector<std::string>{"filter", "decode_jpeg", "random_resized_crop"});
  CHECK(relaxed.report.max_abs_diff() > 0);
  CHECK(relaxed.report.max_abs_diff() < 64);
  CHECK_THAT(SummarizeAutoOrderReport(relaxed.report), Catch::Contains("applied: filter(label) -> decode_jpeg(image)"));
}

TEST_CASE("an unreadable sample or a failing op leaves the pipeline unchanged with the reason") {
  sluice::testing::TempDir dir;
  sluice::testing::WriteFile(dir.File("t.jsonl"), "{\"x\": 1}\n{\"x\": 2}\n");
  PipelineDef def = Parse(absl::StrCat("source: {jsonl: {files: '", dir.File("t.jsonl"), R"('}}
steps:
  - cast: {field: y, dtype: float32}
  - filter: {field: x, lt: 2}
)"));
  AutoOrderResult r = Plan(def, AutoOrderMode::kRelaxed);
  CHECK(r.report.outcome() == "failed");
  CHECK_THAT(r.report.reason(), Catch::Contains("the pipeline fails on the sample: cast(y->float32)"));
  CHECK_THAT(r.report.reason(), Catch::Contains("no field 'y'"));
  CHECK(Flatten(r.def) == std::vector<std::string>{"cast", "filter"});
  CHECK_FALSE(ParseAutoOrderMode("sideways").ok());
  CHECK(*ParseAutoOrderMode("RELAXED") == AutoOrderMode::kRelaxed);
}

TEST_CASE("AssignSeedSlots keeps every draw, fused ops included") {
  sluice::testing::TempDir dir;
  using namespace image::testing;  // NOLINT
  for (int i = 0; i < 6; ++i) sluice::testing::WriteFile(dir.File(absl::StrCat(i, ".jpg")), EncodeJpeg(SmoothImage(60, 80, 3)));
  PipelineDef def = Parse(absl::StrCat("options: {seed: 5}\nsource: {files: {files: '", dir.path().string(), R"(/*.jpg'}}
steps:
  - decode_jpeg: {}
  - random_resized_crop: {size: [24, 24]}
  - filter: {field: image, min_size: 1}
  - random_crop: {size: [16, 16]}
  - random_flip: {}
  - normalize: {}
)"));
  PipelineDef slotted = def;
  AssignSeedSlots(slotted);
  // decode+crop fuse (stage 1, op 0); the second map is stage 3; flip+normalize fuse at its op 1.
  CHECK(slotted.steps(1).ops(0).seed_slot().stage() == 1);
  CHECK(slotted.steps(1).ops(0).seed_slot().index() == 0);
  CHECK(slotted.steps(4).ops(0).seed_slot().stage() == 3);
  CHECK(slotted.steps(4).ops(0).seed_slot().index() == 1);
  CHECK(CompareOutputs(RunDef(slotted), RunDef(def)).identical);
}

TEST_CASE("keep_position and seed_slot parse, print and refuse bad values") {
  PipelineDef def = Parse(R"(
source: {range: {stop: 4}}
steps:
  - map: {keep_position: true, ops: [{cast: {field: value, dtype: float32, seed_slot: [2, 3]}}]}
  - filter: {field: value, lt: 3, keep_position: true}
  - cast: {field: value, dtype: int32, keep_position: true}
)");
  CHECK(def.steps(0).keep_position());
  CHECK(def.steps(0).ops(0).seed_slot().stage() == 2);
  CHECK(def.steps(1).keep_position());
  CHECK(def.steps(2).ops(0).keep_position());
  const std::string yaml = ToYaml(def);
  CHECK_THAT(yaml, Catch::Contains("keep_position: true"));
  PipelineDef again = Parse(yaml);
  CHECK(Fingerprint(again) == Fingerprint(def));
  CHECK(again.steps(0).keep_position());
  CHECK(again.steps(0).ops(0).seed_slot().index() == 3);
  auto bad_keep = ParsePipelineSpec("source: {range: {stop: 4}}\nsteps:\n  - filter: {field: value, lt: 3, keep_position: maybe}\n", "s.yaml");
  REQUIRE_FALSE(bad_keep.ok());
  CHECK_THAT(std::string(bad_keep.status().message()), Catch::Contains("s.yaml:3:"));
  CHECK_THAT(std::string(bad_keep.status().message()), Catch::Contains("steps[0].filter.keep_position: expected true or false"));
  auto bad_slot = ParsePipelineSpec("source: {range: {stop: 4}}\nsteps:\n  - cast: {field: value, dtype: int32, seed_slot: [0, -1]}\n", "s.yaml");
  REQUIRE_FALSE(bad_slot.ok());
  CHECK_THAT(std::string(bad_slot.status().message()), Catch::Contains("steps[0].cast.seed_slot: expected [stage, index]"));
  PipelineDef rpc = def;  // a def from elsewhere (an RPC) is checked too
  rpc.mutable_steps(0)->mutable_ops(0)->mutable_seed_slot()->set_stage(0);
  absl::Status s = Canonicalize(rpc);
  REQUIRE_FALSE(s.ok());
  CHECK_THAT(std::string(s.message()), Catch::Contains("seed_slot: [0, 3] is not a slot"));
}

TEST_CASE("plugin ops: declared ones reorder, ones from before the extension are barriers, bad declarations are refused") {
  const std::string dir = absl::StrCat(sluice::testing::BinaryDir(), "/dataplane/pipeline/");
  REQUIRE(LoadPlugin(dir + "libsluice_test_plugin.so").ok());
  const OpDescriptor* declared = OpRegistry::Builtin().Find("add_in_place");
  const OpDescriptor* old = OpRegistry::Builtin().Find("add_constant");
  REQUIRE(declared != nullptr);
  REQUIRE(old != nullptr);
  CHECK(declared->order != nullptr);
  CHECK(old->order == nullptr);  // its struct_size ends before order_properties_json (which holds junk)

  absl::Status bad = LoadPlugin(dir + "libsluice_test_plugin_bad_order.so");
  REQUIRE_FALSE(bad.ok());
  const std::string msg(bad.message());
  CHECK_THAT(msg, Catch::Contains("libsluice_test_plugin_bad_order.so' op 'add_in_place'"));
  CHECK_THAT(msg, Catch::Contains("shape and dtype stay the same"));

  PipelineDef def = Parse(absl::StrCat("plugins: ['", dir, R"(libsluice_test_plugin.so']
source: {synthetic: {count: 12, shape: [64], dtype: int64}}
steps:
  - add_in_place: {config: {field: data, add: 3}}
  - filter: {field: index, lt: 6}
  - reshape: {field: data, shape: [8, 8]}
)"));
  AutoOrderResult r = Plan(def, AutoOrderMode::kStrict);
  REQUIRE(r.report.outcome() == "applied");
  CHECK(Flatten(r.def).front() == "filter");
  CHECK(CompareOutputs(RunDef(r.def), RunDef(def)).identical);
}

TEST_CASE("malformed and contradictory plugin declarations name the plugin, the op and the problem") {
  struct Case {
    std::string json;
    std::string problem;
  };
  const std::vector<Case> cases = {
      {"not json", "not valid JSON"},
      {"[1]", "expected a JSON object"},
      {R"({"reads": ["x"]})", "'version' (an integer) is missing"},
      {R"({"version": 2, "reads": ["x"]})", "unsupported version 2; this Sluice reads version 1"},
      {R"({"version": 1, "reads": ["x"], "colour": "red"})", "unknown key 'colour'"},
      {R"({"version": 1})", "declares neither 'reads' nor 'writes'"},
      {R"({"version": 1, "reads": "x"})", "'reads' must be a list"},
      {R"({"version": 1, "reads": [""]})", "'reads'[0] is an empty field name"},
      {R"({"version": 1, "reads": [{"argument": "field"}]})", "'reads'[0] must be a field name or {\"arg\""},
      {R"({"version": 1, "reads": [{"arg": "field", "fallback": "x"}]})", "unknown key 'fallback'"},
      {R"({"version": 1, "writes": ["x"], "shape": "round"})", "'shape' must be one of"},
      {R"({"version": 1, "writes": ["x"], "dtype": "float128"})", "'dtype':"},
      {R"({"version": 1, "reads": ["x"], "size": "larger"})", "writes no field"},
      {R"({"version": 1, "writes": ["x"], "size": "smaller"})", "shape and dtype stay the same"},
      {R"({"version": 1, "writes": ["x"], "shape": "scaled"})", "'size' is \"same\" but 'shape' is \"scaled\""},
      {R"({"version": 1, "writes": ["x"], "commutes": {}})", "'commutes' must be a list"},
      {R"({"version": 1, "writes": ["x"], "commutes": [{"exact": true}]})", "'commutes'[0].op"},
      {R"({"version": 1, "writes": ["x"], "commutes": [{"op": "cast"}]})", "'commutes'[0].exact"},
      {R"({"version": 1, "writes": ["x"], "commutes": [{"op": "cast", "exact": false}]})", "needs a tolerance"},
      {R"({"version": 1, "writes": ["x"], "commutes": [{"op": "cast", "exact": true, "tolerance": 0.5}]})",
       "exact commutation with a tolerance > 0 is contradictory"},
      {R"({"version": 1, "writes": ["x"], "commutes": [{"op": "cast", "exact": false, "tolerance": -1}]})",
       "finite number >= 0"},
      {R"({"version": 1, "writes": ["x"], "commutes": [{"op": "cast", "exact": true}, {"op": "cast", "exact": false, "tolerance": 1}]})",
       "op 'cast' is declared twice"},
  };
  for (const Case& c : cases) {
    INFO(c.json);
    auto d = ParsePluginOrderDeclaration(c.json, "/opt/libmine.so", "blur");
    REQUIRE_FALSE(d.ok());
    const std::string msg(d.status().message());
    CHECK_THAT(msg, Catch::Contains("plugin '/opt/libmine.so' op 'blur': order_properties_json: "));
    CHECK_THAT(msg, Catch::Contains(c.problem));
  }
  auto good = ParsePluginOrderDeclaration(
      R"({"version": 1, "reads": [{"arg": "field", "default": "image"}, "mask"], "writes": [{"arg": "field", "default": "image"}],
          "shape": "same", "dtype": "float32", "size": "larger", "cost": "output",
          "commutes": [{"op": "random_flip", "exact": true}, {"op": "resize", "exact": false, "tolerance": 0.01}]})",
      "p", "o");
  REQUIRE(good.ok());
  CHECK(good->commutes.size() == 2);
  CHECK(good->args_in_config);
}

}  // namespace
}  // namespace sluice::pipeline
