#include "dataplane/client/element_queue.h"

#include <algorithm>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/log.h"

namespace sluice::client {

ElementQueue::ElementQueue(Limits limits, std::function<absl::Time()> stall_clock, std::function<void()> on_fail)
    : limits_(limits), stall_clock_(std::move(stall_clock)), on_fail_(std::move(on_fail)) {}

bool ElementQueue::HasRoomLocked(bool yields_to_local, bool drains) const {
  // Every reader may have one read in flight: a slot held by a reader whose task has nothing to
  // send yet must not starve the others (under dynamic sharding, that task's end can depend on
  // another task's elements being read).
  const int64_t slots = std::max<int64_t>(limits_.max_outstanding_requests, readers_);
  const bool yields = !drains && ((yields_to_local && local_reader_active_) || draining_reader_active_);
  const int64_t budget = yields ? limits_.max_buffered_bytes / 4 : limits_.max_buffered_bytes;
  return buffered_bytes_ < budget && (limits_.max_outstanding_requests == 0 || outstanding_ < slots);
}

bool ElementQueue::AcquireSlot(CancelToken& stop, bool yields_to_local, const std::atomic<bool>* drains) {
  // A cancel wakes the wait below: locking and unlocking the mutex makes abseil re-evaluate the
  // waiters' conditions (lock order: the token's mutex, then this one).
  CancelCallback wake(&stop, [this] { absl::MutexLock l(&mu_); });
  absl::MutexLock l(&mu_);
  auto can_go = [&] {
    mu_.AssertHeld();
    return stop.cancelled() || closed_ || !fatal_.ok() || HasRoomLocked(yields_to_local, drains != nullptr && drains->load());
  };
  if (!can_go()) {
    ++backpressure_waits_;
    mu_.Await(absl::Condition(&can_go));
  }
  if (stop.cancelled() || closed_ || !fatal_.ok()) return false;
  ++outstanding_;
  peak_outstanding_ = std::max(peak_outstanding_, outstanding_);
  return true;
}

void ElementQueue::ReleaseSlot() {
  absl::MutexLock l(&mu_);
  --outstanding_;
}

void ElementQueue::Push(std::vector<DecodedElement> elements) {
  absl::MutexLock l(&mu_);
  last_activity_ = absl::Now();
  if (elements.empty()) {
    --outstanding_;
    return;
  }
  for (const DecodedElement& e : elements) buffered_bytes_ += static_cast<int64_t>(e.bytes);
  buffered_elements_ += static_cast<int64_t>(elements.size());
  queue_.emplace_back(std::move(elements));
  peak_buffered_bytes_ = std::max(peak_buffered_bytes_, buffered_bytes_);
}

void ElementQueue::Fail(absl::Status status) {
  {
    absl::MutexLock l(&mu_);
    if (!fatal_.ok()) return;
    SLUICE_LOG(Error, "data service client failed").With("error", std::string(status.message()));
    fatal_ = std::move(status);
  }
  // Nothing more will be handed out: the owner stops fetching.
  if (on_fail_) on_fail_();
}

void ElementQueue::SetEnd() {
  absl::MutexLock l(&mu_);
  end_ = true;
}

void ElementQueue::SetReaders(int64_t readers, bool local_reader_active, bool draining_reader_active) {
  absl::MutexLock l(&mu_);
  readers_ = readers;
  local_reader_active_ = local_reader_active;
  draining_reader_active_ = draining_reader_active;
}

absl::StatusOr<std::optional<pipeline::Element>> ElementQueue::Pop(std::optional<absl::Duration> timeout) {
  const absl::Time start = stall_clock_();
  absl::MutexLock l(&mu_);
  auto ready = [this] {
    mu_.AssertHeld();
    return !queue_.empty() || !fatal_.ok() || closed_ || end_;
  };
  // An element already there was not waited for: no second clock reading (one per element counts).
  const bool wait = !ready();
  if (wait) {
    ++waiting_consumers_;
    if (timeout) {
      mu_.AwaitWithTimeout(absl::Condition(&ready), *timeout);
    } else {
      mu_.Await(absl::Condition(&ready));
    }
    --waiting_consumers_;
  }
  const absl::Time end = wait ? stall_clock_() : start;
  if (closed_) {
    stall_.RecordWait(start, end, StallMeter::Outcome::kNothing);
    last_error_ = absl::CancelledError("the data service client was cancelled");
    return last_error_;
  }
  if (!queue_.empty()) {
    Pushed& p = queue_.front();
    DecodedElement& e = p.elements[p.next++];
    const int64_t bytes = static_cast<int64_t>(e.bytes);
    buffered_bytes_ -= bytes;
    --buffered_elements_;
    ++elements_total_;
    bytes_total_ += bytes;
    stall_.RecordWait(start, end, StallMeter::Outcome::kElement);
    absl::StatusOr<std::optional<pipeline::Element>> out(absl::in_place, std::move(e.element));
    if (p.next == p.elements.size()) {
      --outstanding_;  // the push's last element: its slot returns
      queue_.pop_front();
      // Only read by IdleSince while the queue is empty: the clock is read when it empties.
      if (queue_.empty()) last_activity_ = absl::Now();
    }
    return out;
  }
  if (!fatal_.ok()) {
    stall_.RecordWait(start, end, StallMeter::Outcome::kNothing);
    last_error_ = fatal_;
    return fatal_;
  }
  if (end_) {
    stall_.RecordWait(start, end, StallMeter::Outcome::kEnd);
    return std::optional<pipeline::Element>();
  }
  stall_.RecordWait(start, end, StallMeter::Outcome::kNothing);
  return absl::DeadlineExceededError(
      absl::StrCat("no element within ", absl::FormatDuration(timeout.value_or(absl::ZeroDuration()))));
}

void ElementQueue::Close() {
  absl::MutexLock l(&mu_);
  closed_ = true;
}

void ElementQueue::BeginStep() {
  absl::MutexLock l(&mu_);
  stall_.BeginStep(stall_clock_());
}

void ElementQueue::EndStep() {
  absl::MutexLock l(&mu_);
  stall_.EndStep(stall_clock_());
}

absl::Status ElementQueue::last_error() const {
  absl::MutexLock l(&mu_);
  return last_error_;
}

ElementQueue::Stats ElementQueue::stats() const {
  absl::MutexLock l(&mu_);
  Stats s;
  s.elements_total = elements_total_;
  s.bytes_total = bytes_total_;
  s.buffered_elements = buffered_elements_;
  s.buffered_bytes = buffered_bytes_;
  s.peak_buffered_bytes = peak_buffered_bytes_;
  s.outstanding_requests = outstanding_;
  s.peak_outstanding_requests = peak_outstanding_;
  s.backpressure_waits = backpressure_waits_;
  s.waiting_consumers = waiting_consumers_;
  s.stall = stall_.Snap(stall_clock_());
  return s;
}

void ElementQueue::FillMetrics(service::ClientMetrics* metrics) const {
  absl::MutexLock l(&mu_);
  const StallMeter::Snapshot snap = stall_.Snap(stall_clock_());
  metrics->set_wait_seconds_total(snap.wait_seconds);
  metrics->set_step_seconds_total(snap.step_seconds);
  metrics->set_elements_total(elements_total_);
  metrics->set_bytes_total(bytes_total_);
}

bool ElementQueue::failed() const {
  absl::MutexLock l(&mu_);
  return !fatal_.ok();
}

std::optional<absl::Time> ElementQueue::IdleSince() const {
  absl::MutexLock l(&mu_);
  if (!queue_.empty()) return std::nullopt;
  return last_activity_;
}

}  // namespace sluice::client
