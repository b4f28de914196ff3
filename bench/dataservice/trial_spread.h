// The spread of repeated measurements (trials, windows) in the data-service benchmarks' JSON:
// median, min, max, count and relative range (RunSpread and SpreadOfRuns of bench/common), rounded,
// so a reader sees how far one run's figure can move. Pure, header-only; thread-safe.
#ifndef SLUICE_BENCH_DATASERVICE_TRIAL_SPREAD_H_
#define SLUICE_BENCH_DATASERVICE_TRIAL_SPREAD_H_

#include <cmath>

#include <nlohmann/json.hpp>

#include "bench/common/bench_util.h"

namespace sluice::bench {

// {"median", "min", "max", "n", "relative_range"}: median, min and max rounded to `digits`
// decimals, relative_range to 3.
inline nlohmann::json TrialSpreadJson(const RunSpread& s, int digits) {
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
