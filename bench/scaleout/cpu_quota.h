// Per-process CPU limits for the scale-out benchmark, with the best mechanism the machine offers:
//  1. cgroup v2 (a cgroup2 mount whose cgroup.controllers lists `cpu`): cpu.max "<quota> <period>";
//  2. cgroup v1 (a `cgroup` mount with the `cpu` controller and cpu.cfs_quota_us): CFS quota/period;
//  3. otherwise taskset-style affinity plus nice: every limited process is pinned to one CPU and
//     niced, so together they share one core (no per-process fraction; reported as such).
// Detection is pure (ParseCgroupMounts, ChooseQuotaMechanism over a file probe) and unit-tested;
// CpuQuota applies the choice, falling back to the next mechanism when creating a cgroup fails
// (e.g. no permission).
//
// Threading: CpuQuota is used from one thread. Its destructor removes the cgroups it created; stop
// the limited processes first (a cgroup with live processes cannot be removed).
#ifndef SLUICE_BENCH_SCALEOUT_CPU_QUOTA_H_
#define SLUICE_BENCH_SCALEOUT_CPU_QUOTA_H_

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace sluice::bench {

enum class QuotaMechanism { kCgroupV2, kCgroupV1, kTaskset };
std::string MechanismName(QuotaMechanism m);  // "cgroup-v2", "cgroup-v1", "taskset"

struct CgroupMount {
  std::string fstype;                // "cgroup2" or "cgroup"
  std::string path;                  // mount point
  std::vector<std::string> options;  // mount options (v1: the controllers, e.g. "cpu")
};
// The cgroup and cgroup2 entries of /proc/self/mounts text (octal escapes such as \040 decoded).
std::vector<CgroupMount> ParseCgroupMounts(absl::string_view mounts);
// True if the whitespace-separated `list` (a cgroup.controllers file) names `controller`.
bool ListsController(absl::string_view list, absl::string_view controller);

// Reads files for ChooseQuotaMechanism: std::nullopt when a file does not exist or is unreadable.
using FileProbe = std::function<std::optional<std::string>(const std::string& path)>;

struct QuotaChoice {
  QuotaMechanism mechanism = QuotaMechanism::kTaskset;
  std::string mount;                 // the cgroup mount used (empty for taskset)
  std::vector<std::string> notes;    // why better mechanisms were not chosen
};
// The best usable mechanism by the files alone (permissions are checked by CpuQuota::Create).
// `skip` lists mechanisms already found unusable.
QuotaChoice ChooseQuotaMechanism(const std::vector<CgroupMount>& mounts, const FileProbe& probe,
                                 const std::vector<QuotaMechanism>& skip = {});

// cpu.max text for a fraction of one CPU: "20000 100000" for 0.2 with a 100 ms period.
std::string CpuMaxValue(double cpus, int64_t period_us);
// CFS quota in microseconds for a fraction of one CPU (at least 1000, the kernel's minimum).
int64_t QuotaMicros(double cpus, int64_t period_us);

// "key value" lines (cpu.stat) as a map; lines that do not parse are skipped.
std::map<std::string, int64_t> ParseKeyValueLines(absl::string_view text);

struct ThrottleStats {
  int64_t periods = 0;
  int64_t throttled_periods = 0;
  double throttled_seconds = 0;
};
// From cpu.stat of either version (v2: nr_periods, nr_throttled, throttled_usec; v1: nr_periods,
// nr_throttled, throttled_time in ns).
ThrottleStats ThrottleStatsFromCpuStat(const std::map<std::string, int64_t>& stat);

class CpuQuota {
 public:
  // Prepares limits of `cpus_per_process` CPUs each under a group named `name` (e.g.
  // "sluice-bench-scaleout-<pid>"). Never fails outright: the taskset fallback always works.
  // `allow_cgroups` false forces the fallback.
  static std::unique_ptr<CpuQuota> Create(double cpus_per_process, const std::string& name, bool allow_cgroups = true);
  ~CpuQuota();
  CpuQuota(const CpuQuota&) = delete;
  CpuQuota& operator=(const CpuQuota&) = delete;

  QuotaMechanism mechanism() const { return mechanism_; }
  const std::vector<std::string>& notes() const { return notes_; }
  // One line for the report, e.g. "cgroup-v1 cpu.cfs_quota_us=20000 cpu.cfs_period_us=100000 per worker".
  std::string Describe() const;

  // Limits process `pid` (limit number `index`, a fresh cgroup per index).
  absl::Status Apply(pid_t pid, int index);
  // Throttling counters of limit `index` so far (zeros for taskset).
  ThrottleStats Stats(int index) const;

 private:
  CpuQuota() = default;
  absl::Status SetUpCgroupParent();
  std::string LeafDir(int index) const;

  QuotaMechanism mechanism_ = QuotaMechanism::kTaskset;
  double cpus_ = 0;
  int64_t period_us_ = 100000;
  std::string parent_dir_;              // cgroups: the group holding one leaf per index
  std::vector<std::string> created_;    // directories to remove, children first
  std::vector<std::string> notes_;
  int pinned_cpu_ = 0;                  // taskset
};

}  // namespace sluice::bench

#endif  // SLUICE_BENCH_SCALEOUT_CPU_QUOTA_H_
