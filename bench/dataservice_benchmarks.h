// The data-service benchmarks of `sluice bench`: transfer (worker -> client throughput against raw
// gRPC), sharding (distributed epoch vs parallel epochs) and scaleout (workers under CPU quotas).
// Each prints progress, then one JSON object as its last line. See docs/benchmarks.md.
#ifndef SLUICE_BENCH_DATASERVICE_BENCHMARKS_H_
#define SLUICE_BENCH_DATASERVICE_BENCHMARKS_H_

#include <CLI/CLI.hpp>

namespace sluice::bench {

// Registers `transfer`, `sharding` and `scaleout` under `bench`; their callbacks set `rc` to the
// exit code. The options live as long as `bench`.
void AddDataServiceBenchmarks(CLI::App* bench, int& rc);

}  // namespace sluice::bench

#endif  // SLUICE_BENCH_DATASERVICE_BENCHMARKS_H_
