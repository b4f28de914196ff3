// `sluice bench sharding`: a distributed epoch (SHARDING_DYNAMIC: the dispatcher hands the splits
// out to 2 workers) against parallel epochs (SHARDING_OFF: each of the 2 workers runs the whole
// pipeline) on the same CPU-bound pipeline, with real sluice-dispatcher and sluice-worker processes
// and one client in this process. The workers reach the dispatcher through a counting proxy
// (counting_proxy.h), which shows that splits are fetched in batches (GetSplits calls vs splits).
//
// Each trial reads num_epochs * elements-per-epoch elements: DYNAMIC to the end of its job (and
// checks that every element came exactly once), OFF until that many arrived. Throughput counts from
// the first element to the last. Trials alternate the two modes (ABBA) against drift.
//
// Threading: RunShardingBenchmark runs on the caller's thread (which must outlive the children).
#ifndef SLUICE_BENCH_SHARDING_SHARDING_BENCH_H_
#define SLUICE_BENCH_SHARDING_SHARDING_BENCH_H_

#include <cstdint>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "bench/sharding/counting_proxy.h"

namespace sluice::bench {

struct ShardingBenchOptions {
  int workers = 2;
  int trials = 4;                    // per mode
  int64_t elements_per_epoch = 8192;
  int64_t split_size = 32;           // elements per split
  int64_t num_epochs = 2;
  int image_size = 160;              // the synthetic images' side (pixels)
  int cpu_budget = 1;                // threads per task pipeline on the workers
  std::string bin_dir;
  bool keep_logs = false;
};

void AddShardingBenchFlags(CLI::App* app, ShardingBenchOptions& options);
// Prints progress, then the JSON result as the last line. Returns the exit code.
int RunShardingBenchmark(const ShardingBenchOptions& options);

// The benchmark's pipeline spec (YAML): synthetic images -> resize, cast and normalise.
std::string ShardingPipelineSpec(const ShardingBenchOptions& options);

// One trial of one mode.
struct ShardingTrial {
  double elements_per_second = 0;
  int64_t elements = 0;
  int64_t distinct_elements = 0;     // distinct (key, epoch-less) values seen, DYNAMIC only
  DispatcherCallCounts calls;        // proxy counts during the trial
};

// Result object: ratio = median(dynamic) / median(off) throughput, the trials, and GetSplits calls
// vs splits (summed over the DYNAMIC trials) with splits_per_call.
nlohmann::json ShardingResultJson(const std::vector<ShardingTrial>& dynamic, const std::vector<ShardingTrial>& off,
                                  int64_t splits_per_epoch, const ShardingBenchOptions& options, double target,
                                  const nlohmann::json& extra);

}  // namespace sluice::bench

#endif  // SLUICE_BENCH_SHARDING_SHARDING_BENCH_H_
