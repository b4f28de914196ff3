// Deterministic, counter-based randomness for the simulator: a value depends only on the seed and
// the key it is asked for (a time and an entity), never on how many values were drawn before. Two
// policies run on one scenario therefore see the same trainer noise second by second, however many
// workers each of them starts. Pure functions; thread-safe.
#ifndef SLUICE_SIM_MODEL_RNG_H_
#define SLUICE_SIM_MODEL_RNG_H_

#include <cmath>
#include <cstdint>

namespace sluice::sim {

// SplitMix64's finalizer: a well-mixed 64-bit hash.
inline uint64_t Mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

inline uint64_t Key(uint64_t seed, uint64_t a, uint64_t b = 0, uint64_t c = 0) {
  return Mix64(Mix64(Mix64(seed ^ 0x5eed) ^ a) ^ (b * 0x100000001b3ULL)) ^ Mix64(c + 0x632be59bd9b4e019ULL);
}

// Uniform in (0, 1).
inline double Uniform(uint64_t key) { return (static_cast<double>(Mix64(key) >> 11) + 0.5) * 0x1.0p-53; }

// Standard normal (Box-Muller on two uniforms derived from `key`).
inline double Normal(uint64_t key) {
  const double u1 = Uniform(key);
  const double u2 = Uniform(key ^ 0xa5a5a5a5a5a5a5a5ULL);
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
}

// 1 + sd x N(0, 1), kept within [0.5, 1.5] so that no draw makes a rate negative or absurd.
inline double Jitter(uint64_t key, double sd) {
  if (sd <= 0) return 1.0;
  const double v = 1.0 + sd * Normal(key);
  return v < 0.5 ? 0.5 : (v > 1.5 ? 1.5 : v);
}

}  // namespace sluice::sim

#endif  // SLUICE_SIM_MODEL_RNG_H_
