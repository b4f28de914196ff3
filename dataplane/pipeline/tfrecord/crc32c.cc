#include "dataplane/pipeline/tfrecord/crc32c.h"

#include <array>
#include <cstring>

#if defined(__x86_64__)
#include <nmmintrin.h>
#endif

namespace sluice::pipeline {
namespace {

// Bit-reversed Castagnoli polynomial 0x1EDC6F41.
constexpr uint32_t kPolynomial = 0x82f63b78u;

using SliceTables = std::array<std::array<uint32_t, 256>, 8>;

// tables[0] is the classic one-byte-at-a-time table; tables[k][b] is the CRC contribution of byte b
// followed by k zero bytes, which lets the loop fold eight input bytes per step.
constexpr SliceTables MakeSliceTables() {
  SliceTables tables{};
  for (uint32_t byte = 0; byte < 256; ++byte) {
    uint32_t crc = byte;
    for (int bit = 0; bit < 8; ++bit) crc = (crc & 1u) ? (crc >> 1) ^ kPolynomial : crc >> 1;
    tables[0][byte] = crc;
  }
  for (size_t k = 1; k < tables.size(); ++k) {
    for (size_t byte = 0; byte < 256; ++byte) {
      const uint32_t previous = tables[k - 1][byte];
      tables[k][byte] = (previous >> 8) ^ tables[0][previous & 0xffu];
    }
  }
  return tables;
}

constexpr SliceTables kTables = MakeSliceTables();

inline uint32_t LoadLittleEndian32(const uint8_t* p) {
  return static_cast<uint32_t>(p[0]) | (static_cast<uint32_t>(p[1]) << 8) |
         (static_cast<uint32_t>(p[2]) << 16) | (static_cast<uint32_t>(p[3]) << 24);
}

using ExtendFunction = uint32_t (*)(uint32_t, const void*, size_t);

ExtendFunction ChooseImplementation() {
  return Crc32cHardwareAvailable() ? &Crc32cExtendHardware : &Crc32cExtendPortable;
}

}  // namespace

uint32_t Crc32cExtendPortable(uint32_t crc, const void* data, size_t size) {
  const auto* p = static_cast<const uint8_t*>(data);
  uint32_t state = ~crc;
  while (size >= 8) {
    const uint32_t low = state ^ LoadLittleEndian32(p);
    const uint32_t high = LoadLittleEndian32(p + 4);
    state = kTables[7][low & 0xffu] ^ kTables[6][(low >> 8) & 0xffu] ^
            kTables[5][(low >> 16) & 0xffu] ^ kTables[4][low >> 24] ^ kTables[3][high & 0xffu] ^
            kTables[2][(high >> 8) & 0xffu] ^ kTables[1][(high >> 16) & 0xffu] ^
            kTables[0][high >> 24];
    p += 8;
    size -= 8;
  }
  while (size > 0) {
    state = (state >> 8) ^ kTables[0][(state ^ *p) & 0xffu];
    ++p;
    --size;
  }
  return ~state;
}

#if defined(__x86_64__)

__attribute__((target("sse4.2"))) uint32_t Crc32cExtendHardware(uint32_t crc, const void* data,
                                                                 size_t size) {
  const auto* p = static_cast<const uint8_t*>(data);
  uint64_t state = static_cast<uint32_t>(~crc);
  // Four independent words per iteration would need a CRC-combine step; one stream already runs
  // at several GB/s, far above what a record reader needs.
  while (size >= 8) {
    uint64_t word;
    std::memcpy(&word, p, sizeof(word));
    state = _mm_crc32_u64(state, word);
    p += 8;
    size -= 8;
  }
  auto state32 = static_cast<uint32_t>(state);
  while (size > 0) {
    state32 = _mm_crc32_u8(state32, *p);
    ++p;
    --size;
  }
  return ~state32;
}

bool Crc32cHardwareAvailable() {
  static const bool available = __builtin_cpu_supports("sse4.2");
  return available;
}

#else

uint32_t Crc32cExtendHardware(uint32_t crc, const void* data, size_t size) {
  return Crc32cExtendPortable(crc, data, size);
}

bool Crc32cHardwareAvailable() { return false; }

#endif

uint32_t Crc32cExtend(uint32_t crc, const void* data, size_t size) {
  static const ExtendFunction implementation = ChooseImplementation();
  return implementation(crc, data, size);
}

}  // namespace sluice::pipeline
