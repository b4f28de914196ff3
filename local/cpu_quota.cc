#include "local/cpu_quota.h"

#include <sched.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace sluice::local {
namespace {

std::optional<std::string> ReadFileIfExists(const std::string& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

absl::Status WriteToFile(const std::string& path, const std::string& value) {
  std::ofstream out(path);
  if (!out) return absl::PermissionDeniedError(absl::StrCat("cannot open ", path, " for writing: ", std::strerror(errno)));
  out << value;
  out.flush();
  if (!out) return absl::InternalError(absl::StrCat("cannot write '", value, "' to ", path, ": ", std::strerror(errno)));
  return absl::OkStatus();
}

absl::Status MakeDir(const std::string& path) {
  if (mkdir(path.c_str(), 0755) != 0 && errno != EEXIST) {
    return absl::PermissionDeniedError(absl::StrCat("cannot create ", path, ": ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

// Decodes the octal escapes (\040 for a space) the kernel uses in /proc/self/mounts.
std::string DecodeMountField(absl::string_view field) {
  std::string out;
  for (size_t i = 0; i < field.size(); ++i) {
    if (field[i] == '\\' && i + 3 < field.size()) {
      const char a = field[i + 1], b = field[i + 2], c = field[i + 3];
      if (a >= '0' && a <= '3' && b >= '0' && b <= '7' && c >= '0' && c <= '7') {
        out.push_back(static_cast<char>((a - '0') * 64 + (b - '0') * 8 + (c - '0')));
        i += 3;
        continue;
      }
    }
    out.push_back(field[i]);
  }
  return out;
}

}  // namespace

std::string MechanismName(QuotaMechanism m) {
  switch (m) {
    case QuotaMechanism::kCgroupV2: return "cgroup-v2";
    case QuotaMechanism::kCgroupV1: return "cgroup-v1";
    case QuotaMechanism::kTaskset: return "taskset";
  }
  return "unknown";
}

std::vector<CgroupMount> ParseCgroupMounts(absl::string_view mounts) {
  std::vector<CgroupMount> out;
  for (absl::string_view line : absl::StrSplit(mounts, '\n')) {
    std::vector<absl::string_view> f = absl::StrSplit(line, ' ', absl::SkipWhitespace());
    if (f.size() < 4) continue;
    if (f[2] != "cgroup" && f[2] != "cgroup2") continue;
    CgroupMount m;
    m.fstype = std::string(f[2]);
    m.path = DecodeMountField(f[1]);
    for (absl::string_view o : absl::StrSplit(f[3], ',', absl::SkipEmpty())) m.options.emplace_back(o);
    out.push_back(std::move(m));
  }
  return out;
}

bool ListsController(absl::string_view list, absl::string_view controller) {
  for (absl::string_view c : absl::StrSplit(list, absl::ByAnyChar(" \t\n"), absl::SkipEmpty())) {
    if (c == controller) return true;
  }
  return false;
}

QuotaChoice ChooseQuotaMechanism(const std::vector<CgroupMount>& mounts, const FileProbe& probe,
                                 const std::vector<QuotaMechanism>& skip) {
  auto skipped = [&](QuotaMechanism m) { return std::find(skip.begin(), skip.end(), m) != skip.end(); };
  QuotaChoice choice;
  if (!skipped(QuotaMechanism::kCgroupV2)) {
    bool found = false;
    for (const auto& m : mounts) {
      if (m.fstype != "cgroup2") continue;
      found = true;
      auto controllers = probe(m.path + "/cgroup.controllers");
      if (controllers && ListsController(*controllers, "cpu")) {
        choice.mechanism = QuotaMechanism::kCgroupV2;
        choice.mount = m.path;
        return choice;
      }
      choice.notes.push_back(absl::StrCat("cgroup v2 at ", m.path, " does not offer the cpu controller (",
                                          controllers ? "cgroup.controllers: '" + std::string(absl::StripAsciiWhitespace(*controllers)) + "'"
                                                      : std::string("no cgroup.controllers"),
                                          ")"));
    }
    if (!found) choice.notes.push_back("no cgroup v2 mount");
  }
  if (!skipped(QuotaMechanism::kCgroupV1)) {
    bool found = false;
    for (const auto& m : mounts) {
      if (m.fstype != "cgroup" || std::find(m.options.begin(), m.options.end(), "cpu") == m.options.end()) continue;
      found = true;
      if (probe(m.path + "/cpu.cfs_quota_us")) {
        choice.mechanism = QuotaMechanism::kCgroupV1;
        choice.mount = m.path;
        return choice;
      }
      choice.notes.push_back(absl::StrCat("cgroup v1 cpu at ", m.path, " has no cpu.cfs_quota_us"));
    }
    if (!found) choice.notes.push_back("no cgroup v1 mount with the cpu controller");
  }
  choice.mechanism = QuotaMechanism::kTaskset;
  return choice;
}

int64_t QuotaMicros(double cpus, int64_t period_us) {
  return std::max<int64_t>(1000, static_cast<int64_t>(std::llround(cpus * static_cast<double>(period_us))));
}

std::string CpuMaxValue(double cpus, int64_t period_us) {
  return absl::StrCat(QuotaMicros(cpus, period_us), " ", period_us);
}

std::map<std::string, int64_t> ParseKeyValueLines(absl::string_view text) {
  std::map<std::string, int64_t> out;
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    std::vector<absl::string_view> f = absl::StrSplit(line, ' ', absl::SkipWhitespace());
    int64_t v = 0;
    if (f.size() == 2 && absl::SimpleAtoi(f[1], &v)) out[std::string(f[0])] = v;
  }
  return out;
}

ThrottleStats ThrottleStatsFromCpuStat(const std::map<std::string, int64_t>& stat) {
  auto get = [&](const char* key) {
    auto it = stat.find(key);
    return it == stat.end() ? int64_t{0} : it->second;
  };
  ThrottleStats s;
  s.periods = get("nr_periods");
  s.throttled_periods = get("nr_throttled");
  if (stat.count("throttled_usec")) {
    s.throttled_seconds = static_cast<double>(get("throttled_usec")) / 1e6;
  } else {
    s.throttled_seconds = static_cast<double>(get("throttled_time")) / 1e9;
  }
  return s;
}

// ---------------------------------------------------------------- CpuQuota

std::unique_ptr<CpuQuota> CpuQuota::Create(double cpus_per_process, const std::string& name, bool allow_cgroups) {
  std::unique_ptr<CpuQuota> q(new CpuQuota());
  q->cpus_ = cpus_per_process;
  const auto mounts = ParseCgroupMounts(ReadFileIfExists("/proc/self/mounts").value_or(""));
  std::vector<QuotaMechanism> skip;
  if (!allow_cgroups) {
    skip = {QuotaMechanism::kCgroupV2, QuotaMechanism::kCgroupV1};
    q->notes_.push_back("cgroups not tried (taskset was asked for)");
  }
  while (true) {
    QuotaChoice choice = ChooseQuotaMechanism(mounts, ReadFileIfExists, skip);
    for (auto& n : choice.notes) {
      if (std::find(q->notes_.begin(), q->notes_.end(), n) == q->notes_.end()) q->notes_.push_back(n);
    }
    q->mechanism_ = choice.mechanism;
    if (choice.mechanism == QuotaMechanism::kTaskset) break;
    q->parent_dir_ = absl::StrCat(choice.mount, "/", name);
    absl::Status s = q->SetUpCgroupParent();
    if (s.ok()) break;
    q->notes_.push_back(absl::StrCat(MechanismName(choice.mechanism), " unusable: ", s.message()));
    skip.push_back(choice.mechanism);
  }
  if (q->mechanism_ == QuotaMechanism::kTaskset) {
    q->pinned_cpu_ = static_cast<int>(std::max<long>(1, sysconf(_SC_NPROCESSORS_ONLN))) - 1;
  }
  return q;
}

absl::Status CpuQuota::SetUpCgroupParent() {
  absl::MutexLock lock(&mu_);
  // Remove whatever a failed earlier attempt created.
  for (auto it = created_.rbegin(); it != created_.rend(); ++it) rmdir(it->c_str());
  created_.clear();
  if (absl::Status s = MakeDir(parent_dir_); !s.ok()) return s;
  created_.push_back(parent_dir_);
  if (mechanism_ == QuotaMechanism::kCgroupV2) {
    // The mount's root must delegate cpu to our group, and our group to its leaves.
    const std::string root = parent_dir_.substr(0, parent_dir_.rfind('/'));
    auto root_subtree = ReadFileIfExists(root + "/cgroup.subtree_control");
    if (!root_subtree || !ListsController(*root_subtree, "cpu")) {
      if (absl::Status s = WriteToFile(root + "/cgroup.subtree_control", "+cpu"); !s.ok()) return s;
    }
    if (absl::Status s = WriteToFile(parent_dir_ + "/cgroup.subtree_control", "+cpu"); !s.ok()) return s;
  }
  // Probe: a leaf that takes a quota.
  const std::string probe = parent_dir_ + "/probe";
  if (absl::Status s = MakeDir(probe); !s.ok()) return s;
  absl::Status s = mechanism_ == QuotaMechanism::kCgroupV2
                       ? WriteToFile(probe + "/cpu.max", CpuMaxValue(cpus_, period_us_))
                       : WriteToFile(probe + "/cpu.cfs_quota_us", absl::StrCat(QuotaMicros(cpus_, period_us_)));
  rmdir(probe.c_str());
  return s;
}

CpuQuota::~CpuQuota() {
  absl::MutexLock lock(&mu_);
  for (auto it = created_.rbegin(); it != created_.rend(); ++it) rmdir(it->c_str());
}

void CpuQuota::Remove(int index) {
  if (mechanism_ == QuotaMechanism::kTaskset) return;
  const std::string leaf = LeafDir(index);
  absl::MutexLock lock(&mu_);
  auto it = std::find(created_.begin(), created_.end(), leaf);
  if (it != created_.end() && rmdir(leaf.c_str()) == 0) created_.erase(it);
}

std::string CpuQuota::LeafDir(int index) const { return absl::StrCat(parent_dir_, "/w", index); }

std::string CpuQuota::Describe() const {
  switch (mechanism_) {
    case QuotaMechanism::kCgroupV2:
      return absl::StrCat("cgroup-v2 cpu.max='", CpuMaxValue(cpus_, period_us_), "' per worker under ", parent_dir_);
    case QuotaMechanism::kCgroupV1:
      return absl::StrCat("cgroup-v1 cpu.cfs_quota_us=", QuotaMicros(cpus_, period_us_),
                          " cpu.cfs_period_us=", period_us_, " per worker under ", parent_dir_);
    case QuotaMechanism::kTaskset:
      return absl::StrCat("taskset: all workers pinned to CPU ", pinned_cpu_,
                          " and niced (+10); no per-worker fraction");
  }
  return "";
}

absl::Status CpuQuota::Apply(pid_t pid, int index, double cpus) {
  if (!(cpus > 0)) return absl::InvalidArgumentError(absl::StrCat("CPU limit ", cpus, " must be > 0"));
  if (mechanism_ == QuotaMechanism::kTaskset) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(pinned_cpu_, &set);
    if (sched_setaffinity(pid, sizeof(set), &set) != 0) {
      return absl::InternalError(absl::StrCat("sched_setaffinity(", pid, ") failed: ", std::strerror(errno)));
    }
    setpriority(PRIO_PROCESS, static_cast<id_t>(pid), 10);
    return absl::OkStatus();
  }
  const std::string leaf = LeafDir(index);
  absl::MutexLock lock(&mu_);
  if (absl::Status s = MakeDir(leaf); !s.ok()) return s;
  if (std::find(created_.begin(), created_.end(), leaf) == created_.end()) created_.push_back(leaf);
  if (mechanism_ == QuotaMechanism::kCgroupV2) {
    if (absl::Status s = WriteToFile(leaf + "/cpu.max", CpuMaxValue(cpus, period_us_)); !s.ok()) return s;
  } else {
    if (absl::Status s = WriteToFile(leaf + "/cpu.cfs_period_us", absl::StrCat(period_us_)); !s.ok()) return s;
    if (absl::Status s = WriteToFile(leaf + "/cpu.cfs_quota_us", absl::StrCat(QuotaMicros(cpus, period_us_))); !s.ok()) {
      return s;
    }
  }
  return WriteToFile(leaf + "/cgroup.procs", absl::StrCat(pid));
}

ThrottleStats CpuQuota::Stats(int index) const {
  if (mechanism_ == QuotaMechanism::kTaskset) return ThrottleStats();
  return ThrottleStatsFromCpuStat(ParseKeyValueLines(ReadFileIfExists(LeafDir(index) + "/cpu.stat").value_or("")));
}

}  // namespace sluice::local
