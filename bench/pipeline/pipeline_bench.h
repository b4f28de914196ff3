// `sluice bench pipeline`: the ResNet-style JPEG input pipeline (decode, random resized crop 224,
// horizontal flip, normalize, batch 128) run by Sluice and, side by side on the same files and
// the same number of cores, by PyTorch's DataLoader with torchvision (torch_pipeline.py).
//
// RunPipelineBenchmark makes the JPEG set if missing (make_jpeg_dataset.py), runs both, prints
// progress and then, as its last stdout line, one JSON object (see docs/benchmarks.md). The pure
// helpers below (spec text, result assembly, parsing the torch side's output) are separate so they
// can be tested without running anything. Single-threaded driver; not reentrant (it pins the
// calling thread's CPU affinity while Sluice runs and restores it after).
#ifndef SLUICE_BENCH_PIPELINE_PIPELINE_BENCH_H_
#define SLUICE_BENCH_PIPELINE_PIPELINE_BENCH_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace CLI {
class App;
}

namespace sluice::bench {

struct PipelineBenchOptions {
  std::string images_dir;   // empty: $SLUICE_BENCH_IMAGES, else <tmp>/sluice-bench-jpeg
  int cores = 0;            // CPUs for each side; 0: every CPU this process may run on
  double seconds = 20;      // measured (steady-state) seconds per side
  int batch_size = 128;
  int image_count = 2048;   // JPEGs to create when the directory has none
  bool run_torch = true;    // false: Sluice only (torch fields are null in the JSON)
  std::string python = "/usr/bin/python3";
};

// Registers --images, --cores, --seconds, --batch, --count, --no-torch on `app`.
void AddPipelineBenchFlags(CLI::App* app, PipelineBenchOptions& options);

// Runs the benchmark; returns the process exit code (0 on success).
int RunPipelineBenchmark(const PipelineBenchOptions& options);

// --- pure helpers (exposed for tests) ------------------------------------------------------------

// One side's measurement.
struct SideResult {
  int64_t images = 0;        // images delivered during the measured window
  double seconds = 0;        // length of the window
  double cpu_seconds = 0;    // CPU time spent during the window (all threads/processes)
};

struct BenchReport {
  int cores = 0;
  int64_t dataset_images = 0;
  double dataset_mean_kb = 0;
  int batch_size = 0;
  std::string images_dir;
  std::string machine;       // CPU model name
  std::vector<std::string> plan;  // Sluice's stages after fusion
  SideResult sluice;
  std::optional<SideResult> torch;
  std::string torch_error;   // why torch is missing, when it is
  std::string torch_version;
};

// The pipeline spec (bench/pipeline/resnet.yaml) with ${IMAGES} and ${BATCH} filled in.
std::string ExpandSpecTemplate(absl::string_view text, absl::string_view images_dir, int batch_size);
// The final JSON line (no trailing newline).
std::string ReportJson(const BenchReport& report);
// Parses the last JSON line torch_pipeline.py prints.
absl::StatusOr<SideResult> ParseTorchResult(absl::string_view line, std::string* torch_version);
// The first `count` CPUs of `allowed` (all of them when count <= 0 or too large).
std::vector<int> PickCpus(const std::vector<int>& allowed, int count);
// The directory holding resnet.yaml and the Python scripts.
std::string BenchPipelineDir();

}  // namespace sluice::bench

#endif  // SLUICE_BENCH_PIPELINE_PIPELINE_BENCH_H_
