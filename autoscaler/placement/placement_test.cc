#include "autoscaler/placement/placement.h"

#include <catch2/catch.hpp>

namespace sluice::autoscaler {
namespace {

const absl::Time kT0 = absl::FromUnixSeconds(1'800'000'000);

PlacementConfig Hybrid() {
  PlacementConfig c;
  c.policy = Placement::kHybrid;
  c.interference_tolerance = 0.10;
  return c;
}

InterferenceState Learn(InterferenceState s, int32_t local, double compute, absl::Time at = kT0,
                        const PlacementConfig& c = Hybrid()) {
  return ObserveInterference(s, {at, local, compute, true}, c).state;
}

TEST_CASE("split by policy: RemoteOnly, LocalOnly, Hybrid local capacity first") {
  PlacementConfig c = Hybrid();
  struct Row {
    Placement policy;
    int32_t replicas;
    std::optional<int32_t> capacity;
    int32_t current_local;
    int32_t local;
    SplitReason reason;
  };
  const Row rows[] = {
      {Placement::kRemoteOnly, 5, 8, 0, 0, SplitReason::kRemoteOnly},
      {Placement::kLocalOnly, 5, 2, 0, 5, SplitReason::kLocalOnly},
      {Placement::kHybrid, 5, 8, 0, 5, SplitReason::kLocalFirst},
      {Placement::kHybrid, 5, 3, 0, 3, SplitReason::kCapacityLimited},
      {Placement::kHybrid, 5, 0, 2, 0, SplitReason::kCapacityLimited},  // capacity vanished: all remote
      {Placement::kHybrid, 5, std::nullopt, 2, 2, SplitReason::kCapacityUnknown},
      {Placement::kHybrid, 1, std::nullopt, 4, 1, SplitReason::kCapacityUnknown},
      {Placement::kHybrid, 0, 4, 0, 0, SplitReason::kLocalFirst},
  };
  for (const Row& r : rows) {
    c.policy = r.policy;
    Split s = SplitWorkers({r.replicas, r.current_local, r.capacity, 1, kT0}, {}, c);
    INFO(PlacementName(r.policy) << " replicas " << r.replicas << ": " << s.why);
    CHECK(s.local == r.local);
    CHECK(s.remote == r.replicas - r.local);
    CHECK(s.reason == r.reason);
  }
}

TEST_CASE("interference: baseline without local workers, slowdown per local worker, cap within tolerance") {
  PlacementConfig c = Hybrid();
  InterferenceState s = Learn({}, 0, 0.100);
  REQUIRE(s.baseline_compute == Approx(0.100));
  CHECK_FALSE(s.baseline_provisional);
  CHECK_FALSE(s.cap.has_value());

  // 4 local workers: compute 0.120 (20% slower, 5% per worker): at most 2 keep within 10%.
  InterferenceUpdate u = ObserveInterference(s, {kT0, 4, 0.120, true}, c);
  CHECK(u.interfering);
  CHECK(u.slowdown == Approx(0.20));
  REQUIRE(u.state.slowdown_per_worker.has_value());
  CHECK(*u.state.slowdown_per_worker == Approx(0.05));
  REQUIRE(u.state.cap.has_value());
  CHECK(*u.state.cap == 2);
  CHECK_FALSE(u.learnt.empty());

  // The split then keeps 2 local, the rest remote, even with capacity for 8.
  Split split = SplitWorkers({6, 4, 8, 1, kT0}, u.state, c);
  CHECK(split.local == 2);
  CHECK(split.remote == 4);
  CHECK(split.reason == SplitReason::kInterference);

  // No measurable slowdown: no cap.
  InterferenceState quiet = Learn(s, 3, 0.1001);
  CHECK(quiet.cap.value_or(1000) >= 8);
  CHECK(SplitWorkers({6, 3, 8, 1, kT0}, quiet, c).local == 6);
}

TEST_CASE("interference: within the cap and tolerance an observation confirms, above it re-learns") {
  InterferenceState s = Learn(Learn({}, 0, 0.100), 4, 0.120, kT0);  // cap 2
  InterferenceState confirmed = Learn(s, 2, 0.108, kT0 + absl::Minutes(3));
  CHECK(confirmed == s);
  InterferenceState worse = Learn(s, 2, 0.130, kT0 + absl::Minutes(3));  // 30% with 2
  CHECK(worse.cap == 0);  // 15% per worker: none fits
  CHECK(worse.learnt_at == kT0 + absl::Minutes(3));
}

TEST_CASE("interference: unsettled or unknown observations teach nothing") {
  PlacementConfig c = Hybrid();
  InterferenceState s = Learn({}, 0, 0.100);
  InterferenceUpdate unsettled = ObserveInterference(s, {kT0, 4, 0.200, false}, c);
  CHECK(unsettled.state == s);
  CHECK(unsettled.learnt.empty());
  InterferenceUpdate unknown = ObserveInterference(s, {kT0, 4, std::nullopt, true}, c);
  CHECK(unknown.state == s);
}

TEST_CASE("interference: a provisional baseline when never observed without local workers") {
  InterferenceState s = Learn({}, 2, 0.100);
  CHECK(s.baseline_provisional);
  CHECK(s.baseline_local == 2);
  // 6 local workers: 0.140 is 40% above the provisional baseline, 10% per extra worker: one extra fits.
  InterferenceState t = Learn(s, 6, 0.140);
  REQUIRE(t.cap.has_value());
  CHECK(*t.cap == 3);
  // A clean observation without local workers replaces the provisional baseline.
  InterferenceState clean = Learn(t, 0, 0.090);
  CHECK_FALSE(clean.baseline_provisional);
  CHECK(clean.baseline_compute == Approx(0.090));
}

TEST_CASE("interference shift both ways: capacity appearing, probing after reprobe_after") {
  PlacementConfig c = Hybrid();
  c.reprobe_after = absl::Minutes(10);
  InterferenceState s = Learn(Learn({}, 0, 0.100), 4, 0.120, kT0);  // cap 2
  // Before reprobe_after: 2 local.
  CHECK(SplitWorkers({6, 2, 8, 1, kT0 + absl::Minutes(5)}, s, c).local == 2);
  // After it: one more, to learn whether the trainers changed.
  Split probe = SplitWorkers({6, 2, 8, 1, kT0 + absl::Minutes(11)}, s, c);
  CHECK(probe.local == 3);
  CHECK(probe.probing);
  CHECK(probe.reason == SplitReason::kProbing);
  // The trainers no longer suffer at 3: the cap goes, local capacity is used again.
  InterferenceState relearnt = Learn(s, 3, 0.101, kT0 + absl::Minutes(12));
  CHECK(relearnt.cap.value_or(100) >= 8);
  CHECK(SplitWorkers({6, 3, 8, 1, kT0 + absl::Minutes(12)}, relearnt, c).local == 6);
}

TEST_CASE("cost: remote when a local worker's interference costs more accelerator time than remote CPU") {
  PlacementConfig c = Hybrid();
  c.worker_cpus = 4;
  c.cost.remote_cpu_hourly = 0.05;     // a remote worker: $0.20/h
  c.cost.accelerator_hourly = 32.77;   // an 8-GPU node
  c.interference_tolerance = 0.5;      // the tolerance alone would allow local workers
  InterferenceState s = Learn(Learn({}, 0, 0.100), 2, 0.102);  // 1% per worker: $0.33/h per worker > $0.20
  Split split = SplitWorkers({4, 2, 8, 1, kT0}, s, c);
  CHECK(split.local == 0);
  CHECK(split.reason == SplitReason::kLocalCostsMore);
  // Cheaper accelerators: local wins again.
  c.cost.accelerator_hourly = 4.96;
  CHECK(SplitWorkers({4, 2, 8, 1, kT0}, s, c).local == 4);
}

TEST_CASE("removals: not ready first, then the costliest, then the newest, per pool") {
  std::vector<WorkerCandidate> w = {
      {"r-0", false, true, 1.0, kT0},
      {"r-1", false, true, 1.0, kT0 + absl::Seconds(5)},
      {"r-2", false, false, 1.0, kT0},
      {"r-3", false, true, 3.0, kT0},
      {"l-0", true, true, 0.0, kT0},
      {"l-1", true, true, 0.0, kT0 + absl::Seconds(1)},
  };
  CHECK(ChooseRemovals(w, 0, 1) == std::vector<std::string>{"r-2"});
  CHECK(ChooseRemovals(w, 0, 3) == std::vector<std::string>{"r-2", "r-3", "r-1"});
  CHECK(ChooseRemovals(w, 1, 0) == std::vector<std::string>{"l-1"});
  CHECK(ChooseRemovals(w, 5, 0).size() == 2);  // no more than the pool has
  CHECK(ChooseRemovals(w, 0, 0).empty());
}

}  // namespace
}  // namespace sluice::autoscaler
