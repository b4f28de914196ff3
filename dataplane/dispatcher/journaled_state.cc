#include "dataplane/dispatcher/journaled_state.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/log.h"

namespace sluice::dispatcher {

std::string JobLabel(const DispatcherState::Job& job) {
  return job.spec.job_name().empty() ? absl::StrCat(job.id) : job.spec.job_name();
}

absl::Status JournaledState::Recover(const JournalContents& contents) {
  int64_t applied = 0;
  if (contents.snapshot.has_value()) {
    for (int i = 0; i < contents.snapshot->updates_size(); ++i) {
      if (auto s = state_.Apply(contents.snapshot->updates(i)); !s.ok()) {
        return absl::DataLossError(absl::StrCat("'", contents.snapshot_file, "': snapshot update ", i,
                                                " does not apply: ", s.message()));
      }
    }
  }
  for (size_t i = 0; i < contents.updates.size(); ++i) {
    if (auto s = state_.Apply(contents.updates[i]); !s.ok()) {
      return absl::DataLossError(absl::StrCat("journal update ", contents.first_sequence + static_cast<int64_t>(i),
                                              " does not apply: ", s.message()));
    }
    ++applied;
  }
  updates_since_snapshot_ = applied;
  return absl::OkStatus();
}

absl::Status JournaledState::Commit(const service::Update& update) {
  if (auto s = state_.Check(update); !s.ok()) {
    SLUICE_LOG(Error, "dispatcher built an invalid update").With("update", update.ShortDebugString()).With("error", s.ToString());
    return absl::InternalError(absl::StrCat("dispatcher bug: ", s.message()));
  }
  if (journal_ != nullptr) {
    if (absl::Status health = journal_->health(); !health.ok()) {
      return absl::UnavailableError(
          absl::StrCat("the dispatcher's journal failed (", health.message(), "); it accepts no changes until restarted"));
    }
    journal_->Append(update);
  }
  absl::Status applied = state_.Apply(update);  // cannot fail after Check
  ++updates_since_snapshot_;
  return applied;
}

int64_t JournaledState::LastSequence() const { return journal_ == nullptr ? 0 : journal_->last_appended(); }

absl::Status JournaledState::Durable(int64_t sequence) {
  if (journal_ == nullptr || sequence == 0) return absl::OkStatus();
  absl::Status s = journal_->Sync(sequence);
  if (!s.ok()) return absl::UnavailableError(absl::StrCat("journal write failed: ", s.message()));
  return absl::OkStatus();
}

absl::StatusOr<bool> JournaledState::MaybeCompact(bool force, int64_t snapshot_every) {
  if (journal_ == nullptr) return false;
  service::Snapshot snapshot;
  {
    absl::MutexLock lock(&mu);
    if (compacting_) return false;
    const bool due = snapshot_every > 0 && updates_since_snapshot_ >= snapshot_every;
    if (!force && !due) return false;
    // The cut: the state now equals the journal up to last_appended; the next record opens a new segment.
    snapshot.set_last_update_sequence(journal_->last_appended());
    for (auto& u : state_.ToSnapshotUpdates()) *snapshot.add_updates() = std::move(u);
    journal_->StartNewSegment();
    compacting_ = true;
    updates_since_snapshot_ = 0;
  }
  absl::Status s = journal_->WriteSnapshot(snapshot);  // disk I/O without the lock
  {
    absl::MutexLock lock(&mu);
    compacting_ = false;
    if (!s.ok()) {
      updates_since_snapshot_ += snapshot_every;  // try again next time
      return s;
    }
  }
  SLUICE_LOG(Info, "journal snapshot written")
      .With("sequence", snapshot.last_update_sequence())
      .With("updates", static_cast<int64_t>(snapshot.updates_size()))
      .With("journal_bytes", journal_->bytes());
  return true;
}

}  // namespace sluice::dispatcher
