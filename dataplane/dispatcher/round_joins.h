// RoundJoins: coordinated reads (num_consumers > 0) and the workers that join a running job.
//
// Every consumer of a coordinated job reads round r from the same task, so a task added while the
// job runs must start at a round no consumer has started yet. The dispatcher proposes a round
// (block_round in client heartbeat answers); a client that has not started it holds it and says so
// in its next heartbeat (acked_block_round); once every client of the job holds it, the pending
// workers' tasks are created with starting_round = that round. A client already past it makes the
// dispatcher propose a later round (the margin doubled). Also here: the highest round each job's
// clients reported (which raises the journaled round watermark), and the clients replaced by a
// newer client with their consumer index (their next heartbeat is told why).
//
// All soft state: after a restart the workers' heartbeats start the joins over, and the journaled
// watermark bounds the rounds clients may have reached.
//
// Threading: thread-compatible. DispatcherService owns one under JournaledState::mu; the methods
// that read or change the journaled state take the JournaledState and require its mu.
#ifndef SLUICE_DATAPLANE_DISPATCHER_ROUND_JOINS_H_
#define SLUICE_DATAPLANE_DISPATCHER_ROUND_JOINS_H_

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "dataplane/dispatcher/dispatcher_state.h"
#include "dataplane/dispatcher/journaled_state.h"

namespace sluice::dispatcher {

// A late worker's task starts this many rounds after the highest round seen (the first proposal;
// doubled each time a client passes the proposed round before holding it).
inline constexpr int64_t kStartingRoundMargin = 8;
inline constexpr int64_t kMaxStartingRoundMargin = int64_t{1} << 20;
// The journaled round watermark runs this far ahead of the highest round seen.
inline constexpr int64_t kRoundWatermarkLookahead = 64;

class RoundJoins {
 public:
  // The first round a task added to a running `job` serves (0 for a job that is not coordinated).
  int64_t StartingRound(const DispatcherState::Job& job) const;

  // Queues `address` (its shard: worker_index of num_workers) to join the running coordinated
  // `job`; the first worker of a join opens it with a proposed round. Complete it with
  // CompleteIfAgreed.
  void AddWorker(const DispatcherState::Job& job, const std::string& address, int32_t worker_index,
                 int32_t num_workers);

  // A heartbeat from `client_id` of the coordinated `job` at `current_round`, holding
  // `acked_block_round`: raises the journaled round watermark when the clients near it, moves
  // the proposal on when this client passed it, and completes the join once every client holds the
  // round. `*block_round` is set to the proposed round while a join of the job stays pending.
  absl::Status OnClientHeartbeat(JournaledState& js, const DispatcherState::Job& job, int64_t client_id,
                                 int64_t current_round, int64_t acked_block_round, std::optional<int64_t>* block_round)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(js.mu);

  // Creates the pending workers' tasks of `job_id` once every client of the job holds the proposed
  // round (or the job has no clients or tasks left); drops the join of a finished job.
  absl::Status CompleteIfAgreed(JournaledState& js, int64_t job_id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(js.mu);
  // The jobs with a pending join (the tick retries them: a client may have gone meanwhile).
  std::vector<int64_t> PendingJobs() const;

  // A client of `job_id` was released: the others may all hold the round already.
  absl::Status ClientReleased(JournaledState& js, int64_t job_id, int64_t client_id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(js.mu);
  // A worker was removed: it joins nothing any more.
  void WorkerRemoved(const std::string& address);
  // A job was forgotten (retention).
  void JobForgotten(int64_t job_id);

  // Consumer indexes: `client_id` was replaced by a newer client with its index, for `reason`.
  void ClientReplaced(int64_t client_id, std::string reason);
  // Why `client_id` was replaced, or null.
  const std::string* ReplacedReason(int64_t client_id) const;

 private:
  struct PendingJoin {
    int64_t round = 0;
    int64_t margin = kStartingRoundMargin;
    std::map<std::string, std::pair<int32_t, int32_t>> workers;  // address -> worker_index, num_workers
    std::set<int64_t> acked;                                      // clients holding `round`
  };
  std::map<int64_t, PendingJoin> pending_joins_;
  std::map<int64_t, int64_t> max_round_seen_;       // per job, since this process started
  std::map<int64_t, std::string> replaced_clients_;  // a few bytes per replacement
};

}  // namespace sluice::dispatcher

#endif  // SLUICE_DATAPLANE_DISPATCHER_ROUND_JOINS_H_
