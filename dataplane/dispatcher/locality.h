// Locality ("tasks follow readers"): which workers a job's clients read, by the clients' own rule
// (dataplane/client/task_selection.h), so that the dispatcher places tasks only where they will be
// read and never makes a client wait for a task it would not read.
//
// Pure functions of a DispatcherState (no I/O, no clock, no lock of their own); thread-compatible.
// The service calls them under its lock.
#ifndef SLUICE_DATAPLANE_DISPATCHER_LOCALITY_H_
#define SLUICE_DATAPLANE_DISPATCHER_LOCALITY_H_

#include <string>
#include <vector>

#include "dataplane/dispatcher/dispatcher_state.h"
#include "dataservice.pb.h"

namespace sluice::dispatcher {

// True when a client on `client_host` and a worker on `worker_host` share a host (exact match,
// as the clients decide locality).
bool SameHost(const std::string& client_host, const std::string& worker_host);

// The host part of "host:port" ("[v6]:port" too).
std::string HostOf(const std::string& address);

// Whether a client (of a job with `sharding`, reading `target_workers` from `client_host`) reads a
// task on `worker`. ANY: yes; LOCAL: same host; AUTO: yes, except under SHARDING_OFF when the
// client's host has a registered, non-draining worker (then only same-host ones).
bool ClientWantsWorker(const DispatcherState& state, service::ShardingPolicy sharding,
                       service::TargetWorkers target_workers, const std::string& client_host,
                       const DispatcherState::Worker& worker);

// Whether some client of `job` reads a task on `worker` (coordinated jobs: every worker). A
// non-coordinated job gets tasks only on the workers its clients read.
bool JobWantsWorker(const DispatcherState& state, const DispatcherState::Job& job, const DispatcherState::Worker& worker);

// The tasks `client` reads, by the clients' own rule (dataplane/client/task_selection.h).
std::vector<const DispatcherState::Task*> TasksReadBy(const DispatcherState& state, const DispatcherState::Job& job,
                                                      const DispatcherState::JobClient& client);

}  // namespace sluice::dispatcher

#endif  // SLUICE_DATAPLANE_DISPATCHER_LOCALITY_H_
