// LeaderElectedRunner: runs a controller daemon's work only while this replica holds the leader
// Lease (client-go's leaderelection.RunOrDie pattern), so a daemon's main() does not hand-roll it:
//  - it campaigns (LeaderElector) until the daemon's stop is requested;
//  - on acquiring the Lease it runs `lead` on a thread of its own, with the daemon's stop token;
//  - a stop request (a signal) ends a standby's campaign at once (a clean end: exit code 0; the
//    operator's hand-rolled version logged "leader election failed" and exited 1 here); a leader's
//    `lead` returns first,
//    and only then is the Lease released (holder cleared), so a successor does not start while this
//    process still finishes its in-flight writes;
//  - when `lead` returns on its own (e.g. its controller failed to start) the daemon's stop is
//    requested and the Lease released;
//  - when the Lease is lost (renewals failing past renew_deadline) the daemon's stop is requested
//    and Run returns 1: the process exits, so a new leader takes over cleanly.
// Generic: it knows nothing of what `lead` does. It logs its steps as logfmt lines
// (common/log.h): "waiting for the leader Lease", "acquired the leader Lease", "leader observed",
// "lease attempt" (debug level: what was read and when it expires by our clock), "controller
// stopped; releasing the leader Lease", "lost the leader Lease, exiting", "stopped while waiting for
// the leader Lease", "leader election failed".
// Callbacks already in the LeaderElectionConfig are called after the runner's own.
//
// Threading: Run blocks its caller; `lead` runs on a thread the runner starts and joins; the stop
// source may be requested from any thread.
#ifndef SLUICE_KUBE_LEADER_ELECTED_RUNNER_H_
#define SLUICE_KUBE_LEADER_ELECTED_RUNNER_H_

#include <functional>
#include <stop_token>
#include <string>

#include "absl/status/status.h"
#include "kube/client.h"
#include "kube/leader_election.h"

namespace sluice::kube {

class LeaderElectedRunner {
 public:
  // The work done while leading: returns once `stop` is requested (or earlier, on a failure of its
  // own), with the process's exit code.
  using LeadFunc = std::function<int(std::stop_token stop)>;

  LeaderElectedRunner(Client* client, LeaderElectionConfig config);

  // The election settings' own checks (see LeaderElector::Validate).
  absl::Status Validate() const;
  // Campaigns, leads, releases; see above. Returns `lead`'s exit code, or 1 when the election
  // failed or the Lease was lost.
  int Run(std::stop_source& stop, const LeadFunc& lead);

  // "namespace/name" of the Lease.
  std::string lease() const { return config_.lease_namespace + "/" + config_.lease_name; }

 private:
  Client* const client_;
  const LeaderElectionConfig config_;
};

}  // namespace sluice::kube

#endif  // SLUICE_KUBE_LEADER_ELECTED_RUNNER_H_
