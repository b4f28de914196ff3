#include "bench/dataservice/bench_report.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "bench/common/bench_util.h"
#include "dataplane/pipeline/spec_parser.h"

namespace sluice::bench {

absl::StatusOr<int64_t> ParseProcStatCpuTicks(absl::string_view stat) {
  const size_t close = stat.rfind(')');
  if (close == absl::string_view::npos) {
    return absl::InvalidArgumentError("/proc/<pid>/stat: no ')' closing the command name");
  }
  // After ") ": state(3) ppid(4) ... utime(14) stime(15); the first field after ')' is field 3.
  std::vector<absl::string_view> f = absl::StrSplit(stat.substr(close + 1), ' ', absl::SkipWhitespace());
  if (f.size() < 13) {
    return absl::InvalidArgumentError(absl::StrCat("/proc/<pid>/stat: ", f.size(), " fields after the command, need 13"));
  }
  int64_t utime = 0, stime = 0;
  if (!absl::SimpleAtoi(f[11], &utime) || !absl::SimpleAtoi(f[12], &stime) || utime < 0 || stime < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("/proc/<pid>/stat: utime '", f[11], "' or stime '", f[12], "' is not a tick count"));
  }
  return utime + stime;
}

absl::StatusOr<double> ProcessCpuSeconds(pid_t pid) {
  absl::StatusOr<std::string> text = ReadWholeFile(absl::StrCat("/proc/", pid, "/stat"));
  if (!text.ok()) return absl::NotFoundError(absl::StrCat("process ", pid, " is gone (no /proc/", pid, "/stat)"));
  auto ticks = ParseProcStatCpuTicks(*text);
  if (!ticks.ok()) return ticks.status();
  return static_cast<double>(*ticks) / static_cast<double>(sysconf(_SC_CLK_TCK));
}

std::vector<double> SampleCpuSeconds(const std::vector<pid_t>& pids) {
  std::vector<double> out;
  for (pid_t pid : pids) out.push_back(ProcessCpuSeconds(pid).value_or(0));
  return out;
}

double Median(std::vector<double> values) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 == 1 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

double Ratio(double a, double b) { return b > 0 ? a / b : 0; }

double Round(double value, int digits) {
  const double scale = std::pow(10.0, digits);
  return std::round(value * scale) / scale;
}

absl::StatusOr<std::vector<double>> ParseLoadAvg(absl::string_view loadavg) {
  std::vector<absl::string_view> parts = absl::StrSplit(loadavg, ' ', absl::SkipWhitespace());
  if (parts.size() < 3) {
    return absl::InvalidArgumentError(absl::StrCat("/proc/loadavg: expected three load averages, got '", loadavg, "'"));
  }
  std::vector<double> out;
  for (int i = 0; i < 3; ++i) {
    double v = 0;
    if (!absl::SimpleAtod(parts[i], &v) || v < 0) {
      return absl::InvalidArgumentError(absl::StrCat("/proc/loadavg: field ", i + 1, " '", parts[i], "' is not a load average"));
    }
    out.push_back(v);
  }
  return out;
}

MachineInfo ReadMachineInfo() {
  MachineInfo m;
  m.cpu_model = ParseCpuModel(ReadTextFile("/proc/cpuinfo"));
  m.cpus = static_cast<int>(std::max<long>(1, sysconf(_SC_NPROCESSORS_ONLN)));
  if (auto load = ParseLoadAvg(ReadTextFile("/proc/loadavg")); load.ok()) {
    m.load1 = (*load)[0];
    m.load5 = (*load)[1];
    m.load15 = (*load)[2];
  }
  return m;
}

nlohmann::json ToJson(const MachineInfo& machine) {
  return nlohmann::json{{"cpu_model", machine.cpu_model},
                        {"cpus", machine.cpus},
                        {"load_avg", {machine.load1, machine.load5, machine.load15}}};
}

absl::StatusOr<pipeline::PipelineDef> ParseBenchPipeline(absl::string_view spec, absl::string_view what) {
  auto def = pipeline::ParsePipelineSpec(spec, what);
  if (!def.ok()) {
    return absl::Status(def.status().code(), absl::StrCat("the ", what, " pipeline is invalid: ", def.status().message()));
  }
  return def;
}

absl::StatusOr<std::string> MakeLogDir(absl::string_view name) {
  std::string pattern = (std::filesystem::temp_directory_path() / absl::StrCat("sluice-bench-", name, "-XXXXXX")).string();
  if (mkdtemp(pattern.data()) == nullptr) {
    return absl::InternalError(absl::StrCat("cannot create a log directory ", pattern, ": ", std::strerror(errno)));
  }
  return pattern;
}

void RemoveLogDir(const std::string& dir) {
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
}

}  // namespace sluice::bench
