// Tests of the tensor and text ops and of plugin loading.
#include <catch2/catch.hpp>

#include "absl/strings/str_cat.h"
#include "dataplane/pipeline/op.h"
#include "dataplane/pipeline/pipeline_test_util.h"
#include "dataplane/pipeline/plugin.h"
#include "testing/test_util.h"

namespace sluice::pipeline {
namespace {

using testing::Ints;
using testing::RunSpec;

// Builds an op from YAML-ish args through the registry, as the executor does.
std::unique_ptr<ElementOp> MakeOp(const std::string& name, ValueMap args) {
  const OpDescriptor* d = OpRegistry::Builtin().Find(name);
  REQUIRE(d != nullptr);
  REQUIRE(ValidateArgs(d->args, args, name).ok());
  auto op = d->factory(Args(args));
  REQUIRE(op.ok());
  return *std::move(op);
}

ValueMap ArgMap(std::initializer_list<std::pair<std::string, Value>> items) {
  ValueMap m;
  for (const auto& [k, v] : items) SetArg(m, k, v);
  return m;
}

TEST_CASE("cast converts dtypes with a scale") {
  Element e;
  Tensor t = Tensor::Allocate(DType::kUInt8, {3});
  t.mutable_raw()[0] = 0;
  t.mutable_raw()[1] = 128;
  t.mutable_raw()[2] = 255;
  e.Set("x", t);
  auto op = MakeOp("cast", ArgMap({{"field", StringValue("x")}, {"dtype", StringValue("float32")}, {"scale", FloatValue(1.0 / 255)}}));
  REQUIRE(op->Apply(e, 0).ok());
  CHECK(e.Find("x")->dtype() == DType::kFloat32);
  CHECK(e.Find("x")->GetAsDouble(2) == Approx(1.0));
  CHECK(e.Find("x")->GetAsDouble(1) == Approx(128.0 / 255));
  Element s;
  s.Set("x", Tensor::StringScalar("text"));
  auto err = op->Apply(s, 0);
  REQUIRE_FALSE(err.ok());
  CHECK_THAT(std::string(err.message()), Catch::Contains("cannot cast string"));
  const OpDescriptor* d = OpRegistry::Builtin().Find("cast");
  ValueMap bad = ArgMap({{"field", StringValue("x")}, {"dtype", StringValue("complex128")}});
  REQUIRE(ValidateArgs(d->args, bad, "cast").ok());
  auto refused = d->factory(Args(bad));
  REQUIRE_FALSE(refused.ok());
  CHECK_THAT(std::string(refused.status().message()), Catch::Contains("unknown dtype 'complex128'"));
}

TEST_CASE("one_hot, reshape, rename, select, drop") {
  auto out = RunSpec(
      "source: {range: {stop: 3}}\nsteps:\n"
      "  - one_hot: {field: value, depth: 3}\n"
      "  - reshape: {field: value, shape: [-1, 1]}\n"
      "  - rename: {fields: {value: label}}\n");
  REQUIRE(out.ok());
  const Tensor* l = (*out)[2].Find("label");
  REQUIRE(l != nullptr);
  CHECK(l->shape() == Shape{3, 1});
  CHECK(l->GetAsDouble(2) == 1.0);
  CHECK(l->GetAsDouble(0) == 0.0);
  auto sel = RunSpec("source: {synthetic: {count: 1, shape: [2]}}\nsteps:\n  - select: {fields: [index]}\n");
  REQUIRE(sel.ok());
  CHECK((*sel)[0].fields().size() == 1);
  auto drop = RunSpec("source: {synthetic: {count: 1, shape: [2]}}\nsteps:\n  - drop: {fields: [index]}\n");
  REQUIRE(drop.ok());
  CHECK((*drop)[0].Find("index") == nullptr);
  CHECK((*drop)[0].Find("data") != nullptr);
  auto bad = RunSpec("source: {range: {stop: 3}}\nsteps:\n  - reshape: {field: value, shape: [2]}\n");
  REQUIRE_FALSE(bad.ok());
  CHECK_THAT(std::string(bad.status().message()), Catch::Contains("cannot reshape"));
  auto missing = RunSpec("source: {range: {stop: 3}}\nsteps:\n  - rename: {fields: {nope: x}}\n");
  REQUIRE_FALSE(missing.ok());
  CHECK_THAT(std::string(missing.status().message()), Catch::Contains("no field 'nope'; fields: value"));
}

TEST_CASE("pad, truncate and tokenize") {
  sluice::testing::TempDir dir;
  sluice::testing::WriteFile(dir.File("t.jsonl"), "{\"text\": \"The cat sat\"}\n{\"text\": \"a b c d e f\"}\n");
  auto out = RunSpec(absl::StrCat("source: {jsonl: {files: '", dir.File("t.jsonl"),
                                  "'}}\nsteps:\n  - tokenize: {field: text, output: ids, vocab_size: 1000, offset: 1}\n"
                                  "  - pad_or_truncate: {field: ids, length: 4}\n  - batch: 2\n"));
  REQUIRE(out.ok());
  const Tensor* ids = (*out)[0].Find("ids");
  CHECK(ids->shape() == Shape{2, 4});
  CHECK(ids->GetAsDouble(3) == 0);  // padding after three words
  CHECK(ids->GetAsDouble(0) >= 1);
  auto bytes = RunSpec(absl::StrCat("source: {jsonl: {files: '", dir.File("t.jsonl"), "'}}\nsteps:\n  - tokenize: {field: text, mode: bytes}\n  - truncate: {field: text, length: 2}\n"));
  REQUIRE(bytes.ok());
  CHECK((*bytes)[0].Find("text")->GetAsDouble(0) == 'T');
  CHECK((*bytes)[0].Find("text")->shape() == Shape{2});
  sluice::testing::WriteFile(dir.File("vocab.txt"), "<unk>\nthe\ncat\n");
  auto vocab = RunSpec(absl::StrCat("source: {jsonl: {files: '", dir.File("t.jsonl"), "'}}\nsteps:\n  - tokenize: {field: text, vocab_file: '",
                                    dir.File("vocab.txt"), "'}\n  - take: 1\n"));
  REQUIRE(vocab.ok());
  const Tensor* v = (*vocab)[0].Find("text");
  CHECK(v->GetAsDouble(0) == 1);
  CHECK(v->GetAsDouble(1) == 2);
  CHECK(v->GetAsDouble(2) == 0);
  auto nonstring = RunSpec("source: {range: {stop: 1}}\nsteps:\n  - tokenize: {field: value}\n");
  REQUIRE_FALSE(nonstring.ok());
  CHECK_THAT(std::string(nonstring.status().message()), Catch::Contains("must be a scalar string"));
}

TEST_CASE("a plugin's ops load by path and run in a pipeline") {
  std::string plugin = absl::StrCat(sluice::testing::BinaryDir(), "/dataplane/pipeline/libsluice_test_plugin.so");
  auto out = RunSpec(absl::StrCat("plugins: ['", plugin, "']\nsource: {range: {stop: 4}}\nsteps:\n  - add_constant: {config: {field: value, add: 10}}\n"));
  REQUIRE(out.ok());
  CHECK(Ints(*out, "value_plus") == std::vector<int64_t>{10, 11, 12, 13});
  auto bad_config = RunSpec(absl::StrCat("plugins: ['", plugin, "']\nsource: {range: {stop: 4}}\nsteps:\n  - add_constant: {config: {add: 10}}\n"));
  REQUIRE_FALSE(bad_config.ok());
  CHECK_THAT(std::string(bad_config.status().message()), Catch::Contains("add_constant (plugin): config needs \"field\""));
  auto missing = RunSpec("plugins: [/nonexistent/libnope.so]\nsource: {range: {stop: 4}}\n");
  REQUIRE_FALSE(missing.ok());
  CHECK_THAT(std::string(missing.status().message()), Catch::Contains("cannot load plugin '/nonexistent/libnope.so'"));
  std::string not_plugin = absl::StrCat(sluice::testing::BinaryDir(), "/dataplane/pipeline/libsluice_not_a_plugin.so");
  auto wrong = LoadPlugin(not_plugin);
  REQUIRE_FALSE(wrong.ok());
  CHECK_THAT(std::string(wrong.message()), Catch::Contains("does not export sluice_plugin_init_v1"));
}

}  // namespace
}  // namespace sluice::pipeline
