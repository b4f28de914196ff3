// LeaderElector: leader election over a coordination.k8s.io/v1 Lease (client-go's
// leaderelection with a LeaseLock).
//
//  - Acquire: GET the Lease (create it if missing). Another holder keeps it while its record keeps
//    changing; a record unchanged for lease_duration, as observed on OUR clock (tolerant of skew
//    between machines), is stale and taken over: PUT with the GET's resourceVersion, holder = us,
//    acquireTime = now, leaseTransitions + 1. A 409 means someone else won the race: back off
//    (retry_period, jittered up to x2.2) and re-GET.
//  - Lead: renew every retry_period; if no renewal succeeds within renew_deadline, leadership is
//    lost (on_stopped_leading) and Run returns.
//  - Stop: on a stop request while leading, the Lease is released (holderIdentity cleared,
//    leaseDurationSeconds=1) so a successor does not wait for expiry; on_stopped_leading runs.
//  - Every attempt is reported to on_attempt (what was read, when the record was first seen, when it
//    expires for us, the outcome), so that a takeover can be explained from the logs.
// Defaults: lease 15 s, renew deadline 10 s, retry 2 s. Time comes from the injectable Clock.
//
// Threading: Run blocks its thread; callbacks run on it and must not block (start/stop your
// controllers from them). IsLeader/Leader are thread-safe. TryAcquireOrRenew/Release are public
// for tests and must not race with Run.
#ifndef SLUICE_KUBE_LEADER_ELECTION_H_
#define SLUICE_KUBE_LEADER_ELECTION_H_

#include <functional>
#include <optional>
#include <random>
#include <stop_token>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "kube/client.h"
#include "kube/clock.h"
#include "nlohmann/json.hpp"

namespace sluice::kube {

// One acquire-or-renew attempt as this candidate saw it (for logs and tests). Times are on our clock.
struct LeaderElectionAttempt {
  enum class Outcome {
    kAcquired,     // we took the Lease (created it, or took over a released, expired or empty one)
    kRenewed,      // we held it and renewed it
    kHeldByOther,  // another holder's record changed less than lease_duration ago (by our observation)
    kLostRace,     // someone else wrote first (409 on the PUT, or the create found it existing)
    kError,        // any other failure (in `error`)
  };
  absl::Time at;                    // when the Lease was read (the answer to the attempt's GET)
  Outcome outcome = Outcome::kError;
  std::string holder;               // holderIdentity we read ("" when released or when there was no Lease)
  absl::Time observed_change;       // when we first saw the record (spec) we read unchanged
  absl::Time expires;               // observed_change + lease_duration: from then on the record is stale for us
  absl::Status error;
};
const char* OutcomeName(LeaderElectionAttempt::Outcome outcome);

struct LeaderElectionConfig {
  std::string lease_namespace{};
  std::string lease_name{};
  std::string identity{};  // unique per candidate, e.g. the pod name
  absl::Duration lease_duration = absl::Seconds(15);
  absl::Duration renew_deadline = absl::Seconds(10);
  absl::Duration retry_period = absl::Seconds(2);
  double jitter_factor = 1.2;  // acquire retries wait retry_period * (1 + jitter_factor * U[0,1))
  bool release_on_cancel = true;
  Clock* clock = Clock::Real();
  uint64_t seed = 0;  // 0 = random
  std::function<void()> on_started_leading{};
  std::function<void()> on_stopped_leading{};
  std::function<void(const std::string& identity)> on_new_leader{};
  // Called after every attempt (acquiring and renewing), on the Run thread; must not block.
  std::function<void(const LeaderElectionAttempt&)> on_attempt{};
};

class LeaderElector {
 public:
  LeaderElector(Client* client, LeaderElectionConfig config);

  // Validates the configuration (renew_deadline < lease_duration, etc.).
  absl::Status Validate() const;
  // Acquires, leads until the lease is lost or `stop` is requested, then returns.
  absl::Status Run(std::stop_token stop);

  // One acquire-or-renew attempt: true if we hold the lease afterwards, false if another holder
  // has it or we lost a race (409); errors for anything else.
  absl::StatusOr<bool> TryAcquireOrRenew();
  // Gives the lease up if we hold it.
  absl::Status Release();

  bool IsLeader() const;
  std::string Leader() const;

 private:
  absl::StatusOr<bool> Attempt(LeaderElectionAttempt* attempt);
  void ObserveHolder(const std::string& holder);
  absl::Duration JitteredRetry();

  Client* const client_;
  const LeaderElectionConfig config_;
  std::mt19937_64 rng_;

  mutable absl::Mutex mu_;
  nlohmann::json observed_spec_ ABSL_GUARDED_BY(mu_);
  absl::Time observed_time_ ABSL_GUARDED_BY(mu_);
  nlohmann::json last_lease_ ABSL_GUARDED_BY(mu_);  // our last successful write/read
  std::string leader_ ABSL_GUARDED_BY(mu_);
  bool leading_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace sluice::kube

#endif  // SLUICE_KUBE_LEADER_ELECTION_H_
