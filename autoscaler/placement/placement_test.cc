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

TEST_CASE("interference: measured across a change of the local count, cap within tolerance") {
  PlacementConfig c = Hybrid();
  InterferenceState s = Learn({}, 0, 0.100);
  REQUIRE(s.reference_compute == Approx(0.100));
  CHECK(s.reference_local == 0);
  CHECK_FALSE(s.cap.has_value());

  // 4 local workers: compute 0.120 (20% slower, 5% per worker): at most 2 keep within 10%.
  InterferenceUpdate u = ObserveInterference(s, {kT0, 4, 0.120, true}, c);
  CHECK(u.interfering);
  CHECK(u.slowdown == Approx(0.20));
  REQUIRE(u.state.slowdown_per_worker.has_value());
  CHECK(*u.state.slowdown_per_worker == Approx(0.05));
  REQUIRE(u.state.cap.has_value());
  CHECK(*u.state.cap == 2);
  CHECK(u.state.Baseline() == Approx(0.100));
  CHECK_FALSE(u.learnt.empty());

  // The split then keeps 2 local, the rest remote, even with capacity for 8.
  Split split = SplitWorkers({6, 4, 8, 1, kT0}, u.state, c);
  CHECK(split.local == 2);
  CHECK(split.remote == 4);
  CHECK(split.reason == SplitReason::kInterference);

  // No measurable slowdown: no practical cap.
  InterferenceState quiet = Learn(s, 3, 0.1001);
  CHECK(quiet.cap.value_or(1000) >= 8);
  CHECK(SplitWorkers({6, 3, 8, 1, kT0}, quiet, c).local == 6);
}

TEST_CASE("interference: a change of compute at a constant local count is the trainers' own") {
  PlacementConfig c = Hybrid();
  InterferenceState s = Learn(Learn(Learn({}, 0, 0.100), 4, 0.120), 2, 0.110);  // k 0.05, cap 2, at 2 local
  REQUIRE(s.cap == 2);
  // The trainers' phase doubles their compute time with the same 2 local workers: not interference.
  InterferenceUpdate phase = ObserveInterference(s, {kT0 + absl::Minutes(3), 2, 0.220, true}, c);
  CHECK(phase.state.cap == s.cap);
  CHECK(phase.state.slowdown_per_worker == s.slowdown_per_worker);
  CHECK_FALSE(phase.interfering);
  CHECK(phase.state.reference_local == 2);
  CHECK(*phase.state.reference_compute > 0.110);
  // A jump beyond noise cannot be told from interference at the same count: a probe is due at once.
  CHECK(phase.state.learnt_at == absl::InfinitePast());
  Split probe = SplitWorkers({6, 2, 8, 1, kT0 + absl::Minutes(3)}, phase.state, c);
  CHECK(probe.probing);
  CHECK(probe.local == 3);
  // Drift within noise: nothing to probe.
  InterferenceUpdate small = ObserveInterference(s, {kT0 + absl::Minutes(3), 2, 0.111, true}, c);
  CHECK(small.state.learnt_at == s.learnt_at);
}

TEST_CASE("interference: from a reference with local workers, k relative to none") {
  InterferenceState s = Learn({}, 2, 0.100);
  CHECK(s.reference_local == 2);
  // 2 -> 6 local workers: 40% slower. With C = C0 (1 + kL): 1.4 = (1 + 6k) / (1 + 2k), k = 0.125.
  InterferenceState t = Learn(s, 6, 0.140);
  REQUIRE(t.slowdown_per_worker.has_value());
  CHECK(*t.slowdown_per_worker == Approx(0.125));
  CHECK(t.cap == 0);
  CHECK(t.Baseline() == Approx(0.140 / (1 + 0.125 * 6)));
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

TEST_CASE("probing: one more local worker after reprobe_after, backing off while probes confirm the cap") {
  PlacementConfig c = Hybrid();
  c.reprobe_after = absl::Minutes(10);
  InterferenceState s = Learn(Learn({}, 0, 0.100), 4, 0.120, kT0);  // cap 2, learnt at kT0
  CHECK(s.probes_confirmed == 0);
  CHECK(SplitWorkers({6, 2, 8, 1, kT0 + absl::Minutes(5)}, s, c).local == 2);
  Split probe = SplitWorkers({6, 2, 8, 1, kT0 + absl::Minutes(11)}, s, c);
  CHECK(probe.local == 3);
  CHECK(probe.probing);
  CHECK(probe.reason == SplitReason::kProbing);

  SECTION("the probe agrees with the model: the next probe waits twice as long") {
    InterferenceState confirmed = Learn(s, 3, 0.115, kT0 + absl::Minutes(12));
    CHECK(confirmed.cap == 2);
    CHECK(confirmed.probes_confirmed == 1);
    CHECK(SplitWorkers({6, 3, 8, 1, kT0 + absl::Minutes(25)}, confirmed, c).local == 2);
    CHECK(SplitWorkers({6, 2, 8, 1, kT0 + absl::Minutes(33)}, confirmed, c).local == 3);
  }
  SECTION("the trainers no longer suffer: the cap goes, local capacity is used again") {
    InterferenceState lifted = Learn(s, 3, 0.1199, kT0 + absl::Minutes(12));  // as slow as with 4
    CHECK(lifted.cap.value_or(100) >= 8);
    CHECK(lifted.probes_confirmed == 0);
    CHECK(SplitWorkers({6, 3, 8, 1, kT0 + absl::Minutes(12)}, lifted, c).local == 6);
  }
  SECTION("the cap does not bind: the probe is one local worker fewer") {
    InterferenceState quiet = Learn(Learn({}, 0, 0.100), 4, 0.102, kT0);  // 0.5% per worker: cap 20
    CHECK(SplitWorkers({6, 6, 8, 1, kT0 + absl::Minutes(5)}, quiet, c).local == 6);
    Split down = SplitWorkers({6, 6, 8, 1, kT0 + absl::Minutes(11)}, quiet, c);
    CHECK(down.local == 5);
    CHECK(down.probing);
  }
}

TEST_CASE("interference: a measurement that agrees refines k, one that disagrees replaces it") {
  InterferenceState s = Learn(Learn({}, 0, 0.100), 10, 0.120);  // k 2% from 10 workers
  REQUIRE(s.slowdown_per_worker == Approx(0.02));
  // 10 -> 9 shows a bit less than predicted (noise): k barely moves, the cap stays.
  InterferenceState noisy = Learn(s, 9, 0.1195);
  CHECK(*noisy.slowdown_per_worker == Approx(0.02).epsilon(0.2));
  CHECK(noisy.cap == s.cap);
  CHECK(noisy.probes_confirmed == 1);
  // 10 -> 9 shows 5% less: the interference changed.
  InterferenceState changed = Learn(s, 9, 0.114);
  CHECK(*changed.slowdown_per_worker > 0.04);
  CHECK(changed.probes_confirmed == 0);
}

TEST_CASE("cost: remote when a local worker's interference costs more accelerator time than remote CPU") {
  PlacementConfig c = Hybrid();
  c.worker_cpus = 4;
  c.cost.remote_cpu_hourly = 0.05;     // a remote worker: $0.20/h
  c.cost.accelerator_hourly = 32.77;   // an 8-GPU node
  c.interference_tolerance = 0.5;      // the tolerance alone would allow local workers
  InterferenceState s = Learn(Learn({}, 0, 0.100), 2, 0.102);  // 1% per worker: $0.33/h per worker > $0.20
  REQUIRE(s.slowdown_per_worker == Approx(0.01));
  Split split = SplitWorkers({4, 2, 8, 1, kT0}, s, c);
  CHECK(split.local == 0);
  CHECK(split.reason == SplitReason::kLocalCostsMore);
  // A while later, one local worker probes whether the trainers changed.
  Split probe = SplitWorkers({4, 0, 8, 1, kT0 + absl::Minutes(11)}, s, c);
  CHECK(probe.local == 1);
  CHECK(probe.probing);
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
