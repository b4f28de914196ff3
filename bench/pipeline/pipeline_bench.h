// `sluice bench pipeline`: the ResNet-style JPEG input pipeline (decode, random resized crop 224,
// horizontal flip, normalize, batch 128) run by Sluice and, on the same files and the same CPUs,
// by PyTorch's DataLoader in two variants (torch_pipeline.py): `usual` (torchvision's recipe) and
// `best` (PIL's draft() DCT-scaled decode, only the crop box resampled: the work PIL lets one skip).
//
// RunPipelineBenchmark makes the JPEG set if missing (make_jpeg_dataset.py), then runs `rounds`
// rounds of S U B B U S (Sluice, usual, best; each run `seconds` long after a warm-up), so drift
// and background load fall on every side alike, and prints progress on stderr and, as its last
// stdout line, one JSON object (see docs/benchmarks.md): medians and spreads per side, and the
// headline `ratio` = Sluice's / usual torch's images per CPU-second. The pure helpers below (spec
// text, result assembly, parsing the torch side's output) are separate so they can be tested
// without running anything. Single-threaded driver; not reentrant (it pins the calling thread's
// CPU affinity while Sluice runs and restores it after).
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
  double seconds = 5;       // measured (steady-state) seconds per run
  int rounds = 2;           // rounds of S U B B U S (Sluice, torch usual, torch best)
  int batch_size = 128;
  int image_count = 2048;   // JPEGs to create when the directory has none
  bool run_torch = true;    // false: Sluice only (torch fields are null in the JSON)
  std::string python = "/usr/bin/python3";
};

// Registers --images, --cores, --seconds, --rounds, --batch, --count, --no-torch on `app`.
void AddPipelineBenchFlags(CLI::App* app, PipelineBenchOptions& options);

// Runs the benchmark; returns the process exit code (0 on success).
int RunPipelineBenchmark(const PipelineBenchOptions& options);

// Makes sure `dir` holds the benchmark's JPEG set: with `explicit_dir` and JPEGs already there they
// are used as they are; otherwise make_jpeg_dataset.py (run by `python`) creates `count` of them
// (idempotent). Errors name the command that failed.
absl::Status EnsureJpegDataset(const std::string& python, const std::string& dir, int count, bool explicit_dir);
// The ResNet-style pipeline (resnet.yaml) over the JPEGs in `images_dir`, batched by `batch_size`.
absl::StatusOr<std::string> ResnetPipelineSpec(const std::string& images_dir, int batch_size);

// --- pure helpers (exposed for tests) ------------------------------------------------------------

// One run of one side.
struct SideResult {
  int64_t images = 0;        // images delivered during the measured window
  double seconds = 0;        // length of the window
  double cpu_seconds = 0;    // CPU time spent during the window (all threads/processes)
  double images_per_second() const { return seconds > 0 ? static_cast<double>(images) / seconds : 0; }
  double images_per_cpu_second() const { return cpu_seconds > 0 ? static_cast<double>(images) / cpu_seconds : 0; }
};

struct BenchReport {
  int cores = 0;
  int64_t dataset_images = 0;
  double dataset_mean_kb = 0;
  int batch_size = 0;
  int rounds = 0;
  std::string images_dir;
  std::string machine;       // CPU model name
  std::vector<double> load_avg_start, load_avg_end;  // 1, 5, 15 min
  std::vector<std::string> plan;  // Sluice's stages after fusion
  // Runs in order; each round adds two runs per side (S U B B U S), so run 2r and 2r+1 of every
  // side belong to round r. The torch vectors are empty when torch did not run.
  std::vector<SideResult> sluice, torch_usual, torch_best;
  std::string torch_error;   // why torch is missing, when it is
  std::string torch_version;
};

// The pipeline spec (bench/pipeline/resnet.yaml) with ${IMAGES} and ${BATCH} filled in.
std::string ExpandSpecTemplate(absl::string_view text, absl::string_view images_dir, int batch_size);
// The final JSON line (no trailing newline). `ratio` (the headline) = median Sluice images per
// CPU-second / median usual-torch images per CPU-second; also ratio_vs_usual, ratio_vs_best, the
// wall-clock ratios, per-side spreads and the per-round ratios.
std::string ReportJson(const BenchReport& report);
// Parses the last JSON line torch_pipeline.py prints.
absl::StatusOr<SideResult> ParseTorchResult(absl::string_view line, std::string* torch_version);
// The order of one round's runs: 'S' Sluice, 'U' torch usual, 'B' torch best (only 'S' without torch).
std::string RoundOrder(bool with_torch);
// The first `count` CPUs of `allowed` (all of them when count <= 0 or too large).
std::vector<int> PickCpus(const std::vector<int>& allowed, int count);
// The directory holding resnet.yaml and the Python scripts.
std::string BenchPipelineDir();

}  // namespace sluice::bench

#endif  // SLUICE_BENCH_PIPELINE_PIPELINE_BENCH_H_
