// End-to-end: a YAML spec with the tfrecord source and parse_example, run by the pipeline executor.
#include <catch2/catch.hpp>

#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "dataplane/pipeline/pipeline.h"
#include "dataplane/pipeline/spec_parser.h"
#include "dataplane/pipeline/tfrecord/example.h"
#include "dataplane/pipeline/tfrecord/tfrecord_test_util.h"
#include "dataplane/pipeline/tfrecord/tfrecord_writer.h"
#include "testing/test_util.h"

namespace sluice::pipeline {
namespace {

using ::sluice::pipeline::testing::RecordOffset;

std::vector<std::string> ExampleRecords(int first, int count) {
  std::vector<std::string> records;
  for (int i = first; i < first + count; ++i) {
    Element element;
    element.Set("image", Tensor::StringScalar(absl::StrCat("pixels-", i)));
    element.Set("label", Tensor::Scalar(i));
    records.push_back(*EncodeExample(element));
  }
  return records;
}

struct RunResult {
  std::vector<std::pair<int64_t, std::string>> rows;  // (label, image), sorted
  absl::Status error;
  uint64_t skipped = 0;
};

RunResult Run(const std::string& spec) {
  RunResult result;
  auto def = ParsePipelineSpec(spec, "test.yaml");
  if (!def.ok()) {
    result.error = def.status();
    return result;
  }
  auto pipeline = Pipeline::Create(*std::move(def));
  if (!pipeline.ok()) {
    result.error = pipeline.status();
    return result;
  }
  auto iterator = (*pipeline)->MakeIterator();
  if (!iterator.ok()) {
    result.error = iterator.status();
    return result;
  }
  while (true) {
    auto element = (*iterator)->Next();
    if (!element.ok()) {
      result.error = element.status();
      break;
    }
    if (!element->has_value()) break;
    const Tensor* label = (*element)->Find("label");
    const Tensor* image = (*element)->Find("image");
    REQUIRE(label != nullptr);
    REQUIRE(image != nullptr);
    CHECK((*element)->Find("record") == nullptr);
    result.rows.emplace_back(*label->AsInt64(), std::string(image->strings()[0]));
  }
  std::sort(result.rows.begin(), result.rows.end());
  for (const auto& stage : (*pipeline)->Stats()) {
    if (stage.kind == "source") result.skipped += stage.errors_skipped;
  }
  return result;
}

std::string Spec(const std::string& files, const std::string& on_error) {
  return absl::StrCat(
      "source:\n"
      "  tfrecord: {files: '", files, "', on_error: ", on_error, "}\n"
      "steps:\n"
      "  - map:\n"
      "      ops:\n"
      "        - parse_example:\n"
      "            features:\n"
      "              image: bytes\n"
      "              label: {type: int64}\n");
}

TEST_CASE("a spec reads plain and gzip TFRecord files of Examples", "[tfrecord][pipeline]") {
  sluice::testing::TempDir dir;
  REQUIRE(WriteTFRecordFile(dir.File("a.tfrecord"), ExampleRecords(0, 20)).ok());
  REQUIRE(WriteTFRecordFile(dir.File("b.tfrecord.gz"), ExampleRecords(20, 15),
                            TFRecordCompression::kGzip)
              .ok());
  const RunResult result = Run(Spec(dir.File("*.tfrecord*"), "fail"));
  REQUIRE(result.error.ok());
  REQUIRE(result.rows.size() == 35);
  for (int i = 0; i < 35; ++i) {
    CHECK(result.rows[i].first == i);
    CHECK(result.rows[i].second == absl::StrCat("pixels-", i));
  }
}

TEST_CASE("a spec with on_error skip counts corrupt records in the source stats",
          "[tfrecord][pipeline]") {
  sluice::testing::TempDir dir;
  const auto records = ExampleRecords(0, 10);
  std::string bytes = EncodeTFRecords(records);
  bytes[RecordOffset(records, 4) + kTFRecordHeaderBytes + 3] ^= 0x20;
  sluice::testing::WriteFile(dir.File("bad.tfrecord"), bytes);

  const RunResult skipped = Run(Spec(dir.File("bad.tfrecord"), "skip"));
  REQUIRE(skipped.error.ok());
  CHECK(skipped.rows.size() == 9);
  CHECK(skipped.skipped == 1);

  const RunResult failed = Run(Spec(dir.File("bad.tfrecord"), "fail"));
  CHECK(failed.error.code() == absl::StatusCode::kDataLoss);
  CHECK_THAT(std::string(failed.error.message()),
             Catch::Contains(dir.File("bad.tfrecord") + ": record at byte offset " +
                             std::to_string(RecordOffset(records, 4)) + ": data CRC mismatch"));
}

TEST_CASE("a spec over an empty glob fails naming the pattern", "[tfrecord][pipeline]") {
  sluice::testing::TempDir dir;
  const RunResult result = Run(Spec(dir.File("none-*.tfrecord"), "fail"));
  CHECK(!result.error.ok());
  CHECK_THAT(std::string(result.error.message()), Catch::Contains("none-*.tfrecord"));
}

}  // namespace
}  // namespace sluice::pipeline
