// Tests of the `tfrecord` source through the source registry, as the executor uses it.
#include <catch2/catch.hpp>

#include <set>
#include <string>
#include <vector>

#include "dataplane/pipeline/source.h"
#include "dataplane/pipeline/stats.h"
#include "dataplane/pipeline/tfrecord/tfrecord_test_util.h"
#include "dataplane/pipeline/tfrecord/tfrecord_writer.h"
#include "testing/test_util.h"

namespace sluice::pipeline {
namespace {

using ::sluice::pipeline::testing::RecordOffset;
using ::sluice::pipeline::testing::SampleRecords;

// Builds the tfrecord source from arguments, validated as the spec parser would.
absl::StatusOr<std::unique_ptr<Source>> MakeSource(
    std::vector<std::pair<std::string, Value>> arguments) {
  static SourceRegistry* registry = [] {
    auto* r = new SourceRegistry();
    RegisterTFRecordSource(*r);
    return r;
  }();
  const SourceDescriptor* descriptor = registry->Find("tfrecord");
  if (descriptor == nullptr) return absl::NotFoundError("tfrecord source not registered");
  ValueMap map;
  for (auto& [name, value] : arguments) SetArg(map, name, value);
  if (auto status = ValidateArgs(descriptor->args, map, "source"); !status.ok()) return status;
  return descriptor->factory(Args(map));
}

struct Drained {
  std::vector<std::string> records;
  std::vector<uint64_t> keys;
  absl::Status error;
};

Drained Drain(const Source& source, const SourceContext& context) {
  Drained out;
  auto splits = source.ListSplits();
  if (!splits.ok()) {
    out.error = splits.status();
    return out;
  }
  for (const Split& split : *splits) {
    auto reader = source.Open(split, context);
    if (!reader.ok()) {
      out.error = reader.status();
      return out;
    }
    while (true) {
      auto element = (*reader)->Next();
      if (!element.ok()) {
        out.error = element.status();
        return out;
      }
      if (!element->has_value()) break;
      const Tensor* record = (*element)->Find("record");
      REQUIRE(record != nullptr);
      REQUIRE(record->dtype() == DType::kString);
      REQUIRE(record->rank() == 0);
      out.records.emplace_back(record->strings()[0]);
      out.keys.push_back((*element)->key());
    }
  }
  return out;
}

TEST_CASE("tfrecord source reads every file of a glob in order with stable keys", "[tfrecord]") {
  sluice::testing::TempDir dir;
  const auto a = SampleRecords(7);
  const auto b = SampleRecords(3);
  REQUIRE(WriteTFRecordFile(dir.File("part-1.tfrecord"), b).ok());
  REQUIRE(WriteTFRecordFile(dir.File("part-0.tfrecord"), a).ok());
  auto source = MakeSource({{"files", StringValue(dir.File("part-*.tfrecord"))}});
  REQUIRE(source.ok());
  auto splits = (*source)->ListSplits();
  REQUIRE(splits.ok());
  REQUIRE(splits->size() == 2);
  CHECK((*splits)[0].path == dir.File("part-0.tfrecord"));
  CHECK((*splits)[0].index == 0);
  CHECK((*splits)[1].index == 1);

  const Drained drained = Drain(**source, {});
  REQUIRE(drained.error.ok());
  std::vector<std::string> expected = a;
  expected.insert(expected.end(), b.begin(), b.end());
  CHECK(drained.records == expected);
  CHECK(drained.keys[0] == MixKey(0, 0));
  CHECK(drained.keys[8] == MixKey(1, 1));
  CHECK(std::set<uint64_t>(drained.keys.begin(), drained.keys.end()).size() == expected.size());
}

TEST_CASE("tfrecord source accepts comma-separated files and gzip by extension", "[tfrecord]") {
  sluice::testing::TempDir dir;
  REQUIRE(WriteTFRecordFile(dir.File("x.tfrecord.gz"), {"g1", "g2"}, TFRecordCompression::kGzip).ok());
  REQUIRE(WriteTFRecordFile(dir.File("y.tfrecord"), {"p1"}).ok());
  auto source = MakeSource(
      {{"files", StringValue(dir.File("x.tfrecord.gz") + "," + dir.File("y.tfrecord"))}});
  REQUIRE(source.ok());
  const Drained drained = Drain(**source, {});
  REQUIRE(drained.error.ok());
  CHECK(drained.records == std::vector<std::string>{"g1", "g2", "p1"});

  auto forced = MakeSource({{"files", StringValue(dir.File("y.tfrecord"))},
                            {"compression", StringValue("gzip")}});
  REQUIRE(forced.ok());
  CHECK(!Drain(**forced, {}).error.ok());
}

TEST_CASE("tfrecord source fails on corruption with the file and offset", "[tfrecord]") {
  sluice::testing::TempDir dir;
  const auto records = SampleRecords(5);
  std::string bytes = EncodeTFRecords(records);
  const size_t bad = RecordOffset(records, 1);
  bytes[bad + kTFRecordHeaderBytes] ^= 0x01;
  const std::string path = dir.File("bad.tfrecord");
  sluice::testing::WriteFile(path, bytes);
  auto source = MakeSource({{"files", StringValue(path)}});
  REQUIRE(source.ok());
  const Drained drained = Drain(**source, {});
  CHECK(drained.records.size() == 1);
  CHECK(drained.error.code() == absl::StatusCode::kDataLoss);
  CHECK_THAT(std::string(drained.error.message()),
             Catch::StartsWith(path + ": record at byte offset " + std::to_string(bad) +
                               ": data CRC mismatch"));

  auto unchecked = MakeSource({{"files", StringValue(path)}, {"verify_crc", BoolValue(false)}});
  REQUIRE(unchecked.ok());
  const Drained all = Drain(**unchecked, {});
  CHECK(all.error.ok());
  CHECK(all.records.size() == records.size());
}

TEST_CASE("on_error skip counts bad records and keeps reading", "[tfrecord]") {
  sluice::testing::TempDir dir;
  const auto records = SampleRecords(6);
  std::string data_damage = EncodeTFRecords(records);
  data_damage[RecordOffset(records, 2) + kTFRecordHeaderBytes] ^= 0x01;
  data_damage[RecordOffset(records, 4) + kTFRecordHeaderBytes] ^= 0x01;
  std::string length_damage = EncodeTFRecords(records);
  length_damage[RecordOffset(records, 3) + 2] ^= 0x10;
  sluice::testing::WriteFile(dir.File("a.tfrecord"), data_damage);
  sluice::testing::WriteFile(dir.File("b.tfrecord"), length_damage);
  REQUIRE(WriteTFRecordFile(dir.File("c.tfrecord"), {"last"}).ok());
  auto source = MakeSource({{"files", StringValue(dir.File("*.tfrecord"))},
                            {"on_error", StringValue("skip")}});
  REQUIRE(source.ok());
  StageStats stats(0, "source[tfrecord]", "source");
  SourceContext context;
  context.on_error = OnError::kSkip;
  context.stats = &stats;
  const Drained drained = Drain(**source, context);
  REQUIRE(drained.error.ok());
  // a: 4 good of 6; b: records before the broken length (3), then the rest of b is lost; c: 1.
  CHECK(drained.records.size() == 4 + 3 + 1);
  CHECK(drained.records.back() == "last");
  CHECK(stats.Snapshot().errors_skipped == 3);
  // Keys of records after a skipped one stay what they would be in an undamaged file.
  CHECK(drained.keys[2] == MixKey(0, 3));
}

TEST_CASE("tfrecord source rejects records over max_element_bytes", "[tfrecord]") {
  sluice::testing::TempDir dir;
  REQUIRE(WriteTFRecordFile(dir.File("big.tfrecord"), {"ok", std::string(5000, 'b'), "ok2"}).ok());
  auto source = MakeSource({{"files", StringValue(dir.File("big.tfrecord"))}});
  REQUIRE(source.ok());
  SourceContext context;
  context.max_element_bytes = 1000;
  const Drained failed = Drain(**source, context);
  CHECK(failed.error.code() == absl::StatusCode::kResourceExhausted);
  CHECK_THAT(std::string(failed.error.message()),
             Catch::Contains("record of 5000 bytes exceeds the limit of 1000 bytes"));
  StageStats stats(0, "s", "source");
  context.on_error = OnError::kSkip;
  context.stats = &stats;
  const Drained skipped = Drain(**source, context);
  CHECK(skipped.error.ok());
  CHECK(skipped.records == std::vector<std::string>{"ok", "ok2"});
  CHECK(stats.Snapshot().errors_skipped == 1);
}

TEST_CASE("an empty glob or missing file is an error naming the pattern", "[tfrecord]") {
  sluice::testing::TempDir dir;
  auto empty = MakeSource({{"files", StringValue(dir.File("nothing-*.tfrecord"))}});
  REQUIRE(empty.ok());
  auto splits = (*empty)->ListSplits();
  CHECK(splits.status().code() == absl::StatusCode::kNotFound);
  CHECK_THAT(std::string(splits.status().message()), Catch::Contains(dir.File("nothing-*.tfrecord")));

  auto missing = MakeSource({{"files", StringValue(dir.File("missing.tfrecord"))}});
  REQUIRE(missing.ok());
  splits = (*missing)->ListSplits();
  CHECK(!splits.ok());
  CHECK_THAT(std::string(splits.status().message()), Catch::Contains(dir.File("missing.tfrecord")));

  // A file listed and then removed before it is opened.
  REQUIRE(WriteTFRecordFile(dir.File("gone.tfrecord"), {"x"}).ok());
  auto gone = MakeSource({{"files", StringValue(dir.File("gone.tfrecord"))}});
  REQUIRE(gone.ok());
  auto listed = (*gone)->ListSplits();
  REQUIRE(listed.ok());
  std::filesystem::remove(dir.File("gone.tfrecord"));
  auto reader = (*gone)->Open((*listed)[0], {});
  CHECK(reader.status().code() == absl::StatusCode::kNotFound);
  CHECK_THAT(std::string(reader.status().message()), Catch::Contains("gone.tfrecord"));
}

TEST_CASE("tfrecord source argument errors", "[tfrecord]") {
  CHECK(!MakeSource({}).ok());  // files is required
  CHECK(!MakeSource({{"files", StringValue("x")}, {"compression", StringValue("lz4")}}).ok());
  CHECK(!MakeSource({{"files", StringValue("")}}).ok());
}

}  // namespace
}  // namespace sluice::pipeline
