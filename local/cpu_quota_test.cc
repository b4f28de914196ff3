#include "local/cpu_quota.h"

#include <unistd.h>

#include <catch2/catch.hpp>

#include <map>

namespace sluice::local {
namespace {

// /proc/self/mounts of this kind of machine: cgroup v1 controllers plus a cgroup2 "unified" mount.
const char* kHybridMounts =
    "overlay / overlay rw,relatime,lowerdir=/a 0 0\n"
    "tmpfs /sys/fs/cgroup tmpfs rw,relatime,mode=755 0 0\n"
    "cgroup /sys/fs/cgroup/cpu cgroup rw,relatime,cpu 0 0\n"
    "cgroup /sys/fs/cgroup/cpuacct cgroup rw,relatime,cpuacct 0 0\n"
    "cgroup2 /sys/fs/cgroup/unified cgroup2 rw,relatime 0 0\n";
const char* kV2Mounts = "cgroup2 /sys/fs/cgroup cgroup2 rw,nosuid,nodev,noexec,relatime,nsdelegate 0 0\n";

FileProbe Files(std::map<std::string, std::string> files) {
  return [files](const std::string& path) -> std::optional<std::string> {
    auto it = files.find(path);
    if (it == files.end()) return std::nullopt;
    return it->second;
  };
}

TEST_CASE("ParseCgroupMounts keeps cgroup entries, their options, and decodes escapes") {
  auto m = ParseCgroupMounts(kHybridMounts);
  REQUIRE(m.size() == 3);
  CHECK(m[0].fstype == "cgroup");
  CHECK(m[0].path == "/sys/fs/cgroup/cpu");
  CHECK(m[0].options == std::vector<std::string>{"rw", "relatime", "cpu"});
  CHECK(m[2].fstype == "cgroup2");
  CHECK(m[2].path == "/sys/fs/cgroup/unified");
  auto escaped = ParseCgroupMounts("cgroup2 /mnt/my\\040cgroups cgroup2 rw 0 0\n");
  REQUIRE(escaped.size() == 1);
  CHECK(escaped[0].path == "/mnt/my cgroups");
  CHECK(ParseCgroupMounts("").empty());
  CHECK(ParseCgroupMounts("garbage\ncgroup2 short\n").empty());
}

TEST_CASE("ListsController matches whole names only") {
  CHECK(ListsController("cpuset cpu io memory pids\n", "cpu"));
  CHECK(!ListsController("cpuset cpuacct io", "cpu"));
  CHECK(!ListsController("", "cpu"));
}

TEST_CASE("ChooseQuotaMechanism prefers cgroup v2 with the cpu controller") {
  auto choice = ChooseQuotaMechanism(ParseCgroupMounts(kV2Mounts),
                                     Files({{"/sys/fs/cgroup/cgroup.controllers", "cpuset cpu io memory pids\n"}}));
  CHECK(choice.mechanism == QuotaMechanism::kCgroupV2);
  CHECK(choice.mount == "/sys/fs/cgroup");
}

TEST_CASE("ChooseQuotaMechanism falls back to cgroup v1 when v2 lacks cpu (hybrid hosts)") {
  auto choice = ChooseQuotaMechanism(ParseCgroupMounts(kHybridMounts),
                                     Files({{"/sys/fs/cgroup/unified/cgroup.controllers", "hugetlb\n"},
                                            {"/sys/fs/cgroup/cpu/cpu.cfs_quota_us", "-1\n"}}));
  CHECK(choice.mechanism == QuotaMechanism::kCgroupV1);
  CHECK(choice.mount == "/sys/fs/cgroup/cpu");
  REQUIRE(choice.notes.size() == 1);
  CHECK(choice.notes[0].find("does not offer the cpu controller") != std::string::npos);
  CHECK(choice.notes[0].find("hugetlb") != std::string::npos);
}

TEST_CASE("ChooseQuotaMechanism ends at taskset, explaining why") {
  auto none = ChooseQuotaMechanism({}, Files({}));
  CHECK(none.mechanism == QuotaMechanism::kTaskset);
  CHECK(none.notes == std::vector<std::string>{"no cgroup v2 mount", "no cgroup v1 mount with the cpu controller"});
  // A v1 cpu mount without CFS quota files (kernel without CONFIG_CFS_BANDWIDTH).
  auto no_cfs = ChooseQuotaMechanism(ParseCgroupMounts(kHybridMounts), Files({}));
  CHECK(no_cfs.mechanism == QuotaMechanism::kTaskset);
  CHECK(no_cfs.notes.back().find("no cpu.cfs_quota_us") != std::string::npos);
  // Mechanisms found unusable (e.g. no permission) are skipped.
  auto skipped = ChooseQuotaMechanism(ParseCgroupMounts(kV2Mounts),
                                      Files({{"/sys/fs/cgroup/cgroup.controllers", "cpu"}}), {QuotaMechanism::kCgroupV2});
  CHECK(skipped.mechanism == QuotaMechanism::kTaskset);
}

TEST_CASE("Quota values") {
  CHECK(CpuMaxValue(0.2, 100000) == "20000 100000");
  CHECK(QuotaMicros(0.2, 100000) == 20000);
  CHECK(QuotaMicros(0.001, 100000) == 1000);  // the kernel's minimum
  CHECK(QuotaMicros(1.5, 100000) == 150000);
  CHECK(MechanismName(QuotaMechanism::kCgroupV1) == "cgroup-v1");
}

TEST_CASE("cpu.stat of either version gives throttling counters") {
  auto v2 = ThrottleStatsFromCpuStat(ParseKeyValueLines(
      "usage_usec 5000\nuser_usec 4000\nsystem_usec 1000\nnr_periods 40\nnr_throttled 12\nthrottled_usec 250000\n"));
  CHECK(v2.periods == 40);
  CHECK(v2.throttled_periods == 12);
  CHECK(v2.throttled_seconds == Approx(0.25));
  auto v1 = ThrottleStatsFromCpuStat(ParseKeyValueLines("nr_periods 10\nnr_throttled 3\nthrottled_time 1500000000\n"));
  CHECK(v1.throttled_periods == 3);
  CHECK(v1.throttled_seconds == Approx(1.5));
  auto junk = ParseKeyValueLines("nr_periods x\nthree fields here\n\nok 7");
  CHECK(junk.size() == 1);
  CHECK(junk["ok"] == 7);
}

TEST_CASE("The taskset fallback pins a process and reports no throttling") {
  auto q = CpuQuota::Create(0.2, "unused", /*allow_cgroups=*/false);
  CHECK(q->mechanism() == QuotaMechanism::kTaskset);
  CHECK(q->Describe().find("taskset") != std::string::npos);
  REQUIRE(!q->notes().empty());
  CHECK(q->notes()[0].find("taskset was asked for") != std::string::npos);
  CHECK(q->Stats(0).periods == 0);
  CHECK(absl::IsInvalidArgument(q->Apply(::getpid(), 0, 0)));  // a limit must be > 0
  CHECK(absl::IsInvalidArgument(q->Apply(::getpid(), 0, -1)));
}

}  // namespace
}  // namespace sluice::local
