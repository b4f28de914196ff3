#include "dataplane/worker/split_provider.h"

#include <algorithm>
#include <set>

#include "absl/strings/str_cat.h"
#include "common/log.h"

namespace sluice::worker {

pipeline::Split FromProto(const service::Split& split) {
  pipeline::Split out{split.index(), split.path(), split.begin(), split.end()};
  out.skip = split.skip();
  return out;
}

service::Split ToProto(const pipeline::Split& split) {
  service::Split out;
  out.set_index(split.index);
  out.set_path(split.path);
  out.set_begin(split.begin);
  out.set_end(split.end);
  out.set_skip(split.skip);
  return out;
}

DispatcherSplitProvider::DispatcherSplitProvider(DispatcherClient* dispatcher, int64_t task_id,
                                                 std::string worker_address, SplitProviderOptions options)
    : dispatcher_(dispatcher),
      task_id_(task_id),
      worker_address_(std::move(worker_address)),
      options_([&] {
        options.max_splits = std::max(1, options.max_splits);
        return options;
      }()),
      refill_threshold_(options_.refill_threshold >= 0
                            ? static_cast<size_t>(std::min(options_.refill_threshold, options_.max_splits - 1))
                            : static_cast<size_t>(options_.max_splits / 4)) {
  fetcher_ = std::thread([this] { FetchLoop(); });
}

DispatcherSplitProvider::~DispatcherSplitProvider() {
  Cancel();
  fetcher_.join();
}

void DispatcherSplitProvider::Cancel() {
  {
    absl::MutexLock lock(&mu_);
    stopped_ = true;
  }
  cancel_.Cancel();
}

bool DispatcherSplitProvider::NeedAck() const {
  if (!options_.ack_before_start) return false;
  if (!unreported_starts_.empty()) return true;
  for (const auto& [index, lease] : leases_) {
    if (lease.dirty) return true;
  }
  return false;
}

bool DispatcherSplitProvider::FinishesPending() const {
  for (const auto& [index, lease] : leases_) {
    if (lease.finished) return true;
  }
  return false;
}

bool DispatcherSplitProvider::DirtyLeases() const {
  for (const auto& [index, lease] : leases_) {
    if (lease.dirty) return true;
  }
  return false;
}

bool DispatcherSplitProvider::ReleasesPending() const {
  if (!returns_.empty()) return true;
  for (const auto& [index, lease] : leases_) {
    if (lease.released) return true;
  }
  return false;
}

bool DispatcherSplitProvider::NeedFetch() const {
  if (stopped_ || !error_.ok() || fetch_in_flight_) return false;
  // Handing back: only the hand-backs, acknowledgements and finishes are sent; nothing is fetched.
  if (release_) return !returns_.empty() || DirtyLeases() || !unreported_starts_.empty();
  return (!end_of_splits_ && queue_.size() <= refill_threshold_) || NeedAck();
}

void DispatcherSplitProvider::StartReleaseLocked() {
  if (release_) return;
  release_ = true;
  release_flag_.store(true);
  for (const auto& [split, split_epoch] : queue_) returns_.push_back(split.index);
  SLUICE_LOG(Info, "handing splits back (the worker is drained)")
      .With("task_id", task_id_)
      .With("epoch", epoch_)
      .With("unstarted", static_cast<int64_t>(queue_.size()))
      .With("reading", static_cast<int64_t>(leases_.size()));
  queue_.clear();
}

void DispatcherSplitProvider::RequestRelease() {
  absl::MutexLock lock(&mu_);
  StartReleaseLocked();
}

void DispatcherSplitProvider::SplitReleased(const pipeline::Split& split, int64_t position) {
  absl::MutexLock lock(&mu_);
  auto it = leases_.find(split.index);
  if (it == leases_.end() || it->second.finished) return;
  it->second.released = true;
  it->second.released_at = position;
  it->second.dirty = true;
}

void DispatcherSplitProvider::FetchLoop() {
  absl::Duration error_backoff = options_.initial_backoff;
  absl::Duration poll_backoff = options_.initial_backoff;
  bool warned = false;
  while (true) {
    service::GetSplitsRequest request;
    bool ack_only = false;
    int64_t covers = 0;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](DispatcherSplitProvider* self) ABSL_NO_THREAD_SAFETY_ANALYSIS { return self->stopped_ || self->NeedFetch(); },
          this));
      if (stopped_) return;
      request.set_task_id(task_id_);
      request.set_worker_address(worker_address_);
      // A call made only to acknowledge starts asks for no splits (keeps the batches large).
      ack_only = release_ || end_of_splits_ || queue_.size() > refill_threshold_;
      request.set_max_splits(ack_only ? 0 : options_.max_splits - static_cast<int>(queue_.size()));
      request.set_epoch(epoch_);
      for (uint64_t index : unreported_starts_) request.add_started_split_indices(index);
      for (uint64_t index : returns_) request.add_returned_split_indices(index);
      unreported_starts_.clear();
      for (auto& [index, lease] : leases_) {
        if (!lease.dirty) continue;
        service::SplitProgress* p = request.add_progress();
        p->set_index(index);
        p->set_epoch(lease.epoch);
        if (lease.released) {
          p->set_lease_end(lease.released_at);
          p->set_released(true);
        } else {
          p->set_lease_end(lease.requested > lease.granted ? lease.requested : -1);
          p->set_finished(lease.finished);
        }
        lease.dirty = false;
      }
      covers = started_;  // every start so far is in this request or was acknowledged before
      fetch_in_flight_ = true;
    }
    const absl::Time rpc_start = absl::Now();
    absl::StatusOr<service::GetSplitsResponse> response = dispatcher_->GetSplits(request, CallOptions{&cancel_});
    const double rpc_seconds = absl::ToDoubleSeconds(absl::Now() - rpc_start);
    absl::Duration wait = absl::ZeroDuration();
    {
      absl::MutexLock lock(&mu_);
      fetch_in_flight_ = false;
      ++calls_;
      ++stats_.rpcs;
      stats_.rpc_seconds += rpc_seconds;
      if (!response.ok()) {
        // The acknowledgements may not have arrived: send them again next time.
        unreported_starts_.insert(unreported_starts_.begin(), request.started_split_indices().begin(),
                                  request.started_split_indices().end());
        for (const service::SplitProgress& p : request.progress()) {
          auto it = leases_.find(p.index());
          if (it != leases_.end()) it->second.dirty = true;
        }
        if (stopped_) return;
        // CANCELLED that this provider did not cause: the dispatcher shut down mid-call (a restart).
        if (IsRetryableDispatcherError(response.status()) || absl::IsCancelled(response.status())) {
          if (!warned) {
            SLUICE_LOG(Warning, "GetSplits failed; retrying with backoff")
                .With("task_id", task_id_)
                .With("error", response.status().ToString());
            warned = true;
          }
          wait = error_backoff;
          error_backoff = std::min(error_backoff * 2, options_.max_backoff);
        } else {
          error_ = absl::Status(response.status().code(),
                                absl::StrCat("GetSplits for task_id ", task_id_, " (epoch ", epoch_,
                                             ") failed: ", response.status().message()));
        }
      } else {
        error_backoff = options_.initial_backoff;
        warned = false;
        acked_ = std::max(acked_, covers);
        for (const service::SplitProgress& p : request.progress()) {
          auto it = leases_.find(p.index());
          if (it == leases_.end()) continue;
          if (p.released() || p.finished()) {
            leases_.erase(it);
            continue;
          }
          it->second.granted = std::max(it->second.granted, p.lease_end());
        }
        if (request.returned_split_indices_size() > 0) {  // acknowledged: no longer this task's
          const std::set<uint64_t> done(request.returned_split_indices().begin(), request.returned_split_indices().end());
          returns_.erase(std::remove_if(returns_.begin(), returns_.end(), [&](uint64_t i) { return done.count(i) > 0; }),
                         returns_.end());
        }
        if (response->release()) StartReleaseLocked();
        if (release_) {
          // Nothing is read any more: splits in this answer go straight back.
          for (const auto& split : response->splits()) returns_.push_back(split.index());
        } else if (ack_only) {
          // Acknowledgements only: no splits were asked for, so an empty answer means nothing.
          for (const auto& split : response->splits()) queue_.emplace_back(FromProto(split), response->epoch());
          end_of_splits_ = end_of_splits_ || response->end_of_splits();
        } else if (response->splits().empty() && !response->end_of_splits()) {
          // Nothing to hand out yet (e.g. the next epoch is not open): ask again later.
          wait = poll_backoff;
          poll_backoff = std::min(poll_backoff * 2, std::min(options_.max_poll_interval, options_.max_backoff));
        } else {
          poll_backoff = options_.initial_backoff;
          if (!response->splits().empty() && response->epoch() != epoch_) {
            // Splits handed to this task must be read, or the dispatcher's epoch never completes.
            SLUICE_LOG(Warning, "GetSplits answered for another epoch; reading the splits anyway")
                .With("task_id", task_id_)
                .With("epoch", epoch_)
                .With("response_epoch", response->epoch());
          }
          for (const auto& split : response->splits()) queue_.emplace_back(FromProto(split), response->epoch());
          end_of_splits_ = response->end_of_splits();
        }
      }
    }
    if (wait > absl::ZeroDuration()) {
      absl::MutexLock lock(&mu_);
      // A poll ("nothing now") is cut short when the source has drained the local queue and there
      // are starts to report: those may be what the dispatcher waits for to end the epoch.
      const bool polling = response.ok();
      auto wake = [this, polling]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        // With ack_before_start a start waits for its acknowledgement: report it at once.
        return stopped_ || (polling && ((waiting_readers_ > 0 && !unreported_starts_.empty()) || NeedAck()));
      };
      mu_.AwaitWithTimeout(absl::Condition(&wake), wait);
      if (stopped_) return;
    }
  }
}

absl::StatusOr<std::optional<pipeline::Split>> DispatcherSplitProvider::GetNext() {
  absl::MutexLock lock(&mu_);
  ++waiting_readers_;
  absl::Time wait_start = absl::Now();
  mu_.Await(absl::Condition(
      +[](DispatcherSplitProvider* self) ABSL_NO_THREAD_SAFETY_ANALYSIS {
        return self->stopped_ || !self->queue_.empty() || self->end_of_splits_ || !self->error_.ok() ||
               self->release_;
      },
      this));
  const double waited = absl::ToDoubleSeconds(absl::Now() - wait_start);
  if (queue_.empty()) {
    stats_.wait_end_seconds += waited;
  } else if (started_in_epoch_ == 0) {
    stats_.wait_first_split_seconds += waited;
  } else {
    stats_.wait_split_seconds += waited;
  }
  --waiting_readers_;
  if (stopped_) return absl::CancelledError(absl::StrCat("task_id ", task_id_, ": split provider cancelled"));
  if (!queue_.empty()) {
    pipeline::Split split = std::move(queue_.front().first);
    const int64_t split_epoch = queue_.front().second;
    queue_.pop_front();
    unreported_starts_.push_back(split.index);
    if (leases_on()) {
      // The first lease goes with the start acknowledgement.
      Lease& lease = leases_[split.index];
      lease = Lease{};
      lease.epoch = split_epoch;
      lease.window = std::max<int64_t>(1, options_.lease_elements);
      lease.requested = split.skip + lease.window;
      lease.dirty = true;
    }
    const int64_t start = ++started_;
    ++started_in_epoch_;
    ++stats_.splits_started;
    if (options_.ack_before_start) {
      // The dispatcher must know before any element of the split can leave this worker.
      auto acked = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stopped_ || !error_.ok() || acked_ >= start; };
      wait_start = absl::Now();
      mu_.Await(absl::Condition(&acked));
      stats_.wait_ack_seconds += absl::ToDoubleSeconds(absl::Now() - wait_start);
      if (stopped_) return absl::CancelledError(absl::StrCat("task_id ", task_id_, ": split provider cancelled"));
      if (acked_ < start) return error_;
      if (release_) {
        // Handed back meanwhile: the split is started but not one element of it read; it goes
        // back whole (from its skip).
        Lease& lease = leases_[split.index];
        lease.epoch = split_epoch;
        lease.released = true;
        lease.released_at = split.skip;
        lease.dirty = true;
      }
    }
    if (!release_) return std::optional<pipeline::Split>(std::move(split));
  }
  if (!error_.ok()) return error_;
  // The end of the epoch: first the dispatcher must know which splits were read to their end (and,
  // handing back, that it took back every split: the task must not end before, or a finish would
  // make a remainder past where its reader stopped).
  auto acknowledged = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return stopped_ || !error_.ok() || (!FinishesPending() && !(release_ && ReleasesPending()));
  };
  wait_start = absl::Now();
  mu_.Await(absl::Condition(&acknowledged));
  stats_.wait_epoch_end_seconds += absl::ToDoubleSeconds(absl::Now() - wait_start);
  if (stopped_) return absl::CancelledError(absl::StrCat("task_id ", task_id_, ": split provider cancelled"));
  if (!error_.ok()) return error_;
  return std::optional<pipeline::Split>();
}

absl::StatusOr<pipeline::SplitLease> DispatcherSplitProvider::RenewLease(const pipeline::Split& split, int64_t position) {
  absl::MutexLock lock(&mu_);
  if (!leases_on()) return pipeline::SplitLease{};
  auto it = leases_.find(split.index);
  if (it == leases_.end() || it->second.finished) {
    return absl::InternalError(
        absl::StrCat("task_id ", task_id_, ": lease asked for split ", split.DebugString(), ", which is not being read"));
  }
  Lease& lease = it->second;
  if (lease.requested - position <= lease.window / 2) {
    // Half of the lease or less is left: ask for more ahead, in a larger window.
    lease.window = std::min(std::max<int64_t>(1, options_.max_lease_elements), lease.window * 2);
    lease.requested = position + lease.window;
    lease.dirty = true;
  }
  auto covered = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stopped_ || !error_.ok() || lease.granted > position; };
  if (!covered()) {
    const absl::Time wait_start = absl::Now();
    mu_.Await(absl::Condition(&covered));
    stats_.wait_lease_seconds += absl::ToDoubleSeconds(absl::Now() - wait_start);
  }
  if (stopped_) return absl::CancelledError(absl::StrCat("task_id ", task_id_, ": split provider cancelled"));
  if (lease.granted <= position) return error_;
  pipeline::SplitLease out;
  out.end = lease.granted;
  out.renew_at = lease.requested > lease.granted ? lease.granted
                                                 : std::max(position + 1, lease.granted - lease.window / 2);
  return out;
}

void DispatcherSplitProvider::SplitFinished(const pipeline::Split& split, int64_t elements) {
  (void)elements;
  absl::MutexLock lock(&mu_);
  if (!leases_on()) return;
  auto it = leases_.find(split.index);
  if (it == leases_.end()) return;
  it->second.finished = true;
  it->second.dirty = true;
}

absl::Status DispatcherSplitProvider::Reset() {
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(
      +[](DispatcherSplitProvider* self) ABSL_NO_THREAD_SAFETY_ANALYSIS { return self->stopped_ || !self->fetch_in_flight_; },
      this));
  if (stopped_) return absl::CancelledError(absl::StrCat("task_id ", task_id_, ": split provider cancelled"));
  if (!error_.ok()) return error_;
  if (release_) {
    // Handing back: no epoch of the job is this task's business any more.
    ++epoch_;
    started_in_epoch_ = 0;
    return absl::OkStatus();
  }
  if (!end_of_splits_) {
    // The pipeline stopped reading mid-epoch (e.g. `take` before `repeat`). The splits still queued
    // were handed to this task; acknowledge them as started so the dispatcher neither waits for them
    // nor hands them out twice.
    SLUICE_LOG(Warning, "epoch reset before the end of its splits; dropping the queued splits")
        .With("task_id", task_id_)
        .With("epoch", epoch_)
        .With("dropped", static_cast<int64_t>(queue_.size()));
    for (const auto& [split, split_epoch] : queue_) {
      unreported_starts_.push_back(split.index);
      if (leases_on()) {
        Lease& lease = leases_[split.index];
        lease = Lease{};
        lease.epoch = split_epoch;
        lease.finished = true;  // never read: nothing of it is handed out again
        lease.dirty = true;
      }
    }
  }
  queue_.clear();
  // Splits the pipeline stopped reading mid-way (it moves to the next epoch) count as read: their
  // remainders are not handed out again, and other tasks need not wait for them.
  for (auto& [index, lease] : leases_) {
    if (!lease.finished) {
      lease.finished = true;
      lease.dirty = true;
    }
  }
  ++epoch_;
  started_in_epoch_ = 0;
  end_of_splits_ = false;
  return absl::OkStatus();
}

std::vector<uint64_t> DispatcherSplitProvider::TakeUnreportedStarts() {
  absl::MutexLock lock(&mu_);
  if (options_.ack_before_start) return {};  // the fetch loop acknowledges every start itself
  std::vector<uint64_t> out;
  out.swap(unreported_starts_);
  return out;
}

void DispatcherSplitProvider::RestoreUnreportedStarts(const std::vector<uint64_t>& indices) {
  absl::MutexLock lock(&mu_);
  unreported_starts_.insert(unreported_starts_.begin(), indices.begin(), indices.end());
}

int64_t DispatcherSplitProvider::epoch() const {
  absl::MutexLock lock(&mu_);
  return epoch_;
}

SplitProviderStats DispatcherSplitProvider::stats() const {
  absl::MutexLock lock(&mu_);
  return stats_;
}

int64_t DispatcherSplitProvider::get_splits_calls() const {
  absl::MutexLock lock(&mu_);
  return calls_;
}

int64_t DispatcherSplitProvider::splits_started() const {
  absl::MutexLock lock(&mu_);
  return started_;
}

}  // namespace sluice::worker
