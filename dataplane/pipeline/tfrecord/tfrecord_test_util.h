// Helpers shared by the TFRecord tests.
#ifndef SLUICE_DATAPLANE_PIPELINE_TFRECORD_TFRECORD_TEST_UTIL_H_
#define SLUICE_DATAPLANE_PIPELINE_TFRECORD_TFRECORD_TEST_UTIL_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/strings/escaping.h"
#include "dataplane/pipeline/tensor.h"
#include "dataplane/pipeline/tfrecord/tfrecord_reader.h"

namespace sluice::pipeline::testing {

// A Buffer owning a copy of `bytes`.
inline Buffer CopyToBuffer(const std::string& bytes) {
  auto owned = std::make_shared<const std::string>(bytes);
  return Buffer{owned, reinterpret_cast<const uint8_t*>(owned->data()), owned->size()};
}

inline std::string FromHex(absl::string_view hex) { return absl::HexStringToBytes(hex); }

// `count` records of varied sizes and contents.
inline std::vector<std::string> SampleRecords(int count) {
  std::vector<std::string> records;
  for (int i = 0; i < count; ++i) {
    const size_t size = (i * 37) % 200 + (i % 5 == 0 ? 0 : 1);
    std::string record(size, '\0');
    for (size_t j = 0; j < size; ++j) record[j] = static_cast<char>((i * 131 + j * 7) & 0xff);
    records.push_back(std::move(record));
  }
  return records;
}

// Byte offset of record `index` in an uncompressed file of `records`.
inline size_t RecordOffset(const std::vector<std::string>& records, size_t index) {
  size_t offset = 0;
  for (size_t i = 0; i < index; ++i) offset += records[i].size() + kTFRecordOverheadBytes;
  return offset;
}

}  // namespace sluice::pipeline::testing

#endif  // SLUICE_DATAPLANE_PIPELINE_TFRECORD_TFRECORD_TEST_UTIL_H_
