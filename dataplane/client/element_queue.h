// The client's buffer of received elements, between the readers that fill it (task readers or the
// round reader) and the trainer's GetNext that empties it. It owns what both sides share:
//  - backpressure: a reader takes a slot (AcquireSlot) before each read and waits while the decoded
//    bytes buffered reach max_buffered_bytes, or while max_outstanding_requests reads are in
//    flight or buffered (0: no count bound; never fewer slots than readers, so an idle task cannot
//    starve the others). A reader that yields to local ones (see task_readers.h) waits already at a
//    quarter of the byte bound while a local reader is active; while a reader of a draining
//    worker's task is active, every other reader waits at a quarter too (the draining worker's
//    elements are read first, so that it can go). The slot returns when the consumer
//    pops the last element of what that read pushed (an empty push returns it at once);
//  - delivery in arrival order, then the client's error (Fail: sticky, after the elements buffered
//    before it), or the end of the data (SetEnd: once the buffer is drained);
//  - the consumer's side: Pop (blocking, optionally with a timeout), Close (Cancel: every Pop
//    returns CANCELLED), the stall meter (time blocked in Pop vs. steps) and the counters of what
//    was delivered.
//
// Threading: thread-safe; AcquireSlot and Pop block. Lock order: a CancelToken's mutex before this
// queue's (AcquireSlot registers a wake-up on the reader's token), so no code may cancel a token
// while holding this queue's mutex — the queue never does: Fail() runs its on_fail callback (which
// stops the readers) after unlocking.
#ifndef SLUICE_DATAPLANE_CLIENT_ELEMENT_QUEUE_H_
#define SLUICE_DATAPLANE_CLIENT_ELEMENT_QUEUE_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <optional>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "dataplane/client/cancel_token.h"
#include "dataplane/client/element_decoder.h"
#include "dataplane/client/stall_meter.h"
#include "dataplane/pipeline/tensor.h"
#include "dataservice.pb.h"

namespace sluice::client {

class ElementQueue {
 public:
  struct Limits {
    int64_t max_buffered_bytes = int64_t{256} << 20;
    int max_outstanding_requests = 64;  // 0: no count bound
  };
  struct Stats {
    int64_t elements_total = 0;  // popped
    int64_t bytes_total = 0;
    int64_t buffered_elements = 0;
    int64_t buffered_bytes = 0;
    int64_t peak_buffered_bytes = 0;
    int64_t outstanding_requests = 0;
    int64_t peak_outstanding_requests = 0;
    int64_t backpressure_waits = 0;
    int64_t waiting_consumers = 0;
    StallMeter::Snapshot stall;
  };

  // `stall_clock`: the clock of the stall metrics only. `on_fail`: called once, after the first
  // Fail(), without the queue's lock (the client stops its readers there).
  ElementQueue(Limits limits, std::function<absl::Time()> stall_clock, std::function<void()> on_fail);

  // ---- producers
  // Waits for room and takes a slot; false (no slot) once `stop` is cancelled, or the queue is
  // closed or failed. `yields_to_local`: see the class comment.
  // `drains` (may be null): the reader's task is on a draining worker, so it never yields; read at
  // every evaluation of the wait (it may turn true while the reader waits: SetReaders follows).
  bool AcquireSlot(CancelToken& stop, bool yields_to_local = false, const std::atomic<bool>* drains = nullptr)
      ABSL_LOCKS_EXCLUDED(mu_);
  void ReleaseSlot() ABSL_LOCKS_EXCLUDED(mu_);
  // Appends what one read gave, holding its slot until the last of them is popped; an empty push
  // releases the slot.
  void Push(std::vector<DecodedElement> elements) ABSL_LOCKS_EXCLUDED(mu_);
  // The client's error (the first one wins; later calls are ignored). Producers stop: AcquireSlot
  // returns false from now on.
  void Fail(absl::Status status) ABSL_LOCKS_EXCLUDED(mu_);
  // No more elements will come: Pop returns the end once the buffer is drained.
  void SetEnd() ABSL_LOCKS_EXCLUDED(mu_);
  // What the bounds depend on: the number of readers (each may hold a slot whatever the bound), and
  // whether a local task is being read (readers that yield to local ones then use a quarter of
  // the byte bound).
  void SetReaders(int64_t readers, bool local_reader_active, bool draining_reader_active = false)
      ABSL_LOCKS_EXCLUDED(mu_);

  // ---- consumer
  // The next element; std::nullopt at the end; the error after the elements before it; CANCELLED
  // once closed; DeadlineExceeded when `timeout` passed first.
  absl::StatusOr<std::optional<pipeline::Element>> Pop(std::optional<absl::Duration> timeout)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Wakes every Pop (CANCELLED, as are later calls) and every AcquireSlot (false).
  void Close() ABSL_LOCKS_EXCLUDED(mu_);
  void BeginStep() ABSL_LOCKS_EXCLUDED(mu_);
  void EndStep() ABSL_LOCKS_EXCLUDED(mu_);
  // The error the last Pop returned (OK when none did).
  absl::Status last_error() const ABSL_LOCKS_EXCLUDED(mu_);

  // ---- observers
  Stats stats() const ABSL_LOCKS_EXCLUDED(mu_);
  // Heartbeat metrics: wait and step seconds, elements and bytes delivered.
  void FillMetrics(service::ClientMetrics* metrics) const ABSL_LOCKS_EXCLUDED(mu_);
  bool failed() const ABSL_LOCKS_EXCLUDED(mu_);
  // Whether the buffer is empty and, if so, since when no element arrived or was taken (real
  // time, absl::Now): how long the client has been starved.
  std::optional<absl::Time> IdleSince() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  // What one Push gave, kept as it came (an Element's fields are inline, so moving each element
  // into a queue of its own would copy them once more): Pop moves elements[next] out; popping the
  // last one returns the push's slot.
  struct Pushed {
    explicit Pushed(std::vector<DecodedElement>&& e) : elements(std::move(e)) {}
    std::vector<DecodedElement> elements;
    size_t next = 0;
  };
  bool HasRoomLocked(bool yields_to_local, bool drains) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const Limits limits_;
  const std::function<absl::Time()> stall_clock_;
  const std::function<void()> on_fail_;

  mutable absl::Mutex mu_;
  std::deque<Pushed> queue_ ABSL_GUARDED_BY(mu_);  // none empty
  int64_t buffered_elements_ ABSL_GUARDED_BY(mu_) = 0;
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  bool end_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status fatal_ ABSL_GUARDED_BY(mu_);
  absl::Status last_error_ ABSL_GUARDED_BY(mu_);
  int64_t readers_ ABSL_GUARDED_BY(mu_) = 0;
  bool local_reader_active_ ABSL_GUARDED_BY(mu_) = false;
  bool draining_reader_active_ ABSL_GUARDED_BY(mu_) = false;
  int64_t buffered_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t peak_buffered_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t outstanding_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t peak_outstanding_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t backpressure_waits_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t elements_total_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t bytes_total_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t waiting_consumers_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Time last_activity_ ABSL_GUARDED_BY(mu_) = absl::Now();
  StallMeter stall_ ABSL_GUARDED_BY(mu_);
};

}  // namespace sluice::client

#endif  // SLUICE_DATAPLANE_CLIENT_ELEMENT_QUEUE_H_
