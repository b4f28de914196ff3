#include "dataplane/dispatcher/split_limit.h"

#include <catch2/catch.hpp>

#include <string>

#include "absl/strings/str_cat.h"
#include "dataplane/dispatcher/dispatcher_test_util.h"
#include "dataplane/pipeline/source.h"
#include "dataplane/pipeline/spec_parser.h"
#include "testing/test_util.h"

namespace sluice::dispatcher {
namespace {

using sluice::testing::TempDir;
using sluice::testing::WriteFile;

pipeline::PipelineDef Spec(const std::string& yaml) {
  auto def = pipeline::ParsePipelineSpec(yaml, "spec.yaml");
  INFO(def.status().ToString());
  REQUIRE(def.ok());
  REQUIRE(pipeline::Canonicalize(*def).ok());
  return *def;
}

bool Contains(const absl::Status& s, const std::string& text) {
  return std::string(s.message()).find(text) != std::string::npos;
}

// The count agrees with the listed splits' number.
void CheckCountMatchesList(const pipeline::PipelineDef& def) {
  const pipeline::SourceDescriptor* sd = pipeline::SourceRegistry::Builtin().Find(def.source().kind());
  REQUIRE(sd != nullptr);
  auto source = sd->factory(pipeline::Args(def.source().args()));
  REQUIRE(source.ok());
  auto listed = (*source)->ListSplits();
  REQUIRE(listed.ok());
  auto counted = CountDatasetSplits(def);
  REQUIRE(counted.has_value());
  CHECK(*counted == listed->size());
}

TEST_CASE("split counts are computed without listing and agree with the lists") {
  for (const char* yaml : {"source: {range: {stop: 0}}", "source: {range: {stop: 1}}", "source: {range: {stop: 1024}}",
                           "source: {range: {stop: 1025}}", "source: {range: {start: 10, stop: -7, step: -3, split_size: 2}}",
                           "source: {range: {start: 5, stop: 3}}", "source: {synthetic: {count: 1000, split_size: 64}}",
                           "source: {synthetic: {count: 0}}"}) {
    INFO(yaml);
    CheckCountMatchesList(Spec(yaml));
  }
  TempDir dir;
  WriteFile(dir.File("a.jsonl"), std::string(100, 'x'));
  WriteFile(dir.File("b.jsonl"), "");
  WriteFile(dir.File("c.jsonl"), std::string(7, 'y'));
  for (int i = 0; i < 5; ++i) WriteFile(dir.File(absl::StrCat("f/", i, ".bin")), "z");
  for (const std::string& yaml :
       {absl::StrCat("source: {jsonl: {files: '", dir.File("*.jsonl"), "', split_bytes: 9}}"),
        absl::StrCat("source: {csv: {files: '", dir.File("*.jsonl"), "', split_bytes: 1}}"),
        absl::StrCat("source: {files: {files: '", dir.File("f/*.bin"), "', split_size: 2}}")}) {
    INFO(yaml);
    CheckCountMatchesList(Spec(yaml));
  }
}

TEST_CASE("a huge range is counted in constant time and refused with what to do") {
  // 2^40 values in splits of 1024: 2^30 splits, which the dispatcher would need ~240 GiB to list.
  const pipeline::PipelineDef def = Spec("source: {range: {stop: 1099511627776}}");
  CHECK(CountDatasetSplits(def) == uint64_t{1} << 30);
  absl::Status s = CheckSplitLimit(def, kDefaultMaxDatasetSplits);
  INFO(s.ToString());
  CHECK(s.code() == absl::StatusCode::kInvalidArgument);
  CHECK(Contains(s, "source range"));
  CHECK(Contains(s, "stop=1099511627776"));
  CHECK(Contains(s, "1073741824 splits"));
  CHECK(Contains(s, "limit of 1000000"));
  CHECK(Contains(s, "raise the source's split_size"));
  CHECK(Contains(s, "--max_dataset_splits"));

  // The widest range a source takes: 2^63-1 values from a negative start; counted without overflow.
  const pipeline::PipelineDef widest =
      Spec("source: {range: {start: -4611686018427387904, stop: 4611686018427387903, split_size: 2305843009213693952}}");
  CHECK(CountDatasetSplits(widest) == 4);
  CHECK(!CheckSplitLimit(widest, 3).ok());
  CHECK(CheckSplitLimit(widest, 4).ok());
  CheckCountMatchesList(widest);
}

TEST_CASE("a count exactly at the limit is accepted, one above is refused") {
  CHECK(CheckSplitLimit(Spec("source: {range: {stop: 1024000000}}"), kDefaultMaxDatasetSplits).ok());  // 1,000,000
  CHECK(!CheckSplitLimit(Spec("source: {range: {stop: 1024000001}}"), kDefaultMaxDatasetSplits).ok());
  // synthetic with 10^8 elements in splits of 64 is 1,562,500 splits: refused; in splits of 128, accepted.
  absl::Status s = CheckSplitLimit(Spec("source: {synthetic: {count: 100000000, split_size: 64}}"), kDefaultMaxDatasetSplits);
  CHECK(s.code() == absl::StatusCode::kInvalidArgument);
  CHECK(Contains(s, "source synthetic count=100000000"));
  CHECK(Contains(s, "1562500 splits"));
  CHECK(CheckSplitLimit(Spec("source: {synthetic: {count: 100000000, split_size: 128}}"), kDefaultMaxDatasetSplits).ok());
  // A limit of 0 or below turns the check off (the dispatcher's flag refuses such values).
  CHECK(CheckSplitLimit(Spec("source: {range: {stop: 1099511627776}}"), 0).ok());
}

TEST_CASE("byte-range and file sources: the hint names their own knob") {
  TempDir dir;
  WriteFile(dir.File("a.jsonl"), std::string(100, 'x'));
  absl::Status s = CheckSplitLimit(Spec(absl::StrCat("source: {jsonl: {files: '", dir.File("a.jsonl"), "', split_bytes: 1}}")), 99);
  CHECK(s.code() == absl::StatusCode::kInvalidArgument);
  CHECK(Contains(s, "100 splits"));
  CHECK(Contains(s, "raise the source's split_bytes"));
  CHECK(CheckSplitLimit(Spec(absl::StrCat("source: {jsonl: {files: '", dir.File("a.jsonl"), "', split_bytes: 1}}")), 100).ok());

  WriteFile(dir.File("r/0.tfrecord"), "");
  WriteFile(dir.File("r/1.tfrecord"), "");
  s = CheckSplitLimit(Spec(absl::StrCat("source: {tfrecord: {files: '", dir.File("r/*.tfrecord"), "'}}")), 1);
  CHECK(s.code() == absl::StatusCode::kInvalidArgument);
  CHECK(Contains(s, "2 splits"));
  CHECK(Contains(s, "fewer, larger files"));
}

TEST_CASE("what cannot be counted here is left to the pipeline's own errors") {
  // A glob matching nothing: counted as unknown, not refused by the limit (ListSplits names it).
  pipeline::PipelineDef missing = Spec("source: {jsonl: {files: /nonexistent/sluice/*.jsonl}}");
  CHECK(!CountDatasetSplits(missing).has_value());
  CHECK(CheckSplitLimit(missing, 1).ok());
  pipeline::PipelineDef unknown;
  unknown.mutable_source()->set_kind("no-such-source");
  CHECK(!CountDatasetSplits(unknown).has_value());
  CHECK(CheckSplitLimit(unknown, 1).ok());
  // A range with more values than an int64 counts: the source refuses it.
  auto too_wide = pipeline::ParsePipelineSpec(
      "source: {range: {start: -9223372036854775807, stop: 9223372036854775807, step: 1}}", "spec.yaml");
  REQUIRE(too_wide.ok());
  CHECK(!CountDatasetSplits(*too_wide).has_value());
}

TEST_CASE("RegisterDataset: over --max_dataset_splits is INVALID_ARGUMENT, nothing journaled - at it, registered") {
  TempDir dir;
  DispatcherOptions options;
  options.max_dataset_splits = 10;
  testing::ServiceHarness h(dir.File("journal"), options);
  REQUIRE(h.start_status().ok());
  service::RegisterDatasetRequest req;
  service::RegisterDatasetResponse resp;
  *req.mutable_pipeline() = testing::RangePipeline(int64_t{1} << 40, 1024);
  absl::Status s = h.service().RegisterDataset(req, &resp);
  INFO(s.ToString());
  CHECK(s.code() == absl::StatusCode::kInvalidArgument);
  CHECK(Contains(s, "1073741824 splits"));
  CHECK(Contains(s, "limit of 10 "));
  *req.mutable_pipeline() = testing::RangePipeline(101, 10);  // 11 splits
  CHECK(h.service().RegisterDataset(req, &resp).code() == absl::StatusCode::kInvalidArgument);
  h.Restart();
  CHECK(h.recovered().updates.empty());  // the refused datasets left nothing in the journal
  *req.mutable_pipeline() = testing::RangePipeline(100, 10);  // 10 splits
  REQUIRE(h.service().RegisterDataset(req, &resp).ok());
  CHECK(resp.num_splits() == 10);
}

}  // namespace
}  // namespace sluice::dispatcher
