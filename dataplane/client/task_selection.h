// Which of a job's tasks a (non-coordinated) client reads, given its target_workers setting and
// host. Pure function; thread-safe.
//
//   ANY:   every task.
//   LOCAL: only tasks whose worker_host equals the client's host (exact string match). With none,
//          the client reads nothing until a local task appears (or the job finishes).
//   AUTO:  under SHARDING_OFF (every worker produces the whole dataset, so any subset of tasks
//          gives complete epochs): the local tasks when at least one exists, otherwise every task.
//          Under DYNAMIC, FILE and DATA sharding every task holds data no other task has, so
//          skipping a remote task would lose its shard (or strand its dynamic splits): AUTO reads
//          every task there, like ANY.
// Coordinated reads (num_consumers > 0) always read every task: all consumers must agree on the
// round-robin order, so locality does not apply to them.
#ifndef SLUICE_DATAPLANE_CLIENT_TASK_SELECTION_H_
#define SLUICE_DATAPLANE_CLIENT_TASK_SELECTION_H_

#include <cstdint>
#include <string>
#include <vector>

#include "dataservice.pb.h"

namespace sluice::client {

struct TaskSelectionInput {
  service::TargetWorkers target_workers = service::TARGET_WORKERS_AUTO;
  service::ShardingPolicy sharding = service::SHARDING_OFF;
  bool coordinated = false;
  std::string client_host;
};

// The task_ids to read, in the order of `tasks`.
std::vector<int64_t> SelectTasks(const std::vector<service::TaskInfo>& tasks, const TaskSelectionInput& input);

// True when `task` runs on the client's host.
bool IsLocalTask(const service::TaskInfo& task, const std::string& client_host);

}  // namespace sluice::client

#endif  // SLUICE_DATAPLANE_CLIENT_TASK_SELECTION_H_
