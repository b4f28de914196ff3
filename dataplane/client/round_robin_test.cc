#include "dataplane/client/round_robin.h"

#include <catch2/catch.hpp>

namespace sluice::client {
namespace {

service::TaskInfo Task(int64_t id, int64_t starting_round) {
  service::TaskInfo t;
  t.set_task_id(id);
  t.set_starting_round(starting_round);
  return t;
}

TEST_CASE("client_round_robin: rounds rotate over tasks ordered by task_id") {
  std::vector<service::TaskInfo> tasks = {Task(7, 0), Task(3, 0), Task(5, 0)};
  CHECK(TaskForRound(tasks, 0) == 3);
  CHECK(TaskForRound(tasks, 1) == 5);
  CHECK(TaskForRound(tasks, 2) == 7);
  CHECK(TaskForRound(tasks, 3) == 3);
  CHECK(TaskForRound(tasks, 301) == 5);
}

TEST_CASE("client_round_robin: a late task joins at its starting round") {
  std::vector<service::TaskInfo> tasks = {Task(1, 0), Task(2, 0), Task(3, 18)};
  CHECK(TaskForRound(tasks, 16) == 1);  // 16 mod 2
  CHECK(TaskForRound(tasks, 17) == 2);
  CHECK(TaskForRound(tasks, 18) == 1);  // 18 mod 3 = 0
  CHECK(TaskForRound(tasks, 19) == 2);
  CHECK(TaskForRound(tasks, 20) == 3);
}

TEST_CASE("client_round_robin: no task before any has started") {
  CHECK_FALSE(TaskForRound({}, 0).has_value());
  CHECK_FALSE(TaskForRound({Task(1, 5)}, 4).has_value());
  CHECK(TaskForRound({Task(1, 5)}, 5) == 1);
  CHECK_FALSE(TaskForRound({Task(1, 0)}, -1).has_value());
}

}  // namespace
}  // namespace sluice::client
