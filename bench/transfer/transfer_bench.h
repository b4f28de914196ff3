// `sluice bench transfer`: how fast one client receives pre-made elements of 1 KiB, 100 KiB and
// 1 MiB from one data-service worker over loopback, next to a plain gRPC server-streaming loop that
// sends the same bytes (raw_grpc.h: the callback API at both ends, pre-serialized zero-copy writes,
// parsing off the consumer thread), measured in alternating trials (ABBA) in the same run.
//
// The Sluice side runs real processes: sluice-dispatcher and one sluice-worker, and a
// DataServiceClient in this process; the worker runs `synthetic -> cache -> repeat`, so after the
// first pass elements come from memory and the measured path is: worker pipeline (cache replay) ->
// element codec -> task buffer -> GetElements stream -> client decode -> GetNext. The raw side is
// this binary re-executed as a RawTransfer server (raw_grpc.h). Both count the payload bytes (the
// element's `data` tensor; the raw element's bytes).
//
// Threading: RunTransferBenchmark runs on the caller's thread (which must outlive the children).
#ifndef SLUICE_BENCH_TRANSFER_TRANSFER_BENCH_H_
#define SLUICE_BENCH_TRANSFER_TRANSFER_BENCH_H_

#include <cstdint>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "bench/dataservice/bench_report.h"

namespace sluice::bench {

struct TransferBenchOptions {
  std::vector<int64_t> sizes = {1024, 100 * 1024, 1024 * 1024};
  int trials = 5;                 // per size and side, alternating sides
  double seconds = 1.5;           // measured window per trial
  double warmup_seconds = 0.4;    // not measured, after the first pass over the cached elements
  int64_t cache_bytes = int64_t{32} << 20;  // distinct pre-made elements per size (both sides)
  std::string compression = "none";         // the Sluice job's compression: none|auto|lz4|zstd
  // How the worker replays the cached elements: "encoded" (the pipeline ends in `cache: {}`, which a
  // worker serves from the elements as encoded, as the baseline sends pre-serialized messages) or
  // "elements" (`cache: {max_bytes: ...}` above the data: the pipeline's own cache, so every replay is
  // copied, encoded and framed again: the cost of a pipeline that does not end in a cache).
  std::string replay = "encoded";
  // The Sluice side the baseline is compared with (ratio_*) reads over the socket (the client's
  // shared_memory off): the raw gRPC baseline has no shared memory. With shm_side, a third side
  // reads with same-host shared memory (shm_ratio_*), in the same ABBA alternation.
  bool shm_side = true;
  std::string bin_dir;            // sluice-dispatcher, sluice-worker (default: next to this binary)
  bool keep_logs = false;
  // Hidden: run as the raw gRPC server process instead.
  bool serve_raw_grpc = false;
  int raw_port = 0;
};

void AddTransferBenchFlags(CLI::App* app, TransferBenchOptions& options);
// Prints progress, then the JSON result as the last line. Returns the exit code.
int RunTransferBenchmark(const TransferBenchOptions& options);

// One element size's trials, in GB/s (1e9 bytes per second).
struct TransferSizeResult {
  int64_t element_bytes = 0;
  std::vector<double> sluice_gbps;
  std::vector<double> grpc_gbps;
  std::vector<double> sluice_elements_per_second;
  // CPU seconds per GB of payload during each trial: the server (sluice-worker, raw server) and this
  // process (the client). Less sensitive to a noisy machine than throughput.
  std::vector<double> sluice_server_cpu_per_gb, grpc_server_cpu_per_gb;
  std::vector<double> sluice_client_cpu_per_gb, grpc_client_cpu_per_gb;
  // The Sluice side with same-host shared memory (empty without TransferBenchOptions::shm_side).
  std::vector<double> shm_gbps, shm_server_cpu_per_gb, shm_client_cpu_per_gb;
};

// CPU seconds per GB of payload; 0 when nothing was transferred.
double CpuSecondsPerGb(double cpu_seconds, int64_t bytes);

// "1k", "100k", "1m" (KiB and MiB multiples), else "<n>b".
std::string SizeLabel(int64_t bytes);
// Pre-made elements per size: cache_bytes worth, within [16, 4096].
int64_t DistinctElements(int64_t element_bytes, int64_t cache_bytes);
// The Sluice side's pipeline spec (YAML). `replay`: "encoded" or "elements" (TransferBenchOptions).
std::string TransferPipelineSpec(int64_t element_bytes, int64_t distinct_elements,
                                 const std::string& replay = "encoded");
// The median of the per-trial ratios sluice[i] / grpc[i] (trials run next to each other).
double PairedRatio(const std::vector<double>& sluice, const std::vector<double>& grpc);
// The result object: per-size details plus the flat keys ratio_<label>, sluice_gbps_<label>,
// grpc_gbps_<label>, cpu_cost_ratio_<label> (Sluice's server+client CPU per GB over raw gRPC's)
// and sluice_/grpc_gb_per_cpu_s_<label> (payload GB per CPU-second of server and client);
// meets_target when every size of 100 KiB or more reaches `target` and every smaller one
// `small_target`. All of these are the socket Sluice side's; with shm trials, shm_ratio_<label>,
// sluice_shm_gbps_<label>, sluice_shm_gb_per_cpu_s_<label> and shm_cpu_cost_ratio_<label> beside.
nlohmann::json TransferResultJson(const std::vector<TransferSizeResult>& sizes, double target, double small_target,
                                  const nlohmann::json& extra);

}  // namespace sluice::bench

#endif  // SLUICE_BENCH_TRANSFER_TRANSFER_BENCH_H_
