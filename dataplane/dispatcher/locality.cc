#include "dataplane/dispatcher/locality.h"

namespace sluice::dispatcher {

bool SameHost(const std::string& client_host, const std::string& worker_host) {
  return !client_host.empty() && client_host == worker_host;
}

std::string HostOf(const std::string& address) {
  auto colon = address.rfind(':');
  std::string host = colon == std::string::npos ? address : address.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  return host;
}

bool ClientWantsWorker(const DispatcherState& state, service::ShardingPolicy sharding,
                       service::TargetWorkers target_workers, const std::string& client_host,
                       const DispatcherState::Worker& worker) {
  switch (target_workers) {
    case service::TARGET_WORKERS_ANY:
      return true;
    case service::TARGET_WORKERS_LOCAL:
      return SameHost(client_host, worker.host);
    default:  // AUTO
      if (sharding != service::SHARDING_OFF || SameHost(client_host, worker.host)) return true;
      // Under SHARDING_OFF the client reads only local tasks when its host has workers.
      for (const auto& [address, w] : state.workers()) {
        if (!w.draining && SameHost(client_host, w.host)) return false;
      }
      return true;
  }
}

bool JobWantsWorker(const DispatcherState& state, const DispatcherState::Job& job, const DispatcherState::Worker& worker) {
  if (job.spec.num_consumers() > 0) return true;
  for (int64_t c : job.clients) {
    const DispatcherState::JobClient* client = state.FindJobClient(c);
    if (client != nullptr &&
        ClientWantsWorker(state, job.spec.sharding(), client->target_workers, client->client_host, worker)) {
      return true;
    }
  }
  return false;
}

std::vector<const DispatcherState::Task*> TasksReadBy(const DispatcherState& state, const DispatcherState::Job& job,
                                                      const DispatcherState::JobClient& client) {
  std::vector<const DispatcherState::Task*> all, local;
  for (int64_t t : job.tasks) {
    const DispatcherState::Task* task = state.FindTask(t);
    all.push_back(task);
    if (SameHost(client.client_host, state.FindWorker(task->worker_address)->host)) local.push_back(task);
  }
  if (job.spec.num_consumers() > 0) return all;  // coordinated: every consumer reads every task
  if (client.target_workers == service::TARGET_WORKERS_LOCAL) return local;
  if (client.target_workers == service::TARGET_WORKERS_AUTO && job.spec.sharding() == service::SHARDING_OFF &&
      !local.empty()) {
    return local;
  }
  return all;
}

}  // namespace sluice::dispatcher
