#include "autoscaler/placement/local_capacity.h"

#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <optional>
#include <vector>

#include "autoscaler/placement/placement.h"

namespace sluice::autoscaler {
namespace {

const absl::Time kT0 = absl::FromUnixSeconds(1'800'000'000);

CapacityNode Consumer(const std::string& name, int64_t allocatable, int64_t others) {
  return CapacityNode{name, true, allocatable, others, ""};
}

CapacityInput Hybrid(std::vector<CapacityNode> nodes, int64_t worker_cpu = 2000, double fraction = 0.5) {
  return CapacityInput{Placement::kHybrid, std::move(nodes), worker_cpu, fraction};
}

TEST_CASE("local capacity is the consumer nodes' unrequested CPU times the fraction", "[capacity]") {
  // Listed out of order, with a node that runs no consumer.
  CapacityInput in = Hybrid({Consumer("gpu-2", 16000, 4000), Consumer("gpu-1", 32000, 20500),
                             CapacityNode{"gpu-3", false, 64000, 1000, ""}});
  LocalCapacity cap = ComputeLocalCapacity(in);
  REQUIRE(cap.nodes.size() == 2);  // gpu-3 runs no consumer
  // gpu-1: (32000 - 20500) * 0.5 = 5750 -> 2 workers of 2 CPU; gpu-2: (16000 - 4000) * 0.5 = 6000 -> 3.
  CHECK(cap.nodes[0] == NodeCapacity{"gpu-1", 32000, 20500, 5750, 2, ""});
  CHECK(cap.nodes[1] == NodeCapacity{"gpu-2", 16000, 4000, 6000, 3, ""});
  CHECK(cap.total_workers == 5);
  CHECK(cap.WorkersOn("gpu-1") == 2);
  CHECK(cap.WorkersOn("gpu-2") == 3);
  CHECK(cap.WorkersOn("gpu-3") == 0);
  CHECK(cap.WorkersOn("nowhere") == 0);

  SECTION("LocalOnly has the same capacity, RemoteOnly none") {
    in.policy = Placement::kLocalOnly;
    CHECK(ComputeLocalCapacity(in) == cap);
    in.policy = Placement::kRemoteOnly;
    CHECK(ComputeLocalCapacity(in) == LocalCapacity{});
  }
  SECTION("an excluded node reports its slots and why, but adds none") {
    in.nodes[1].excluded_reason = "node is cordoned (spec.unschedulable)";
    LocalCapacity ex = ComputeLocalCapacity(in);
    REQUIRE(ex.nodes.size() == 2);
    CHECK(ex.nodes[0].workers == 2);
    CHECK(ex.nodes[0].excluded_reason == "node is cordoned (spec.unschedulable)");
    CHECK(ex.WorkersOn("gpu-1") == 0);
    CHECK(ex.total_workers == 3);
  }
}

TEST_CASE("per-node arithmetic: floors, full nodes, fractions", "[capacity]") {
  struct Row {
    int64_t allocatable, others, worker_cpu;
    double fraction;
    int64_t budget, workers;
  };
  const Row rows[] = {
      {32000, 0, 2000, 0.5, 16000, 8},    // an empty 32-CPU node, half of it
      {32000, 8500, 2000, 0.5, 11750, 5},  // issue 9 §4: a trainer of 8 CPUs and a 0.5-CPU daemon
      {32000, 8500, 2000, 1.0, 23500, 11},
      {96000, 16000, 8000, 1.0, 80000, 10},  // a TPU VM: 96 vCPUs, 16 for the trainer, 8-CPU workers
      {1999, 0, 2000, 1.0, 1999, 0},         // less than one worker
      {2000, 0, 2000, 1.0, 2000, 1},         // exactly one
      {3333, 0, 1000, 0.3, 999, 0},          // the budget is floored before dividing
      {16000, 16000, 2000, 0.5, 0, 0},       // full
      {16000, 40000, 2000, 0.5, 0, 0},       // over-committed: never negative
      {16000, 0, 0, 0.5, 8000, 0},           // no worker CPU: no worker fits
  };
  for (const Row& r : rows) {
    LocalCapacity cap = ComputeLocalCapacity(Hybrid({Consumer("n", r.allocatable, r.others)}, r.worker_cpu, r.fraction));
    INFO("allocatable " << r.allocatable << " others " << r.others << " worker " << r.worker_cpu << " fraction "
                        << r.fraction);
    REQUIRE(cap.nodes.size() == 1);
    CHECK(cap.nodes[0].budget_millis == r.budget);
    CHECK(cap.nodes[0].workers == r.workers);
    CHECK(cap.total_workers == r.workers);
  }
}

TEST_CASE("malformed capacity input gives no more capacity than a sane reading", "[capacity]") {
  SECTION("negative CPU figures count as 0") {
    LocalCapacity cap = ComputeLocalCapacity(Hybrid({Consumer("a", -4000, 0), Consumer("b", 8000, -4000)}));
    CHECK(cap.nodes[0] == NodeCapacity{"a", 0, 0, 0, 0, ""});
    CHECK(cap.nodes[1] == NodeCapacity{"b", 8000, 0, 4000, 2, ""});
    CHECK(cap.total_workers == 2);
  }
  SECTION("a negative worker CPU fits no worker") {
    CHECK(ComputeLocalCapacity(Hybrid({Consumer("a", 8000, 0)}, -2000)).total_workers == 0);
  }
  SECTION("a fraction outside (0, 1] is clamped, NaN counts as 0") {
    CHECK(ComputeLocalCapacity(Hybrid({Consumer("a", 8000, 0)}, 2000, 3.0)).total_workers == 4);
    CHECK(ComputeLocalCapacity(Hybrid({Consumer("a", 8000, 0)}, 2000, -1.0)).total_workers == 0);
    CHECK(ComputeLocalCapacity(Hybrid({Consumer("a", 8000, 0)}, 2000, std::nan(""))).total_workers == 0);
    CHECK(ComputeLocalCapacity(Hybrid({Consumer("a", 8000, 0)}, 2000, std::numeric_limits<double>::infinity()))
              .total_workers == 4);
  }
  SECTION("a node listed twice counts once, by its first entry") {
    LocalCapacity cap = ComputeLocalCapacity(Hybrid({Consumer("a", 8000, 0), Consumer("a", 64000, 0)}));
    REQUIRE(cap.nodes.size() == 1);
    CHECK(cap.total_workers == 2);
    // A non-consumer entry first hides a later consumer entry of the same name.
    CHECK(ComputeLocalCapacity(Hybrid({CapacityNode{"a", false, 8000, 0, ""}, Consumer("a", 8000, 0)})).nodes.empty());
  }
  SECTION("no nodes: no capacity") { CHECK(ComputeLocalCapacity(Hybrid({})) == LocalCapacity{}); }
}

TEST_CASE("the split by capacity: RemoteOnly, LocalOnly, Hybrid with and without a local share", "[split]") {
  struct Row {
    Placement policy;
    int64_t replicas;
    std::optional<int64_t> local;
    int64_t capacity;
    CapacitySplit want;  // local, remote, limit, wanted_local
  };
  const auto kNone = CapacityLimit::kNone;
  const auto kExhausted = CapacityLimit::kLocalCapacityExhausted;
  const auto kCapped = CapacityLimit::kLocalSplitCapped;
  const Row rows[] = {
      {Placement::kRemoteOnly, 5, std::nullopt, 8, {0, 5, kNone, 0}},
      {Placement::kRemoteOnly, 5, 3, 8, {0, 5, kNone, 0}},  // a local share means nothing here
      {Placement::kLocalOnly, 5, std::nullopt, 8, {5, 0, kNone, 5}},
      {Placement::kLocalOnly, 6, std::nullopt, 2, {2, 0, kExhausted, 6}},  // the rest is not run
      {Placement::kLocalOnly, 0, std::nullopt, 0, {0, 0, kNone, 0}},
      // Hybrid without a local share: local capacity first, the rest remote, never "limited".
      {Placement::kHybrid, 5, std::nullopt, 8, {5, 0, kNone, 5}},
      {Placement::kHybrid, 8, std::nullopt, 5, {5, 3, kNone, 8}},
      {Placement::kHybrid, 5, std::nullopt, 0, {0, 5, kNone, 5}},
      {Placement::kHybrid, 0, std::nullopt, 4, {0, 0, kNone, 0}},
      // Hybrid with a local share (the autoscaler's workers.local).
      {Placement::kHybrid, 4, 1, 6, {1, 3, kNone, 1}},
      {Placement::kHybrid, 4, 4, 2, {2, 2, kCapped, 4}},
      {Placement::kHybrid, 4, 0, 6, {0, 4, kNone, 0}},
      {Placement::kHybrid, 4, 9, 6, {4, 0, kNone, 4}},    // a share above replicas is replicas
      {Placement::kHybrid, 4, 9, 3, {3, 1, kCapped, 4}},
      {Placement::kHybrid, 3, 3, 3, {3, 0, kNone, 3}},    // exactly at capacity: not capped
      // Nonsense counts count as 0.
      {Placement::kHybrid, 4, -2, 6, {0, 4, kNone, 0}},
      {Placement::kHybrid, -3, std::nullopt, 6, {0, 0, kNone, 0}},
      {Placement::kHybrid, 4, std::nullopt, -1, {0, 4, kNone, 4}},
      {Placement::kLocalOnly, 4, std::nullopt, -1, {0, 0, kExhausted, 4}},
  };
  for (const Row& r : rows) {
    INFO(PlacementName(r.policy) << " replicas " << r.replicas << " local " << r.local.value_or(-99) << " capacity "
                                 << r.capacity);
    CapacitySplit s = SplitByCapacity({r.policy, r.replicas, r.local, r.capacity});
    CHECK(s.local == r.want.local);
    CHECK(s.remote == r.want.remote);
    CHECK(s.limit == r.want.limit);
    CHECK(s.wanted_local == r.want.wanted_local);
  }
  CHECK(std::string(CapacityLimitName(kExhausted)) == "LocalCapacityExhausted");
  CHECK(std::string(CapacityLimitName(kCapped)) == "LocalSplitCapped");
  CHECK(std::string(CapacityLimitName(kNone)).empty());
}

TEST_CASE("after named removals a Hybrid split without a local share keeps the pools", "[split]") {
  struct Row {
    std::optional<int64_t> local;
    int64_t replicas, capacity, local_left, remote_left;
    int64_t want_local, want_remote;
  };
  const Row rows[] = {
      // 3 local + 3 remote, capacity 5, replicas 6 -> 4 after naming two remote workers: the
      // plain split would be 4 local (one more local, one remote deleted); kept: 3 local, 1 remote.
      {std::nullopt, 4, 5, 3, 1, 3, 1},
      // A shortfall (the named went and replicas stayed) is filled local first, within capacity.
      {std::nullopt, 6, 5, 3, 1, 5, 1},
      {std::nullopt, 6, 4, 3, 1, 4, 2},
      {std::nullopt, 4, 5, 0, 0, 4, 0},
      // More left than replicas, or more local left than the split's local share: the plain split.
      {std::nullopt, 3, 5, 3, 1, 3, 0},
      {std::nullopt, 4, 2, 3, 1, 2, 2},
      // With a local share the share rules.
      {2, 4, 5, 3, 1, 2, 2},
  };
  for (const Row& r : rows) {
    INFO("local " << r.local.value_or(-1) << " replicas " << r.replicas << " capacity " << r.capacity << " left "
                  << r.local_left << "+" << r.remote_left);
    CapacitySplit s = SplitAfterNamedRemovals({Placement::kHybrid, r.replicas, r.local, r.capacity}, r.local_left,
                                              r.remote_left);
    CHECK(s.local == r.want_local);
    CHECK(s.remote == r.want_remote);
  }
  // Other policies: the plain split.
  CHECK(SplitAfterNamedRemovals({Placement::kLocalOnly, 4, std::nullopt, 5}, 1, 0) ==
        SplitByCapacity({Placement::kLocalOnly, 4, std::nullopt, 5}));
  CHECK(SplitAfterNamedRemovals({Placement::kRemoteOnly, 4, std::nullopt, 5}, 0, 1) ==
        SplitByCapacity({Placement::kRemoteOnly, 4, std::nullopt, 5}));
}

// The autoscaler decides workers.local with SplitWorkers from status.localCapacity; the operator
// carries it out with SplitByCapacity from the same capacity. Over a grid of counts and learnt
// states, the operator runs exactly the autoscaler's split, never capped, and with nothing learnt
// the autoscaler places exactly as the operator does on its own (no workers.local).
TEST_CASE("the operator carries out the autoscaler's Hybrid split unchanged", "[split][agreement]") {
  PlacementConfig config;
  config.policy = Placement::kHybrid;
  config.interference_tolerance = 0.10;
  config.reprobe_after = absl::Minutes(10);
  auto learn = [&](InterferenceState s, int32_t local, double compute) {
    return ObserveInterference(s, {kT0, local, compute, true}, config).state;
  };
  PlacementConfig priced = config;
  priced.worker_cpus = 4;
  priced.cost.remote_cpu_hourly = 0.05;
  priced.cost.accelerator_hourly = 32.77;
  priced.interference_tolerance = 0.5;

  struct Learnt {
    const char* name;
    InterferenceState state;
    const PlacementConfig* config;
  };
  const InterferenceState capped = learn(learn({}, 0, 0.100), 4, 0.120);  // cap 2
  const std::vector<Learnt> states = {
      {"nothing learnt", {}, &config},
      {"reference only", learn({}, 0, 0.100), &config},
      {"cap 2", capped, &config},
      {"no measurable slowdown", learn(learn({}, 0, 0.100), 4, 0.1001), &config},
      {"probe at 3 in progress", StartProbe(capped, 3, kT0), &config},
      {"probe at 12 in progress", StartProbe(capped, 12, kT0), &config},
      {"local costs more", learn(learn({}, 0, 0.100), 2, 0.102), &priced},
  };
  int checked = 0;
  for (const Learnt& l : states) {
    for (absl::Duration since : {absl::ZeroDuration(), absl::Minutes(11)}) {  // before and after a re-probe is due
      for (int32_t replicas = 0; replicas <= 12; ++replicas) {
        for (int32_t capacity = 0; capacity <= 10; ++capacity) {
          for (int32_t current_local = 0; current_local <= replicas; ++current_local) {
            Split split = SplitWorkers({replicas, current_local, capacity, 1, kT0 + since}, l.state, *l.config);
            INFO(l.name << " +" << absl::FormatDuration(since) << ": replicas " << replicas << " capacity " << capacity
                        << " current local " << current_local << ": " << split.why);
            REQUIRE(split.local + split.remote == replicas);
            const CapacitySplit carried = SplitByCapacity({Placement::kHybrid, replicas, split.local, capacity});
            REQUIRE(carried.local == split.local);
            REQUIRE(carried.remote == split.remote);
            REQUIRE(carried.limit == CapacityLimit::kNone);
            if (l.state == InterferenceState{}) {
              REQUIRE(split.local == SplitByCapacity({Placement::kHybrid, replicas, std::nullopt, capacity}).local);
            }
            ++checked;
          }
        }
      }
    }
  }
  CHECK(checked > 10000);
}

}  // namespace
}  // namespace sluice::autoscaler
