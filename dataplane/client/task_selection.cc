#include "dataplane/client/task_selection.h"

namespace sluice::client {

bool IsLocalTask(const service::TaskInfo& task, const std::string& client_host) {
  return !client_host.empty() && task.worker_host() == client_host;
}

std::vector<int64_t> SelectTasks(const std::vector<service::TaskInfo>& tasks, const TaskSelectionInput& input) {
  bool local_only = false;
  if (!input.coordinated) {
    if (input.target_workers == service::TARGET_WORKERS_LOCAL) {
      local_only = true;
    } else if (input.target_workers == service::TARGET_WORKERS_AUTO && input.sharding == service::SHARDING_OFF) {
      for (const auto& t : tasks) {
        if (IsLocalTask(t, input.client_host)) {
          local_only = true;
          break;
        }
      }
    }
  }
  std::vector<int64_t> out;
  for (const auto& t : tasks) {
    if (!local_only || IsLocalTask(t, input.client_host)) out.push_back(t.task_id());
  }
  return out;
}

}  // namespace sluice::client
