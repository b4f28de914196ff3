// PlanEncodedCache: which task pipelines a worker serves from encoded elements, with how many
// passes, and what it runs instead.
#include "dataplane/worker/encoded_cache.h"

#include <catch2/catch.hpp>

#include "dataplane/worker/task_runner.h"
#include "dataplane/worker/worker_test_util.h"

namespace sluice::worker {
namespace {

// The canonical task pipeline of `yaml`, as a worker plans it.
std::optional<EncodedCachePlan> Plan(const std::string& yaml, service::ShardingPolicy sharding = service::SHARDING_OFF,
                                     int num_workers = 1) {
  service::TaskDef task = testing::MakeTask(1, yaml, sharding);
  task.set_num_workers(num_workers);
  auto def = TaskPipelineDef(task);
  REQUIRE(def.ok());
  return PlanEncodedCache(*def, sharding);
}

std::vector<std::string> Kinds(const pipeline::PipelineDef& def) {
  std::vector<std::string> kinds;
  for (const auto& step : def.steps()) kinds.push_back(step.kind());
  return kinds;
}

TEST_CASE("worker_encoded_cache plans a trailing cache and its repeats, passes the product of the counts") {
  const std::string source = "source: {range: {stop: 10}}\n";
  auto plan = Plan(source + "steps:\n  - map: {ops: [{reshape: {field: value, shape: [1]}}]}\n  - cache: {}\n  - repeat: {count: 3}\n");
  REQUIRE(plan.has_value());
  CHECK(plan->passes == 3);
  CHECK(Kinds(plan->head) == std::vector<std::string>{"map"});

  plan = Plan(source + "steps:\n  - cache: {}\n  - repeat: {count: 2}\n  - repeat: {count: 5}\n");
  REQUIRE(plan.has_value());
  CHECK(plan->passes == 10);
  CHECK(plan->head.steps().empty());

  plan = Plan(source + "steps:\n  - cache: {}\n  - repeat: {}\n");  // count defaults to -1
  REQUIRE(plan.has_value());
  CHECK(plan->passes == -1);

  plan = Plan(source + "steps:\n  - cache: {}\n  - repeat: {count: -1}\n  - repeat: {count: 0}\n");
  REQUIRE(plan.has_value());
  CHECK(plan->passes == 0);  // an empty inner run ends the outer repeat too

  plan = Plan(source + "steps:\n  - cache: {}\n  - repeat: {count: 4294967296}\n  - repeat: {count: 4294967296}\n");
  REQUIRE(plan.has_value());
  CHECK(plan->passes == -1);  // past int64: as good as without end

  plan = Plan(source + "steps:\n  - cache: {}\n");  // replayed by the next task epoch
  REQUIRE(plan.has_value());
  CHECK(plan->passes == 1);

  // An earlier cache stays in the head; only the trailing one is planned.
  plan = Plan(source + "steps:\n  - cache: {}\n  - repeat: {count: 2}\n  - take: {count: 15}\n  - cache: {}\n  - repeat: {count: 3}\n");
  REQUIRE(plan.has_value());
  CHECK(plan->passes == 3);
  CHECK(Kinds(plan->head) == std::vector<std::string>{"cache", "repeat", "take"});

  CHECK(Plan(source + "steps:\n  - cache: {}\n  - repeat: {count: 2}\n", service::SHARDING_FILE, 2).has_value());
}

TEST_CASE("worker_encoded_cache leaves other pipelines as written") {
  const std::string source = "source: {range: {stop: 10}}\n";
  CHECK_FALSE(Plan(source).has_value());
  CHECK_FALSE(Plan(source + "steps:\n  - repeat: {count: 2}\n").has_value());
  CHECK_FALSE(Plan(source + "steps:\n  - cache: {}\n  - repeat: {count: 2}\n  - take: {count: 5}\n").has_value());
  CHECK_FALSE(Plan(source + "steps:\n  - cache: {}\n  - prefetch: {buffer: 2}\n  - repeat: {count: 2}\n").has_value());
  // A bounded cache may give up mid-pass and read its input again.
  CHECK_FALSE(Plan(source + "steps:\n  - cache: {max_bytes: 1000000}\n  - repeat: {count: 2}\n").has_value());
  // DYNAMIC: repeat resets the dispatcher's splits between passes. DATA: a `shard` step follows.
  const std::string cached = source + "steps:\n  - cache: {}\n  - repeat: {count: 2}\n";
  CHECK_FALSE(Plan(cached, service::SHARDING_DYNAMIC).has_value());
  CHECK_FALSE(Plan(cached, service::SHARDING_DATA, 2).has_value());
}

}  // namespace
}  // namespace sluice::worker
