// `sluice bench overhead`: the CPU cost of serving. The same pipeline runs in-process (the pipeline
// engine, as `sluice pipeline run` does) and through the data service (sluice-dispatcher and one
// sluice-worker as real processes under the local supervisor, a DataServiceClient in this process),
// and the benchmark compares the CPU-seconds per element: in-process, this process's CPU; through
// the service, the dispatcher's, the worker's and this process's together. Each side is read for
// an unmeasured warm-up first, and CPU is measured as the difference between two samples in steady
// state, so start-up does not count. The sides alternate (ABBA) over several rounds.
//
// The default pipeline is a synthetic, decode-like image pipeline (ImageNet-sized uint8 images,
// random resized crop to 224, flip, normalize to float32 CHW), CPU-bound in its map; --pipeline
// takes any spec instead (e.g. examples/pipelines/fashion_mnist.yaml), which must not end before
// the measurement does (add `repeat: {count: -1}`).
//
// Threading: RunOverheadBenchmark runs on the caller's thread (which must outlive the children).
#ifndef SLUICE_BENCH_OVERHEAD_OVERHEAD_BENCH_H_
#define SLUICE_BENCH_OVERHEAD_OVERHEAD_BENCH_H_

#include <cstdint>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include <CLI/CLI.hpp>
#include "absl/status/statusor.h"
#include <nlohmann/json.hpp>

namespace sluice::bench {

struct OverheadBenchOptions {
  std::string pipeline_file;      // empty: the built-in synthetic image pipeline (DefaultOverheadPipeline)
  // Instead of a pipeline file: the ResNet-style JPEG pipeline of `sluice bench pipeline`
  // (bench/pipeline/resnet.yaml: region-of-interest decode, crop, flip, normalize) over the JPEGs in
  // this directory, made by make_jpeg_dataset.py when it has none, batched by `batch_size`.
  std::string images_dir;
  // 16: 9.6 MB elements, which the client can hold as views of the worker's default 32 MiB
  // shared-memory ring (views only while held slots span at most half of it).
  int batch_size = 16;
  int image_count = 2048;         // JPEGs to create when images_dir has none
  std::string python = "/usr/bin/python3";  // runs make_jpeg_dataset.py (as `sluice bench pipeline`'s default)
  int rounds = 3;                 // each round runs both sides; the order alternates (ABBA)
  double seconds = 6;             // measured window per side and round
  double warmup_seconds = 3;      // unmeasured reading before each window (start-up, autotuning)
  // The job's compression: none|auto|lz4|zstd. none measures the cost of serving itself; auto (the
  // client's default) adds LZ4 wherever a sample compresses, which trades CPU for network bytes.
  std::string compression = "none";
  // The service side once per transport, each against the same in-process side: shm (the client
  // lets a same-host worker send payloads through shared memory; the default) and socket (the
  // client asks for bytes on the gRPC stream only). The first is the headline `overhead`.
  std::vector<std::string> transports = {"shm", "socket"};
  std::string bin_dir;            // sluice-dispatcher, sluice-worker (default: next to this binary)
  bool keep_logs = false;
};

void AddOverheadBenchFlags(CLI::App* app, OverheadBenchOptions& options);
// Prints progress to `err`, then the JSON result as the last line of `out`. Returns the exit code.
int RunOverheadBenchmark(const OverheadBenchOptions& options, std::ostream& out, std::ostream& err);

// The built-in pipeline (YAML).
std::string DefaultOverheadPipeline();
// The spec the options name: --pipeline's file, the JPEG pipeline over --images, or the built-in one.
// Does not create the JPEGs.
absl::StatusOr<std::string> OverheadPipelineSpec(const OverheadBenchOptions& options);

// One measured window of one side.
struct OverheadSample {
  int64_t elements = 0;
  double seconds = 0;
  double cpu_seconds = 0;                   // all processes of the side
  std::vector<double> process_cpu_seconds;  // in-process: {this}; service: {dispatcher, worker, client}
  int64_t shm_elements = 0;                 // service: elements the client received through shared memory
  int64_t shm_views = 0;                    // service: of those, the ones handed out as views (no copy)
  double cpu_per_element() const { return elements > 0 ? cpu_seconds / static_cast<double>(elements) : 0; }
};

// The result: overhead = median service CPU per element / median in-process CPU per element - 1,
// the per-round values, medians and spreads, and the service's per-process breakdown. meets_target
// when overhead <= target.
nlohmann::json OverheadResultJson(const std::vector<OverheadSample>& in_process,
                                  const std::vector<OverheadSample>& service, double target,
                                  const nlohmann::json& extra);
// One run with several transports: the first transport's OverheadResultJson at the top level
// (plus "transport"), and every transport's under "transports".<name>.
nlohmann::json OverheadTransportsJson(const std::vector<OverheadSample>& in_process,
                                      const std::vector<std::pair<std::string, std::vector<OverheadSample>>>& service,
                                      double target, const nlohmann::json& extra);

}  // namespace sluice::bench

#endif  // SLUICE_BENCH_OVERHEAD_OVERHEAD_BENCH_H_
