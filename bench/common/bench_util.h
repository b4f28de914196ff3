// Small helpers the benchmarks share: whole-file reads, polling with a deadline, running a shell
// command line by line, shell quoting, the JPEG files of a directory, the CPU model, this
// process's CPU time and the spread (median, min, max) of repeated runs. Stateless functions; thread-safe (RunCommand calls `on_line` on the calling
// thread).
#ifndef SLUICE_BENCH_COMMON_BENCH_UTIL_H_
#define SLUICE_BENCH_COMMON_BENCH_UTIL_H_

#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace sluice::bench {

// The whole file, or NotFound "cannot read <path>" when it cannot be opened.
absl::StatusOr<std::string> ReadWholeFile(const std::string& path);
// The whole file ("" when it cannot be read).
std::string ReadTextFile(const std::string& path);

// Polls `done` until it returns true (true) or `timeout` passes (false): a deadline, not a timing
// assumption.
bool WaitUntil(const std::function<bool()>& done, absl::Duration timeout,
               absl::Duration interval = absl::Milliseconds(50));

// Runs `command` with /bin/sh, handing each line of its standard output (without the newline; a
// last line without one too) to `on_line`. Returns its exit code, 128 + the signal that killed it,
// or -1 when it could not be started. Add " 2>&1" to the command to see its errors too.
int RunCommand(const std::string& command, const std::function<void(const std::string&)>& on_line);
// `s` in single quotes for /bin/sh (a ' inside becomes '\'').
std::string ShellQuote(absl::string_view s);

// The regular *.jpg files directly in `dir`, sorted; none when it cannot be listed.
std::vector<std::filesystem::path> JpegFiles(const std::filesystem::path& dir);

// "model name" of the first processor in /proc/cpuinfo text; "" if absent.
std::string ParseCpuModel(absl::string_view cpuinfo);
// /proc/cpuinfo's first "model name" ("unknown" when there is none).
std::string CpuModelName();
// CPU seconds this process used so far, all threads (CLOCK_PROCESS_CPUTIME_ID).
double ThisProcessCpuSeconds();

// The spread of repeated measurements (runs, trials, windows): median, min, max and count.
// All zero for no values.
struct RunSpread {
  double median = 0, min = 0, max = 0;
  int n = 0;
  // (max - min) / median, the relative range; 0 for fewer than two values or a median <= 0.
  double relative_range() const { return n > 1 && median > 0 ? (max - min) / median : 0; }
};
// Median (the mean of the middle two for an even count), min, max and count of `values`;
// all zero when `values` is empty.
RunSpread SpreadOfRuns(std::vector<double> values);
// SpreadOfRuns(values).relative_range(): (max - min) / median; 0 for no values, one value, or a
// median <= 0.
double RelativeRange(const std::vector<double>& values);

}  // namespace sluice::bench

#endif  // SLUICE_BENCH_COMMON_BENCH_UTIL_H_
