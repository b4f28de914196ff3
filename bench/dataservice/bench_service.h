// The data-service benchmarks' settings for the local process supervisor (local/): heartbeats every
// 100 ms, no admin servers (their threads would only add noise), workers that count once they have
// registered, logs in the benchmark's log directory; and the helpers the benchmarks share.
//
// Threading: as LocalDataService (thread-safe); the benchmarks call these from their main thread.
#ifndef SLUICE_BENCH_DATASERVICE_BENCH_SERVICE_H_
#define SLUICE_BENCH_DATASERVICE_BENCH_SERVICE_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "dataservice.pb.h"
#include "local/local_dataservice.h"

namespace sluice::bench {

// Options for a benchmark's data service: `bin_dir` empty means the directory of this executable.
local::LocalDataServiceOptions BenchServiceOptions(const std::string& bin_dir, const std::string& log_dir,
                                                   std::vector<std::string> dispatcher_flags);
// A supervisor with its dispatcher started.
absl::StatusOr<std::unique_ptr<local::LocalDataService>> StartBenchService(local::LocalDataServiceOptions options);
// Starts one worker and waits until it registered with the dispatcher.
absl::Status AddBenchWorker(local::LocalDataService& service, const local::WorkerOptions& worker = {});
// SIGTERMs every serving worker and waits until the dispatcher lists none.
absl::Status StopAllWorkers(local::LocalDataService& service);
// SIGTERM to every process, then SIGKILL after 3 s (what the benchmarks did before exiting).
void StopBenchService(std::unique_ptr<local::LocalDataService>& service);

// The benchmarks' --compression flag: none, auto, lz4 or zstd; otherwise InvalidArgument
// "--compression: '<name>' is not one of none, auto, lz4, zstd".
absl::StatusOr<service::Compression> ParseCompression(const std::string& name);

}  // namespace sluice::bench

#endif  // SLUICE_BENCH_DATASERVICE_BENCH_SERVICE_H_
