// Pure helpers shared by the data-service benchmarks: statistics over trials, the machine's
// description (CPU model, cores, load) for the result, pipeline specs, and the throughput window.
// Stateless functions; thread-safe.
#ifndef SLUICE_BENCH_DATASERVICE_BENCH_REPORT_H_
#define SLUICE_BENCH_DATASERVICE_BENCH_REPORT_H_

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "pipeline.pb.h"

namespace sluice::bench {

// The median of `values` (mean of the middle two for an even count); 0 for none.
double Median(std::vector<double> values);
// a / b, or 0 when b is not positive (a failed or empty measurement).
double Ratio(double a, double b);
// Rounds to `digits` decimals, for readable JSON.
double Round(double value, int digits);

// Bytes and elements counted over a measured interval.
struct Throughput {
  int64_t bytes = 0;
  int64_t elements = 0;
  double seconds = 0;
  std::vector<double> cpu_seconds;  // CPU used during the interval by the sampled processes, if any
  double gbps() const { return seconds > 0 ? static_cast<double>(bytes) / seconds / 1e9 : 0; }
  double elements_per_second() const { return seconds > 0 ? static_cast<double>(elements) / seconds : 0; }
};

// utime + stime in clock ticks from /proc/<pid>/stat text (the command may contain spaces and
// parentheses: fields are counted after the last ')').
absl::StatusOr<int64_t> ParseProcStatCpuTicks(absl::string_view stat);
// CPU seconds a process used so far (from /proc/<pid>/stat).
absl::StatusOr<double> ProcessCpuSeconds(pid_t pid);
// CPU seconds of each process in `pids` (0 for a process that is gone).
std::vector<double> SampleCpuSeconds(const std::vector<pid_t>& pids);

struct MachineInfo {
  std::string cpu_model;
  int cpus = 0;
  double load1 = 0, load5 = 0, load15 = 0;
};
// The three load averages of /proc/loadavg text ("0.52 0.58 0.59 1/467 12345").
absl::StatusOr<std::vector<double>> ParseLoadAvg(absl::string_view loadavg);
// Reads /proc/cpuinfo, /proc/loadavg and the online CPU count.
MachineInfo ReadMachineInfo();
nlohmann::json ToJson(const MachineInfo& machine);

// Parses a pipeline spec (YAML or JSON text); errors name the benchmark's spec.
absl::StatusOr<pipeline::PipelineDef> ParseBenchPipeline(absl::string_view spec, absl::string_view what);

// A fresh directory for the children's logs: /tmp/sluice-bench-<name>-XXXXXX.
absl::StatusOr<std::string> MakeLogDir(absl::string_view name);
// Removes it (and everything in it).
void RemoveLogDir(const std::string& dir);

}  // namespace sluice::bench

#endif  // SLUICE_BENCH_DATASERVICE_BENCH_REPORT_H_
