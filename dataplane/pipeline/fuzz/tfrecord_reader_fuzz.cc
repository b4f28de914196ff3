// Fuzz target: the TFRecord reader over a memory buffer.
//
// The first input byte selects a mode; the rest is the file:
//   bit 0: verify_crc off          bit 1: max_record_bytes = 64
//   bit 2: the file is compressed (bit 3: gzip, else zlib); crash-freedom only
//   bit 3 (uncompressed): repair CRCs first, so mutations reach past the integrity checks
//   bits 4-7: chunk size of the stream reader (1..76 bytes, to stress chunk boundaries)
// Uncompressed files are read by both the zero-copy buffer reader and the chunked stream reader,
// which must agree exactly (records, offsets, error codes and messages).
#include <cstdint>
#include <string>
#include <vector>

#include "dataplane/pipeline/fuzz/fuzz_check.h"
#include "dataplane/pipeline/tfrecord/byte_stream.h"
#include "dataplane/pipeline/tfrecord/crc32c.h"
#include "dataplane/pipeline/tfrecord/tfrecord_reader.h"
#include "dataplane/pipeline/tfrecord/tfrecord_writer.h"

namespace {

using namespace sluice::pipeline;  // NOLINT: a fuzz target

struct Event {
  bool ok = false;
  std::string data;       // record bytes, or the error message
  uint64_t offset = 0;
  uint64_t index = 0;
  absl::StatusCode code = absl::StatusCode::kOk;

  bool operator==(const Event&) const = default;
};

// Reads to the end, continuing after errors (as on_error: skip does).
std::vector<Event> Drain(TFRecordReader& reader, size_t max_events) {
  std::vector<Event> events;
  while (true) {
    FUZZ_CHECK(events.size() <= max_events, "reader did not terminate (%zu events)", events.size());
    auto record = reader.Next();
    Event event;
    if (!record.ok()) {
      event.code = record.status().code();
      event.data = std::string(record.status().message());
      FUZZ_CHECK(!event.data.empty(), "error without a message");
    } else if (!record->has_value()) {
      break;
    } else {
      event.ok = true;
      event.data = std::string((*record)->data);
      event.offset = (*record)->offset;
      event.index = (*record)->index;
    }
    events.push_back(std::move(event));
  }
  // End of stream is sticky.
  auto again = reader.Next();
  FUZZ_CHECK(again.ok() && !again->has_value(), "Next() after the end did not return end");
  return events;
}

void StoreLittleEndian32(uint32_t value, char* p) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<char>(value >> (8 * i));
}

// Rewrites every CRC along the record chain so the file passes verification.
void RepairCrcs(std::string& file) {
  uint64_t position = 0;
  while (file.size() - position >= kTFRecordHeaderBytes) {
    char* header = file.data() + position;
    StoreLittleEndian32(MaskedCrc32c(header, 8), header + 8);
    uint64_t length = 0;
    for (int i = 7; i >= 0; --i) length = (length << 8) | static_cast<uint8_t>(header[i]);
    const uint64_t remaining = file.size() - position;
    if (remaining < kTFRecordOverheadBytes || length > remaining - kTFRecordOverheadBytes) break;
    StoreLittleEndian32(MaskedCrc32c(header + kTFRecordHeaderBytes, length),
                        header + kTFRecordHeaderBytes + length);
    position += kTFRecordOverheadBytes + length;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t mode = data[0];
  std::string file(reinterpret_cast<const char*>(data) + 1, size - 1);
  TFRecordReaderOptions options;
  options.verify_crc = (mode & 1) == 0;
  options.max_record_bytes = (mode & 2) != 0 ? 64 : 0;
  options.chunk_bytes = 1 + static_cast<size_t>(mode >> 4) * 5;
  const size_t max_events = file.size() / kTFRecordHeaderBytes + 2;

  if ((mode & 4) != 0) {
    const ZlibFormat format = (mode & 8) != 0 ? ZlibFormat::kGzip : ZlibFormat::kZlib;
    auto reader = NewStreamTFRecordReader(
        NewInflateByteStream(NewMemoryByteStream(file), format, "fuzz.gz"), "fuzz.gz", options);
    // Decompressed data can be far larger than the input; bound the walk instead of the events.
    for (int i = 0; i < 100000; ++i) {
      auto record = reader->Next();
      if (record.ok() && !record->has_value()) break;
    }
    return 0;
  }
  if ((mode & 8) != 0) RepairCrcs(file);

  auto owned = std::make_shared<const std::string>(file);
  const Buffer buffer{owned, reinterpret_cast<const uint8_t*>(owned->data()), owned->size()};
  auto buffer_reader = NewBufferTFRecordReader(buffer, "fuzz.tfrecord", options);
  const std::vector<Event> from_buffer = Drain(*buffer_reader, max_events);
  auto stream_reader =
      NewStreamTFRecordReader(NewMemoryByteStream(file), "fuzz.tfrecord", options);
  const std::vector<Event> from_stream = Drain(*stream_reader, max_events);

  FUZZ_CHECK(from_buffer.size() == from_stream.size(), "buffer reader %zu events, stream %zu",
             from_buffer.size(), from_stream.size());
  std::vector<std::string> good;
  uint64_t last_offset = 0;
  for (size_t i = 0; i < from_buffer.size(); ++i) {
    const Event& a = from_buffer[i];
    const Event& b = from_stream[i];
    FUZZ_CHECK(a == b, "event %zu differs: buffer {%d, '%s', %llu} stream {%d, '%s', %llu}", i,
               static_cast<int>(a.code), a.ok ? "<record>" : a.data.c_str(),
               static_cast<unsigned long long>(a.offset), static_cast<int>(b.code),
               b.ok ? "<record>" : b.data.c_str(), static_cast<unsigned long long>(b.offset));
    if (!a.ok) continue;
    FUZZ_CHECK(good.empty() || a.offset > last_offset, "offsets not increasing");
    FUZZ_CHECK(a.offset + kTFRecordOverheadBytes + a.data.size() <= file.size(),
               "record past the end of the file");
    FUZZ_CHECK(file.compare(a.offset + kTFRecordHeaderBytes, a.data.size(), a.data) == 0,
               "record bytes differ from the file");
    if (options.max_record_bytes != 0) {
      FUZZ_CHECK(a.data.size() <= options.max_record_bytes, "oversize record returned");
    }
    last_offset = a.offset;
    good.push_back(a.data);
  }

  // Re-framing the good records gives a file that reads back without errors.
  const std::string reframed = EncodeTFRecords(good);
  auto check = NewBufferTFRecordReader(
      Buffer{nullptr, reinterpret_cast<const uint8_t*>(reframed.data()), reframed.size()},
      "reframed", TFRecordReaderOptions{});
  size_t count = 0;
  for (const Event& event : Drain(*check, reframed.size() / kTFRecordHeaderBytes + 2)) {
    FUZZ_CHECK(event.ok, "re-framed file has an error: %s", event.data.c_str());
    FUZZ_CHECK(event.data == good[count], "re-framed record %zu differs", count);
    ++count;
  }
  FUZZ_CHECK(count == good.size(), "re-framed file has %zu records, expected %zu", count,
             good.size());
  return 0;
}
