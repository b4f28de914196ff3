// JournaledState: the dispatcher's one lock, its DispatcherState, and the journal every change goes
// through. The pieces of the service (job creation, task placement, splits, round joins, drain,
// retention) change the state only through Commit(update): Check, Journal::Append (an in-memory
// queue push: no I/O), then DispatcherState::Apply — so the journal's record order is exactly the
// Apply order. Durable(sequence) does the I/O (group commit) after the lock is released.
// MaybeCompact writes snapshots without the lock.
//
// Threading: `mu` is the dispatcher's only mutex. It guards the state here and the soft state of
// every other piece (they are thread-compatible and owned by DispatcherService under `mu`).
// Functions of the pieces that read or change the state take a JournaledState& and require its mu.
#ifndef SLUICE_DATAPLANE_DISPATCHER_JOURNALED_STATE_H_
#define SLUICE_DATAPLANE_DISPATCHER_JOURNALED_STATE_H_

#include <cstdint>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "dataplane/dispatcher/dispatcher_state.h"
#include "dataplane/dispatcher/journal.h"
#include "journal.pb.h"

namespace sluice::dispatcher {

class JournaledState {
 public:
  // `journal` may be null (state kept in memory only).
  explicit JournaledState(Journal* journal) : journal_(journal) {}
  JournaledState(const JournaledState&) = delete;
  JournaledState& operator=(const JournaledState&) = delete;

  // The dispatcher's lock (see the header comment).
  mutable absl::Mutex mu;

  const DispatcherState& state() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) { return state_; }

  // Rebuilds the state from what Journal::Open read; errors name the update that does not apply.
  absl::Status Recover(const JournalContents& contents) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);

  // Validates, journals (queued, not yet durable) and applies `update`. A state the dispatcher
  // should never build is INTERNAL; a failed journal is UNAVAILABLE (no change accepted after it).
  absl::Status Commit(const service::Update& update) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  // The journal sequence of the last change (0 without a journal): what a response must wait for.
  int64_t LastSequence() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  // Waits until the journal holds everything up to `sequence` (0: nothing to wait for).
  absl::Status Durable(int64_t sequence) ABSL_LOCKS_EXCLUDED(mu);

  // Writes a snapshot if `force`, or if `snapshot_every` (> 0) updates were committed since the
  // last one; the disk I/O runs without the lock. Returns whether it wrote one.
  absl::StatusOr<bool> MaybeCompact(bool force, int64_t snapshot_every) ABSL_LOCKS_EXCLUDED(mu);
  int64_t updates_since_snapshot() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) { return updates_since_snapshot_; }

  Journal* journal() const { return journal_; }

 private:
  Journal* const journal_;
  DispatcherState state_ ABSL_GUARDED_BY(mu);
  int64_t updates_since_snapshot_ ABSL_GUARDED_BY(mu) = 0;
  bool compacting_ ABSL_GUARDED_BY(mu) = false;
};

// The metrics label of a job: its name, or its id when it has none.
std::string JobLabel(const DispatcherState::Job& job);

}  // namespace sluice::dispatcher

#endif  // SLUICE_DATAPLANE_DISPATCHER_JOURNALED_STATE_H_
