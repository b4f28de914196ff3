// `sluice bench autoorder`: three realistic pipelines written in natural order (image classification,
// detection-style, text; image.yaml, detection.yaml, text.yaml here) run as written and as AutoOrder
// (relaxed) rewrites them, on the same data, alternating A B B A in each round, for several rounds.
// Throughput is counted per CPU-second of the process (output elements / CPU seconds), at a CPU
// budget of `cores` threads. The last stdout line is one JSON object whose `ratios` maps each
// pipeline to median(rewritten) / median(written) elements per CPU-second (docs/autoorder.md).
//
// RunAutoOrderBenchmark makes the data if missing (JPEGs by bench/pipeline/make_jpeg_dataset.py, a
// TFRecord of those JPEGs with boxes, JSON lines of text). Single-threaded driver; not reentrant.
#ifndef SLUICE_BENCH_AUTOORDER_AUTOORDER_BENCH_H_
#define SLUICE_BENCH_AUTOORDER_AUTOORDER_BENCH_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace CLI {
class App;
}

namespace sluice::bench {

struct AutoOrderBenchOptions {
  std::string data_dir;     // empty: $SLUICE_BENCH_AUTOORDER_DATA, else <tmp>/sluice-bench-autoorder
  int rounds = 3;           // A B B A per round
  int cores = 1;            // CPU budget of each run
  int images = 256;         // JPEGs (image and detection pipelines) when the set is missing
  int documents = 4000;     // text documents when missing
  int64_t sample = 64;      // AutoOrder's sample per reorderable part
  std::vector<std::string> pipelines = {"image", "detection", "text"};
  std::string python = "/usr/bin/python3";
};

// Registers --data, --rounds, --cores, --images, --documents, --sample, --pipelines.
void AddAutoOrderBenchFlags(CLI::App* app, AutoOrderBenchOptions& options);

// Runs the benchmark; returns the process exit code (0 on success).
int RunAutoOrderBenchmark(const AutoOrderBenchOptions& options);

// --- pure helpers (exposed for tests) ------------------------------------------------------------

// The spec template with ${DATA} filled in.
std::string ExpandDataTemplate(absl::string_view text, absl::string_view data_dir);

// Writes the benchmark's synthetic data into `dir` (detection.tfrecord from `dir`/jpeg/*.jpg, and
// text.jsonl with `documents` lines), deterministically. The JPEGs must exist.
absl::Status WriteDetectionRecords(const std::string& dir);
absl::Status WriteTextDocuments(const std::string& dir, int documents);

// The directory holding the YAML specs.
std::string BenchAutoOrderDir();

}  // namespace sluice::bench

#endif  // SLUICE_BENCH_AUTOORDER_AUTOORDER_BENCH_H_
