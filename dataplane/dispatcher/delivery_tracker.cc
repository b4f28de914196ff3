#include "dataplane/dispatcher/delivery_tracker.h"

#include <algorithm>
#include <set>

#include "absl/strings/str_cat.h"

namespace sluice::dispatcher {

absl::Status CheckReceivedReport(const service::ClientHeartbeatRequest& request) {
  std::set<int64_t> seen;
  for (int i = 0; i < request.received_size(); ++i) {
    const service::TaskElementsReceived& r = request.received(i);
    if (r.task_id() <= 0) return absl::InvalidArgumentError(absl::StrCat("received[", i, "].task_id is ", r.task_id(), "; must be > 0"));
    if (r.elements() < 0) {
      return absl::InvalidArgumentError(absl::StrCat("received[", i, "].elements is ", r.elements(), "; must be >= 0"));
    }
    if (!seen.insert(r.task_id()).second) {
      return absl::InvalidArgumentError(absl::StrCat("received[", i, "].task_id ", r.task_id(), " is listed twice"));
    }
  }
  return absl::OkStatus();
}

void DeliveryTracker::WorkerReported(int64_t task_id, int64_t produced) {
  Task& t = TaskOf(task_id);
  t.produced = std::max(t.produced, produced);
}

void DeliveryTracker::ClientReported(int64_t client_id, int64_t task_id, int64_t received) {
  int64_t& r = TaskOf(task_id).received_by_client[client_id];
  r = std::max(r, received);
}

int64_t DeliveryTracker::Received(int64_t task_id) const {
  auto it = tasks_.find(task_id);
  if (it == tasks_.end()) return 0;
  int64_t sum = 0;
  for (const auto& [client, n] : it->second.received_by_client) sum += n;
  return sum;
}

int64_t DeliveryTracker::Undelivered(int64_t task_id) const {
  auto it = tasks_.find(task_id);
  if (it == tasks_.end()) return 0;
  return std::max<int64_t>(0, it->second.produced - Received(task_id));
}

int64_t DeliveryTracker::TaskLost(int64_t job_id, int64_t task_id) {
  auto it = tasks_.find(task_id);
  if (it == tasks_.end()) return 0;
  const int64_t lost = std::max<int64_t>(0, it->second.produced - Received(task_id));
  if (lost > 0) job_lost_[job_id] += lost;
  tasks_.erase(it);
  return lost;
}

int64_t DeliveryTracker::JobLost(int64_t job_id) const {
  auto it = job_lost_.find(job_id);
  return it == job_lost_.end() ? 0 : it->second;
}

}  // namespace sluice::dispatcher
