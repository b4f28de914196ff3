#include "dataplane/pipeline/tfrecord/crc32c.h"

#include <catch2/catch.hpp>

#include <random>
#include <string>
#include <vector>

namespace sluice::pipeline {
namespace {

std::string Bytes(std::initializer_list<int> values) {
  std::string out;
  for (int v : values) out.push_back(static_cast<char>(v));
  return out;
}

TEST_CASE("crc32c matches published check values", "[crc32c]") {
  CHECK(Crc32c("123456789") == 0xE3069283u);
  CHECK(Crc32c(std::string(32, '\0')) == 0x8A9136AAu);            // RFC 3720 B.4: 32 zero bytes
  CHECK(Crc32c(std::string(32, '\xff')) == 0x62A8AB43u);          // 32 bytes of 0xff
  std::string ascending;
  for (int i = 0; i < 32; ++i) ascending.push_back(static_cast<char>(i));
  CHECK(Crc32c(ascending) == 0x46DD794Eu);                         // 0x00..0x1f
  CHECK(Crc32c("") == 0u);
}

TEST_CASE("crc32c portable and hardware paths agree on random data", "[crc32c]") {
  std::mt19937_64 rng(12345);
  std::vector<uint8_t> data(20000 + 16);
  for (auto& byte : data) byte = static_cast<uint8_t>(rng());
  const bool hardware = Crc32cHardwareAvailable();
  // Lengths around the three-stream block (3 x 512 bytes) of the hardware path included.
  for (size_t length : {0, 1, 7, 8, 9, 15, 16, 17, 63, 64, 65, 1000, 1535, 1536, 1537, 3072,
                        3079, 4096, 20000}) {
    for (size_t misalign = 0; misalign < 8; ++misalign) {
      const uint8_t* p = data.data() + misalign;
      const uint32_t portable = Crc32cExtendPortable(0, p, length);
      // A bit-at-a-time reference that shares no code with either implementation.
      uint32_t reference = 0xffffffffu;
      for (size_t i = 0; i < length; ++i) {
        reference ^= p[i];
        for (int bit = 0; bit < 8; ++bit) {
          reference = (reference & 1u) ? (reference >> 1) ^ 0x82f63b78u : reference >> 1;
        }
      }
      reference = ~reference;
      INFO("length " << length << " misalign " << misalign);
      CHECK(portable == reference);
      CHECK(Crc32c(p, length) == reference);
      if (hardware) CHECK(Crc32cExtendHardware(0, p, length) == reference);
    }
  }
}

TEST_CASE("crc32c extends incrementally", "[crc32c]") {
  const std::string text = "The quick brown fox jumps over the lazy dog, repeatedly and at length.";
  const uint32_t whole = Crc32c(text);
  for (size_t cut = 0; cut <= text.size(); ++cut) {
    const uint32_t first = Crc32c(text.data(), cut);
    CHECK(Crc32cExtend(first, text.data() + cut, text.size() - cut) == whole);
    CHECK(Crc32cExtendPortable(Crc32cExtendPortable(0, text.data(), cut), text.data() + cut,
                               text.size() - cut) == whole);
  }
}

TEST_CASE("tfrecord crc masking round-trips and matches a known header", "[crc32c]") {
  for (uint32_t crc : {0u, 1u, 0xffffffffu, 0xE3069283u, 0x12345678u}) {
    CHECK(UnmaskCrc(MaskCrc(crc)) == crc);
    CHECK(MaskCrc(crc) != crc);
  }
  // The masked CRC of the 8-byte length 5 (as in a TFRecord header), computed independently.
  const std::string length = Bytes({5, 0, 0, 0, 0, 0, 0, 0});
  CHECK(MaskedCrc32c(length.data(), length.size()) == 0x3e04b2eau);
}

}  // namespace
}  // namespace sluice::pipeline
