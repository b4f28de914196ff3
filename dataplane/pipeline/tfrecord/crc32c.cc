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

namespace {

// The hardware loop runs three independent CRC streams over adjacent kStreamBytes blocks, because
// one `crc32` instruction has a latency of three cycles but a throughput of one per cycle. The
// three partial CRCs are then combined. The raw CRC update is linear:
// update(s, B) = Z(|B|)·s ^ update(0, B), where Z(n) is the effect of n zero bytes on the state.
// So crc(A B C) = Z(K)·(Z(K)·update(s, A) ^ update(0, B)) ^ update(0, C), with K = kStreamBytes.
constexpr size_t kStreamBytes = 512;

// Z(kStreamBytes) as four byte-indexed tables (the map is linear, so it splits by input byte).
struct ZeroShift {
  uint32_t table[4][256];

  ZeroShift() {
    uint32_t basis[32];
    for (int bit = 0; bit < 32; ++bit) {
      uint32_t state = 1u << bit;
      for (size_t i = 0; i < kStreamBytes; ++i) state = (state >> 8) ^ kTables[0][state & 0xffu];
      basis[bit] = state;
    }
    for (int byte = 0; byte < 4; ++byte) {
      for (uint32_t value = 0; value < 256; ++value) {
        uint32_t image = 0;
        for (int bit = 0; bit < 8; ++bit) {
          if ((value >> bit) & 1u) image ^= basis[byte * 8 + bit];
        }
        table[byte][value] = image;
      }
    }
  }

  uint32_t Apply(uint32_t state) const {
    return table[0][state & 0xffu] ^ table[1][(state >> 8) & 0xffu] ^
           table[2][(state >> 16) & 0xffu] ^ table[3][state >> 24];
  }
};

const ZeroShift& GetZeroShift() {
  static const ZeroShift* shift = new ZeroShift();
  return *shift;
}

inline uint64_t Load64(const uint8_t* p) {
  uint64_t word;
  std::memcpy(&word, p, sizeof(word));
  return word;
}

}  // namespace

__attribute__((target("sse4.2"))) uint32_t Crc32cExtendHardware(uint32_t crc, const void* data,
                                                                 size_t size) {
  const auto* p = static_cast<const uint8_t*>(data);
  uint32_t state = ~crc;
  if (size >= 3 * kStreamBytes) {
    const ZeroShift& shift = GetZeroShift();
    while (size >= 3 * kStreamBytes) {
      uint64_t a = state, b = 0, c = 0;
      for (size_t i = 0; i < kStreamBytes; i += 8) {
        a = _mm_crc32_u64(a, Load64(p + i));
        b = _mm_crc32_u64(b, Load64(p + kStreamBytes + i));
        c = _mm_crc32_u64(c, Load64(p + 2 * kStreamBytes + i));
      }
      state = shift.Apply(shift.Apply(static_cast<uint32_t>(a)) ^ static_cast<uint32_t>(b)) ^
              static_cast<uint32_t>(c);
      p += 3 * kStreamBytes;
      size -= 3 * kStreamBytes;
    }
  }
  uint64_t state64 = state;
  while (size >= 8) {
    state64 = _mm_crc32_u64(state64, Load64(p));
    p += 8;
    size -= 8;
  }
  state = static_cast<uint32_t>(state64);
  while (size > 0) {
    state = _mm_crc32_u8(state, *p);
    ++p;
    --size;
  }
  return ~state;
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
