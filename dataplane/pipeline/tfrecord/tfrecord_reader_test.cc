#include "dataplane/pipeline/tfrecord/tfrecord_reader.h"

#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "dataplane/pipeline/tfrecord/byte_stream.h"
#include "dataplane/pipeline/tfrecord/tfrecord_test_util.h"
#include "dataplane/pipeline/tfrecord/tfrecord_writer.h"
#include "testing/test_util.h"

namespace sluice::pipeline {
namespace {

using ::sluice::pipeline::testing::CopyToBuffer;
using ::sluice::pipeline::testing::FromHex;
using ::sluice::pipeline::testing::RecordOffset;
using ::sluice::pipeline::testing::SampleRecords;

// Outcome of reading a whole stream: the records, then the errors in order (code and message).
struct ReadResult {
  std::vector<std::string> records;
  std::vector<uint64_t> offsets;
  std::vector<absl::Status> errors;
};

ReadResult ReadAll(TFRecordReader& reader, bool continue_after_errors = true) {
  ReadResult result;
  for (int guard = 0; guard < 100000; ++guard) {
    auto record = reader.Next();
    if (!record.ok()) {
      result.errors.push_back(record.status());
      if (!continue_after_errors) break;
      continue;
    }
    if (!record->has_value()) break;
    result.records.emplace_back((*record)->data);
    result.offsets.push_back((*record)->offset);
  }
  return result;
}

ReadResult ReadBuffer(const std::string& bytes, TFRecordReaderOptions options = {}) {
  auto reader = NewBufferTFRecordReader(CopyToBuffer(bytes), "data.tfrecord", options);
  return ReadAll(*reader);
}

ReadResult ReadStream(const std::string& bytes, TFRecordReaderOptions options = {}) {
  auto reader = NewStreamTFRecordReader(NewMemoryByteStream(bytes), "data.tfrecord", options);
  return ReadAll(*reader);
}

std::string Framed(const std::vector<std::string>& records) { return EncodeTFRecords(records); }

TEST_CASE("a hand-verified record decodes and encodes byte for byte", "[tfrecord]") {
  // "hello" framed by an independent CRC-32C implementation: length 5, masked length CRC
  // 0x3e04b2ea, the data, masked data CRC 0x191c1fbb.
  const std::string hello = FromHex("0500000000000000eab2043e68656c6c6fbb1f1c19");
  // An empty record.
  const std::string empty = FromHex("000000000000000029039807d8ea82a2");
  CHECK(Framed({"hello"}) == hello);
  CHECK(Framed({""}) == empty);
  const ReadResult result = ReadBuffer(hello + empty);
  REQUIRE(result.errors.empty());
  CHECK(result.records == std::vector<std::string>{"hello", ""});
  CHECK(result.offsets == std::vector<uint64_t>{0, 21});
}

TEST_CASE("buffer and stream readers return every record with its offset", "[tfrecord]") {
  const auto records = SampleRecords(50);
  const std::string bytes = Framed(records);
  for (size_t chunk : {size_t{1}, size_t{7}, size_t{64}, size_t{1} << 20}) {
    TFRecordReaderOptions options;
    options.chunk_bytes = chunk;
    INFO("chunk " << chunk);
    const ReadResult stream = ReadStream(bytes, options);
    REQUIRE(stream.errors.empty());
    CHECK(stream.records == records);
    CHECK(stream.offsets[10] == RecordOffset(records, 10));
  }
  const ReadResult buffer = ReadBuffer(bytes);
  REQUIRE(buffer.errors.empty());
  CHECK(buffer.records == records);
  CHECK(buffer.offsets[49] == RecordOffset(records, 49));
  CHECK(ReadBuffer("").records.empty());
  CHECK(ReadStream("").records.empty());
}

TEST_CASE("buffer reader records are zero-copy views that outlive the reader", "[tfrecord]") {
  const auto records = SampleRecords(5);
  const Buffer buffer = CopyToBuffer(Framed(records));
  std::vector<TFRecord> kept;
  {
    auto reader = NewBufferTFRecordReader(buffer, "x", {});
    while (true) {
      auto record = reader->Next();
      REQUIRE(record.ok());
      if (!record->has_value()) break;
      kept.push_back(**record);
    }
  }
  REQUIRE(kept.size() == records.size());
  for (size_t i = 0; i < kept.size(); ++i) {
    const auto* p = reinterpret_cast<const uint8_t*>(kept[i].data.data());
    CHECK(p == buffer.data + RecordOffset(records, i) + kTFRecordHeaderBytes);
    CHECK(kept[i].owner == buffer.owner);
    CHECK(kept[i].index == i);
  }
}

TEST_CASE("a corrupt length CRC names the file and offset and ends the file", "[tfrecord]") {
  const auto records = SampleRecords(6);
  std::string bytes = Framed(records);
  const size_t bad = RecordOffset(records, 3);
  bytes[bad] ^= 0x01;  // the length's low byte
  for (const ReadResult& result : {ReadBuffer(bytes), ReadStream(bytes)}) {
    CHECK(result.records == std::vector<std::string>(records.begin(), records.begin() + 3));
    REQUIRE(result.errors.size() == 1);
    CHECK(result.errors[0].code() == absl::StatusCode::kDataLoss);
    CHECK_THAT(std::string(result.errors[0].message()),
               Catch::StartsWith("data.tfrecord: record at byte offset " + std::to_string(bad) +
                                 ": length CRC mismatch (stored 0x"));
  }
}

TEST_CASE("a corrupt data CRC names both CRCs and reading continues after it", "[tfrecord]") {
  const auto records = SampleRecords(6);
  std::string bytes = Framed(records);
  const size_t bad = RecordOffset(records, 2);
  REQUIRE(!records[2].empty());
  bytes[bad + kTFRecordHeaderBytes] ^= 0x40;  // first data byte
  for (const ReadResult& result : {ReadBuffer(bytes), ReadStream(bytes)}) {
    std::vector<std::string> expected = records;
    expected.erase(expected.begin() + 2);
    CHECK(result.records == expected);
    REQUIRE(result.errors.size() == 1);
    CHECK(result.errors[0].code() == absl::StatusCode::kDataLoss);
    CHECK_THAT(std::string(result.errors[0].message()),
               Catch::Matches("data\\.tfrecord: record at byte offset " + std::to_string(bad) +
                              ": data CRC mismatch \\(stored 0x[0-9a-f]{8}, computed 0x[0-9a-f]{8}\\)"));
  }
  TFRecordReaderOptions unchecked;
  unchecked.verify_crc = false;
  const ReadResult result = ReadBuffer(bytes, unchecked);
  CHECK(result.errors.empty());
  CHECK(result.records.size() == records.size());
  CHECK(result.records[2] != records[2]);
}

TEST_CASE("truncated files report a truncated record or header", "[tfrecord]") {
  const auto records = SampleRecords(4);
  const std::string bytes = Framed(records);
  const size_t last = RecordOffset(records, 3);
  SECTION("inside the data") {
    const std::string cut = bytes.substr(0, bytes.size() - 2);
    for (const ReadResult& result : {ReadBuffer(cut), ReadStream(cut)}) {
      CHECK(result.records.size() == 3);
      REQUIRE(result.errors.size() == 1);
      CHECK(result.errors[0].code() == absl::StatusCode::kDataLoss);
      CHECK_THAT(std::string(result.errors[0].message()),
                 Catch::Contains("record at byte offset " + std::to_string(last) +
                                 ": truncated record (length " +
                                 std::to_string(records[3].size())));
    }
  }
  SECTION("inside the header") {
    const std::string cut = bytes.substr(0, last + 5);
    for (const ReadResult& result : {ReadBuffer(cut), ReadStream(cut)}) {
      CHECK(result.records.size() == 3);
      REQUIRE(result.errors.size() == 1);
      CHECK_THAT(std::string(result.errors[0].message()),
                 Catch::Contains("record at byte offset " + std::to_string(last) +
                                 ": truncated record header (5 of 12 bytes"));
    }
  }
  SECTION("a huge length with CRCs off does not allocate it") {
    std::string bogus = bytes.substr(0, last);
    bogus += FromHex("ffffffffffffff7f00000000");
    bogus += "some bytes";
    TFRecordReaderOptions unchecked;
    unchecked.verify_crc = false;
    for (const ReadResult& result : {ReadBuffer(bogus, unchecked), ReadStream(bogus, unchecked)}) {
      CHECK(result.records.size() == 3);
      REQUIRE(result.errors.size() == 1);
      CHECK_THAT(std::string(result.errors[0].message()), Catch::Contains("truncated record"));
    }
  }
}

TEST_CASE("records over the size limit are rejected and skipped past", "[tfrecord]") {
  const std::vector<std::string> records = {"small", std::string(100, 'x'), "tiny"};
  const std::string bytes = Framed(records);
  TFRecordReaderOptions options;
  options.max_record_bytes = 10;
  options.chunk_bytes = 16;
  for (const ReadResult& result : {ReadBuffer(bytes, options), ReadStream(bytes, options)}) {
    CHECK(result.records == std::vector<std::string>{"small", "tiny"});
    REQUIRE(result.errors.size() == 1);
    CHECK(result.errors[0].code() == absl::StatusCode::kResourceExhausted);
    CHECK_THAT(std::string(result.errors[0].message()),
               Catch::Contains("record at byte offset 21: record of 100 bytes exceeds the limit "
                               "of 10 bytes"));
  }
}

TEST_CASE("an oversize length of 2^64-1 ends the file instead of wrapping around", "[tfrecord]") {
  // Found by fuzzing: skipping 16 + length bytes overflowed and the stream reader resynchronised
  // on garbage.
  std::string bytes = FromHex("ffffffffffffffff00000000") + std::string(40, 'z');
  TFRecordReaderOptions options;
  options.verify_crc = false;
  options.max_record_bytes = 64;
  for (const ReadResult& result : {ReadBuffer(bytes, options), ReadStream(bytes, options)}) {
    CHECK(result.records.empty());
    REQUIRE(result.errors.size() == 1);
    CHECK(result.errors[0].code() == absl::StatusCode::kResourceExhausted);
  }
}

TEST_CASE("compressed files round-trip through gzip and zlib", "[tfrecord]") {
  sluice::testing::TempDir dir;
  const auto records = SampleRecords(300);
  for (auto compression : {TFRecordCompression::kGzip, TFRecordCompression::kZlib}) {
    const std::string path = dir.File(std::string("data.") + std::string(TFRecordCompressionName(compression)));
    REQUIRE(WriteTFRecordFile(path, records, compression).ok());
    const std::string on_disk = sluice::testing::ReadFile(path);
    CHECK(on_disk.size() < Framed(records).size());
    if (compression == TFRecordCompression::kGzip) {
      CHECK(static_cast<uint8_t>(on_disk[0]) == 0x1f);
      CHECK(static_cast<uint8_t>(on_disk[1]) == 0x8b);
    }
    TFRecordReaderOptions options;
    options.chunk_bytes = 1000;
    auto reader = OpenTFRecordFile(path, compression, options);
    REQUIRE(reader.ok());
    const ReadResult result = ReadAll(**reader);
    CHECK(result.errors.empty());
    CHECK(result.records == records);
    // Reading a compressed file as uncompressed fails cleanly instead of returning garbage.
    auto raw = OpenTFRecordFile(path, TFRecordCompression::kNone, {});
    REQUIRE(raw.ok());
    CHECK(!ReadAll(**raw).errors.empty());
  }
}

TEST_CASE("concatenated gzip members read as one file", "[tfrecord]") {
  std::string first, second;
  {
    DeflateBuffer deflate(ZlibFormat::kGzip, &first);
    REQUIRE(deflate.Append(Framed({"a", "b"})).ok());
    REQUIRE(deflate.Finish().ok());
  }
  {
    DeflateBuffer deflate(ZlibFormat::kGzip, &second);
    REQUIRE(deflate.Append(Framed({"c"})).ok());
    REQUIRE(deflate.Finish().ok());
  }
  const std::string both = first + second;
  auto reader = NewStreamTFRecordReader(
      NewInflateByteStream(NewMemoryByteStream(both), ZlibFormat::kGzip, "cat.gz"), "cat.gz", {});
  const ReadResult result = ReadAll(*reader);
  CHECK(result.errors.empty());
  CHECK(result.records == std::vector<std::string>{"a", "b", "c"});
}

TEST_CASE("corrupt and truncated gzip data give errors naming the compressed offset", "[tfrecord]") {
  std::string compressed;
  {
    DeflateBuffer deflate(ZlibFormat::kGzip, &compressed);
    REQUIRE(deflate.Append(Framed(SampleRecords(200))).ok());
    REQUIRE(deflate.Finish().ok());
  }
  REQUIRE(compressed.size() > 100);
  SECTION("truncated") {
    const std::string cut = compressed.substr(0, compressed.size() / 2);
    auto reader = NewStreamTFRecordReader(
        NewInflateByteStream(NewMemoryByteStream(cut), ZlibFormat::kGzip, "part.gz"), "part.gz", {});
    const ReadResult result = ReadAll(*reader);
    REQUIRE(result.errors.size() == 1);
    CHECK(result.errors[0].code() == absl::StatusCode::kDataLoss);
    CHECK_THAT(std::string(result.errors[0].message()),
               Catch::Contains("part.gz: gzip stream truncated at compressed byte offset " +
                               std::to_string(cut.size())));
  }
  SECTION("bad header") {
    std::string bad = compressed;
    bad[0] = 'X';
    auto reader = NewStreamTFRecordReader(
        NewInflateByteStream(NewMemoryByteStream(bad), ZlibFormat::kGzip, "bad.gz"), "bad.gz", {});
    const ReadResult result = ReadAll(*reader);
    CHECK(result.records.empty());
    REQUIRE(result.errors.size() == 1);
    CHECK_THAT(std::string(result.errors[0].message()),
               Catch::StartsWith("bad.gz: corrupt gzip data at compressed byte offset"));
  }
}

TEST_CASE("byte-range splits on record boundaries partition the file", "[tfrecord]") {
  sluice::testing::TempDir dir;
  const auto records = SampleRecords(20);
  const std::string path = dir.File("r.tfrecord");
  REQUIRE(WriteTFRecordFile(path, records).ok());
  const int64_t middle = static_cast<int64_t>(RecordOffset(records, 8));
  TFRecordReaderOptions options;
  // Cut the range in the middle of record 8's bytes: record 8 starts before the cut and belongs
  // to the first range.
  auto first = OpenTFRecordFile(path, TFRecordCompression::kNone, options, 0, middle + 3);
  auto second = OpenTFRecordFile(path, TFRecordCompression::kNone, options,
                                 static_cast<int64_t>(RecordOffset(records, 9)), -1);
  REQUIRE(first.ok());
  REQUIRE(second.ok());
  ReadResult a = ReadAll(**first);
  ReadResult b = ReadAll(**second);
  CHECK(a.errors.empty());
  CHECK(b.errors.empty());
  CHECK(a.records.size() == 9);
  a.records.insert(a.records.end(), b.records.begin(), b.records.end());
  CHECK(a.records == records);

  auto gz = OpenTFRecordFile(path, TFRecordCompression::kGzip, options, 10, -1);
  CHECK(gz.status().code() == absl::StatusCode::kInvalidArgument);
  auto past = OpenTFRecordFile(path, TFRecordCompression::kNone, options, 1 << 20, -1);
  CHECK(past.status().code() == absl::StatusCode::kInvalidArgument);
}

TEST_CASE("the mmap and read paths give the same records", "[tfrecord]") {
  sluice::testing::TempDir dir;
  const auto records = SampleRecords(40);
  const std::string path = dir.File("m.tfrecord");
  REQUIRE(WriteTFRecordFile(path, records).ok());
  for (size_t threshold : {size_t{0}, size_t{1} << 30}) {
    TFRecordReaderOptions options;
    options.mmap_threshold_bytes = threshold;
    auto reader = OpenTFRecordFile(path, TFRecordCompression::kNone, options);
    REQUIRE(reader.ok());
    CHECK(ReadAll(**reader).records == records);
  }
  const std::string empty = dir.File("empty.tfrecord");
  REQUIRE(WriteTFRecordFile(empty, {}).ok());
  auto reader = OpenTFRecordFile(empty, TFRecordCompression::kNone, {});
  REQUIRE(reader.ok());
  CHECK(ReadAll(**reader).records.empty());
}

TEST_CASE("a missing file is NotFound naming the path", "[tfrecord]") {
  auto reader = OpenTFRecordFile("/nonexistent/dir/x.tfrecord", TFRecordCompression::kNone, {});
  CHECK(reader.status().code() == absl::StatusCode::kNotFound);
  CHECK_THAT(std::string(reader.status().message()), Catch::StartsWith("/nonexistent/dir/x.tfrecord"));
  auto gz = OpenTFRecordFile("/nonexistent/dir/x.gz", TFRecordCompression::kGzip, {});
  CHECK(gz.status().code() == absl::StatusCode::kNotFound);
}

TEST_CASE("compression auto picks by extension", "[tfrecord]") {
  CHECK(*ResolveTFRecordCompression("auto", "a/b.tfrecord.gz") == TFRecordCompression::kGzip);
  CHECK(*ResolveTFRecordCompression("auto", "a/b.gzip") == TFRecordCompression::kGzip);
  CHECK(*ResolveTFRecordCompression("auto", "a/b.zz") == TFRecordCompression::kZlib);
  CHECK(*ResolveTFRecordCompression("auto", "a/b.zlib") == TFRecordCompression::kZlib);
  CHECK(*ResolveTFRecordCompression("auto", "a/b.tfrecord") == TFRecordCompression::kNone);
  CHECK(*ResolveTFRecordCompression("gzip", "a/b.tfrecord") == TFRecordCompression::kGzip);
  auto bad = ResolveTFRecordCompression("lzma", "x");
  CHECK(bad.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK_THAT(std::string(bad.status().message()), Catch::Contains("'lzma'"));
}

TEST_CASE("the writer's streaming API matches WriteTFRecordFile", "[tfrecord]") {
  sluice::testing::TempDir dir;
  const auto records = SampleRecords(10);
  auto writer = TFRecordWriter::Open(dir.File("w.tfrecord"));
  REQUIRE(writer.ok());
  for (const auto& record : records) REQUIRE((*writer)->Write(record).ok());
  REQUIRE((*writer)->Close().ok());
  CHECK(sluice::testing::ReadFile(dir.File("w.tfrecord")) == Framed(records));
  CHECK(!(*writer)->Write("late").ok());
  CHECK(TFRecordWriter::Open(dir.File("no/such/dir/w.tfrecord")).status().code() ==
        absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace sluice::pipeline
