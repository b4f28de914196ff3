#include "dataplane/client/task_selection.h"

#include <catch2/catch.hpp>

namespace sluice::client {
namespace {

service::TaskInfo Task(int64_t id, const std::string& host) {
  service::TaskInfo t;
  t.set_task_id(id);
  t.set_worker_host(host);
  t.set_worker_address(host + ":1");
  return t;
}

using V = std::vector<int64_t>;

TaskSelectionInput In(service::TargetWorkers target, service::ShardingPolicy sharding, bool coordinated,
                      std::string host) {
  TaskSelectionInput in;
  in.target_workers = target;
  in.sharding = sharding;
  in.coordinated = coordinated;
  in.client_host = std::move(host);
  return in;
}

TEST_CASE("client_locality: AUTO prefers local tasks under SHARDING_OFF") {
  std::vector<service::TaskInfo> tasks = {Task(1, "a"), Task(2, "b"), Task(3, "a")};
  CHECK(SelectTasks(tasks, In(service::TARGET_WORKERS_AUTO, service::SHARDING_OFF, false, "a")) == V{1, 3});
  // No local task: fall back to all.
  CHECK(SelectTasks(tasks, In(service::TARGET_WORKERS_AUTO, service::SHARDING_OFF, false, "c")) == V{1, 2, 3});
}

TEST_CASE("client_locality: AUTO reads every task when each holds a distinct shard") {
  std::vector<service::TaskInfo> tasks = {Task(1, "a"), Task(2, "b")};
  for (auto sharding : {service::SHARDING_DYNAMIC, service::SHARDING_FILE, service::SHARDING_DATA}) {
    CHECK(SelectTasks(tasks, In(service::TARGET_WORKERS_AUTO, sharding, false, "a")) == V{1, 2});
  }
}

TEST_CASE("client_locality: LOCAL reads only local tasks, possibly none - ANY reads all") {
  std::vector<service::TaskInfo> tasks = {Task(1, "a"), Task(2, "b")};
  CHECK(SelectTasks(tasks, In(service::TARGET_WORKERS_LOCAL, service::SHARDING_DYNAMIC, false, "b")) == V{2});
  CHECK(SelectTasks(tasks, In(service::TARGET_WORKERS_LOCAL, service::SHARDING_DYNAMIC, false, "z")).empty());
  CHECK(SelectTasks(tasks, In(service::TARGET_WORKERS_ANY, service::SHARDING_DYNAMIC, false, "a")) == V{1, 2});
}

TEST_CASE("client_locality: coordinated reads ignore locality - empty host is never local") {
  std::vector<service::TaskInfo> tasks = {Task(1, "a"), Task(2, "b")};
  CHECK(SelectTasks(tasks, In(service::TARGET_WORKERS_AUTO, service::SHARDING_OFF, true, "a")) == V{1, 2});
  CHECK_FALSE(IsLocalTask(Task(3, ""), ""));
}

}  // namespace
}  // namespace sluice::client
