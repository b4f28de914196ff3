#include "autoscaler/placement/local_capacity.h"

#include <algorithm>
#include <cmath>
#include <set>

namespace sluice::autoscaler {

int64_t LocalCapacity::WorkersOn(const std::string& node) const {
  for (const NodeCapacity& n : nodes) {
    if (n.node == node) return n.excluded_reason.empty() ? n.workers : 0;
  }
  return 0;
}

LocalCapacity ComputeLocalCapacity(const CapacityInput& in) {
  LocalCapacity result;
  if (in.policy == Placement::kRemoteOnly) return result;
  const double fraction = std::isnan(in.local_cpu_fraction) ? 0.0 : std::clamp(in.local_cpu_fraction, 0.0, 1.0);

  std::set<std::string> seen;
  for (const CapacityNode& node : in.nodes) {
    if (!seen.insert(node.name).second) continue;  // listed twice: the first entry counts
    if (!node.consumer) continue;
    NodeCapacity nc;
    nc.node = node.name;
    nc.allocatable_millis = std::max<int64_t>(0, node.allocatable_cpu_millis);
    nc.requested_by_others_millis = std::max<int64_t>(0, node.cpu_requested_by_others_millis);
    const int64_t left = std::max<int64_t>(0, nc.allocatable_millis - nc.requested_by_others_millis);
    nc.budget_millis = static_cast<int64_t>(std::floor(static_cast<double>(left) * fraction));
    nc.workers = in.worker_cpu_millis > 0 ? nc.budget_millis / in.worker_cpu_millis : 0;
    nc.excluded_reason = node.excluded_reason;
    if (nc.excluded_reason.empty()) result.total_workers += nc.workers;
    result.nodes.push_back(std::move(nc));
  }
  std::sort(result.nodes.begin(), result.nodes.end(),
            [](const NodeCapacity& a, const NodeCapacity& b) { return a.node < b.node; });
  return result;
}

const char* CapacityLimitName(CapacityLimit limit) {
  switch (limit) {
    case CapacityLimit::kNone: return "";
    case CapacityLimit::kLocalCapacityExhausted: return "LocalCapacityExhausted";
    case CapacityLimit::kLocalSplitCapped: return "LocalSplitCapped";
  }
  return "";
}

CapacitySplit SplitByCapacity(const CapacitySplitInput& in) {
  CapacitySplit out;
  const int64_t replicas = std::max<int64_t>(0, in.replicas);
  const int64_t capacity = std::max<int64_t>(0, in.capacity);
  switch (in.policy) {
    case Placement::kRemoteOnly:
      out.remote = replicas;
      break;
    case Placement::kLocalOnly:
      out.wanted_local = replicas;
      out.local = std::min(replicas, capacity);
      if (out.local < replicas) out.limit = CapacityLimit::kLocalCapacityExhausted;
      break;
    case Placement::kHybrid:
      out.wanted_local = in.local.has_value() ? std::clamp<int64_t>(*in.local, 0, replicas) : replicas;
      out.local = std::min(out.wanted_local, capacity);
      out.remote = replicas - out.local;
      if (in.local.has_value() && out.wanted_local > capacity) out.limit = CapacityLimit::kLocalSplitCapped;
      break;
  }
  return out;
}

CapacitySplit SplitAfterNamedRemovals(const CapacitySplitInput& in, int64_t local_left, int64_t remote_left) {
  CapacitySplit split = SplitByCapacity(in);
  if (in.policy != Placement::kHybrid || in.local.has_value()) return split;
  local_left = std::max<int64_t>(0, local_left);
  remote_left = std::max<int64_t>(0, remote_left);
  const int64_t replicas = split.local + split.remote;
  if (local_left + remote_left > replicas || local_left > split.local) return split;
  const int64_t shortfall = replicas - local_left - remote_left;
  split.local = std::min(split.local, local_left + shortfall);
  split.remote = replicas - split.local;
  return split;
}

}  // namespace sluice::autoscaler
