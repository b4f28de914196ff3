// The spread of repeated measurements (trials, windows) for the benchmarks' JSON: median, min, max
// and count, so a reader sees how far one run's figure can move. Pure, header-only; thread-safe.
#ifndef SLUICE_BENCH_DATASERVICE_TRIAL_SPREAD_H_
#define SLUICE_BENCH_DATASERVICE_TRIAL_SPREAD_H_

#include <algorithm>
#include <cmath>
#include <vector>

#include <nlohmann/json.hpp>

namespace sluice::bench {

struct TrialSpread {
  double median = 0, min = 0, max = 0;
  int n = 0;
  // (max - min) / median: the relative range; 0 for fewer than two values or a zero median.
  double relative_range() const { return n > 1 && median > 0 ? (max - min) / median : 0; }
};

inline TrialSpread SpreadOfTrials(std::vector<double> values) {
  TrialSpread s;
  if (values.empty()) return s;
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  s.median = n % 2 == 1 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
  s.min = values.front();
  s.max = values.back();
  s.n = static_cast<int>(n);
  return s;
}

// {"median", "min", "max", "n", "relative_range"}, values rounded to `digits` decimals.
inline nlohmann::json TrialSpreadJson(const TrialSpread& s, int digits) {
  const double scale = std::pow(10.0, digits);
  auto round = [scale](double v) { return std::round(v * scale) / scale; };
  return {{"median", round(s.median)},
          {"min", round(s.min)},
          {"max", round(s.max)},
          {"n", s.n},
          {"relative_range", std::round(s.relative_range() * 1000) / 1000}};
}

}  // namespace sluice::bench

#endif  // SLUICE_BENCH_DATASERVICE_TRIAL_SPREAD_H_
