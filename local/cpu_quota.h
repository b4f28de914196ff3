// Per-process CPU limits for local workers (the supervisor's optional per-worker quota, so one
// machine can stand in for many small workers; the scale-out benchmark measures with it), with the
// best mechanism the machine offers:
//  1. cgroup v2 (a cgroup2 mount whose cgroup.controllers lists `cpu`): cpu.max "<quota> <period>";
//  2. cgroup v1 (a `cgroup` mount with the `cpu` controller and cpu.cfs_quota_us): CFS quota/period;
//  3. otherwise taskset-style affinity plus nice: every limited process is pinned to one CPU and
//     niced, so together they share one core (no per-process fraction; reported as such).
// Detection is pure (ParseCgroupMounts, ChooseQuotaMechanism over a file probe) and unit-tested;
// CpuQuota applies the choice, falling back to the next mechanism when creating a cgroup fails
// (e.g. no permission: a container without a writable /sys/fs/cgroup); notes() says why, in words
// a user can act on. Requirements for a real per-process fraction: a cgroup v2 mount with the cpu
// controller, or a cgroup v1 cpu mount with CFS bandwidth control, writable by this process (root,
// or a delegated subtree).
//
// Threading: CpuQuota is thread-safe (Apply, Stats and Remove may be called from any thread). Its
// destructor removes the cgroups it created; stop the limited processes first (a cgroup with live
// processes cannot be removed).
#ifndef SLUICE_LOCAL_CPU_QUOTA_H_
#define SLUICE_LOCAL_CPU_QUOTA_H_

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"

namespace sluice::local {

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
  // Prepares limits of `cpus_per_process` CPUs each (the default of Apply) under a group named
  // `name` (e.g. "sluice-local-<pid>"). Never fails outright: the taskset fallback always works.
  // `allow_cgroups` false forces the fallback.
  static std::unique_ptr<CpuQuota> Create(double cpus_per_process, const std::string& name, bool allow_cgroups = true);
  ~CpuQuota();
  CpuQuota(const CpuQuota&) = delete;
  CpuQuota& operator=(const CpuQuota&) = delete;

  QuotaMechanism mechanism() const { return mechanism_; }
  // Why better mechanisms were not used ("cgroup-v2 unusable: cannot create ...: Permission denied").
  const std::vector<std::string>& notes() const { return notes_; }
  // One line for reports, e.g. "cgroup-v1 cpu.cfs_quota_us=20000 cpu.cfs_period_us=100000 per worker".
  std::string Describe() const;
  // The default limit, in CPUs.
  double cpus() const { return cpus_; }

  // Limits process `pid` as limit number `index` (a cgroup per index, reused when the same index
  // is applied again, e.g. to a restarted process) to `cpus` CPUs (the default when omitted; the
  // taskset fallback cannot apply fractions: it pins every limited process to one CPU).
  absl::Status Apply(pid_t pid, int index) { return Apply(pid, index, cpus_); }
  absl::Status Apply(pid_t pid, int index, double cpus);
  // Throttling counters of limit `index` so far (zeros for taskset).
  ThrottleStats Stats(int index) const;
  // Removes the cgroup of limit `index` (once its process is gone); a no-op for taskset.
  void Remove(int index);

 private:
  CpuQuota() = default;
  absl::Status SetUpCgroupParent();
  std::string LeafDir(int index) const;

  // Set by Create, then constant.
  QuotaMechanism mechanism_ = QuotaMechanism::kTaskset;
  double cpus_ = 0;
  int64_t period_us_ = 100000;
  std::string parent_dir_;              // cgroups: the group holding one leaf per index
  std::vector<std::string> notes_;
  int pinned_cpu_ = 0;                  // taskset

  mutable absl::Mutex mu_;
  std::vector<std::string> created_ ABSL_GUARDED_BY(mu_);  // directories to remove, children first
};

}  // namespace sluice::local

#endif  // SLUICE_LOCAL_CPU_QUOTA_H_
