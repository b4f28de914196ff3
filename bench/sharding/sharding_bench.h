// `sluice bench sharding`: a distributed epoch (SHARDING_DYNAMIC: the dispatcher hands the splits
// out to 2 workers) against parallel epochs (SHARDING_OFF: each of the 2 workers runs the whole
// pipeline) on the same CPU-bound pipeline, with real sluice-dispatcher and sluice-worker processes
// and one client in this process.
//
// Each trial reads num_epochs * elements-per-epoch elements: DYNAMIC to the end of its job (and
// checks that every element came exactly once), OFF until that many arrived. Throughput counts from
// the first element to the last. The timed trials alternate the two modes (ABBA) against drift,
// with the workers talking to the dispatcher directly. Then the workers are replaced by ones that
// reach the dispatcher through a counting proxy (counting_proxy.h) for one more trial of each mode,
// which shows how many GetSplits calls fetched how many splits (batching). The proxy's extra hop
// slows DYNAMIC (a split's start is acknowledged before it is read), so those trials are reported
// separately and not used for the ratio. The JSON reports medians, spreads and the ratios of the
// adjacent DYNAMIC/OFF pairs, and, from the workers' "dynamic sharding epoch done" log lines
// (task_runner.cc), where the DYNAMIC workers' split readers waited during the timed trials: for
// splits (fetch or poll in flight), for start acknowledgements, for leases, at epoch ends, and what
// the GetSplits round trips cost. Progress goes to stderr, the JSON line to stdout.
//
// Threading: RunShardingBenchmark runs on the caller's thread (the supervisor forks on its own).
#ifndef SLUICE_BENCH_SHARDING_SHARDING_BENCH_H_
#define SLUICE_BENCH_SHARDING_SHARDING_BENCH_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "bench/sharding/counting_proxy.h"

namespace sluice::bench {

struct ShardingBenchOptions {
  int workers = 2;
  int trials = 6;                    // per mode
  int64_t elements_per_epoch = 8192;
  int64_t split_size = 128;          // elements per split
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

// One "dynamic sharding epoch done" line of a worker's log: one task's epoch.
struct DynamicEpochLog {
  int64_t task_id = 0, epoch = 0, elements = 0, splits = 0, rpcs = 0;
  double seconds = 0, rpc_seconds = 0;
  double wait_first_split_seconds = 0, wait_split_seconds = 0, wait_end_seconds = 0;
  double wait_ack_seconds = 0, wait_lease_seconds = 0, wait_epoch_end_seconds = 0;
};
// Parses such a line (logfmt); nullopt for any other line or a malformed one.
std::optional<DynamicEpochLog> ParseDynamicEpochLog(absl::string_view line);
// Sums of the epochs: per-epoch means, mean GetSplits round trip, and the share of the epochs'
// time the split reader waited, by cause.
nlohmann::json DynamicEpochsJson(const std::vector<DynamicEpochLog>& epochs);

// Result object: ratio = median(dynamic) / median(off) throughput of the timed trials, and GetSplits
// calls vs splits from the counted trials (summed over `counted_dynamic`): splits_per_fetch (splits
// per call that got any: the batching), splits_per_call (all calls, acknowledgement-only ones
// included), polls; plus the counted trials' throughputs.
nlohmann::json ShardingResultJson(const std::vector<ShardingTrial>& dynamic, const std::vector<ShardingTrial>& off,
                                  const std::vector<ShardingTrial>& counted_dynamic,
                                  const std::vector<ShardingTrial>& counted_off, int64_t splits_per_epoch,
                                  const ShardingBenchOptions& options, double target, const nlohmann::json& extra);

}  // namespace sluice::bench

#endif  // SLUICE_BENCH_SHARDING_SHARDING_BENCH_H_
