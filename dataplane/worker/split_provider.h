// DispatcherSplitProvider: the pipeline's SplitProvider under SHARDING_DYNAMIC. It fetches splits
// from the dispatcher in batches (GetSplits with max_splits), keeps a small local queue and refills
// it in the background before it runs dry, so the source rarely waits for an RPC and the dispatcher
// sees one call per several splits rather than one per split or per element.
//
// Protocol (see docs/dataservice-worker.md):
//  - a split counts as started when GetNext hands it to the source. With ack_before_start (the
//    default) GetNext returns it only after a GetSplits call carrying its index succeeded, so the
//    dispatcher knows it started before any of its elements can reach a client: a worker killed at
//    any moment never causes a split to be read twice. (One GetSplits per split; it also refills.)
//    Without it, the index is reported on the next GetSplits call, or by the worker's heartbeat
//    (TakeUnreportedStarts), whichever comes first — a crash in between lets the dispatcher hand
//    the split out again. Failed reports are put back and re-sent (the dispatcher treats repeated
//    acks as one);
//  - position leases (with ack_before_start and `leases`): the first lease of a split travels with
//    its start acknowledgement (skip + lease_elements); RenewLease asks for more ahead, when half
//    of the lease is left, doubling the window up to max_lease_elements, and blocks only if the
//    reader catches up with an unacknowledged lease. SplitFinished reports the end of a split with
//    the next call (made at once); GetNext does not report the end of the epoch before every
//    finished split was acknowledged, so the dispatcher never mistakes a read split for a remainder.
//    What a lost worker leased but had not delivered is lost (at most once); the rest of its
//    splits is read by others (docs/dataservice.md, "Worker loss");
//  - request.epoch is this task's epoch (0-based). end_of_splits ends the epoch: GetNext returns
//    nullopt until Reset() moves to the next epoch. A response with no splits and no end_of_splits
//    means "nothing now, ask again" (the next epoch is not open yet, or other splits of this one
//    are not started yet): polled with backoff, cut short when the source waits on an empty queue
//    and there are starts to report (they may be what ends the epoch);
//  - release (a drained worker: RequestRelease, or GetSplitsResponse.release): the provider starts
//    no further split, hands its queued ones back (returned_split_indices), and its readers stop
//    before their next element and hand the rest of their splits back at that exact position
//    (SplitProgress.released: a remainder for another worker, nothing read twice or lost). GetNext
//    then returns the end once the dispatcher acknowledged every hand-back, and Reset no longer
//    asks the dispatcher anything: the task ends after its pipeline flushed what it read. Needs
//    leases to stop mid-split; without them a split being read is read to its end;
//  - UNAVAILABLE, DEADLINE_EXCEEDED, RESOURCE_EXHAUSTED, ABORTED and a CANCELLED the provider did not
//    cause (the dispatcher shut down mid-call) are retried with exponential backoff (a restarting
//    dispatcher); other errors are returned by GetNext once the queue is empty;
//  - Cancel() (or destruction) interrupts a waiting GetNext, an in-flight RPC and any backoff.
//
// Threading: one background fetch thread per provider; all public methods are thread-safe.
#ifndef SLUICE_DATAPLANE_WORKER_SPLIT_PROVIDER_H_
#define SLUICE_DATAPLANE_WORKER_SPLIT_PROVIDER_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "dataplane/pipeline/source.h"
#include "dataplane/worker/cancel_token.h"
#include "dataplane/worker/dispatcher_client.h"

namespace sluice::worker {

struct SplitProviderOptions {
  int max_splits = 8;          // the most splits held locally (queued, fetched but not started)
  int refill_threshold = -1;   // fetch more when the queue holds this many or fewer; -1: max_splits / 4
  bool ack_before_start = true;  // GetNext waits until the dispatcher acknowledged the split's start
  bool leases = true;            // position leases (needs ack_before_start)
  int64_t lease_elements = 32;   // first lease window of a split, in elements
  int64_t max_lease_elements = 2048;  // the window doubles per renewal up to this
  absl::Duration initial_backoff = absl::Milliseconds(10);
  absl::Duration max_backoff = absl::Seconds(1);       // after errors
  absl::Duration max_poll_interval = absl::Milliseconds(50);  // "nothing now" answers (cheap for the dispatcher)
};

// Where a provider's reader spent its time waiting, and what its GetSplits calls cost; cumulative
// since the provider was made (for the sharding benchmark's analysis and the worker's epoch logs).
struct SplitProviderStats {
  int64_t rpcs = 0;                   // GetSplits calls made (failed ones included)
  double rpc_seconds = 0;             // their total round-trip time
  int64_t splits_started = 0;
  double wait_first_split_seconds = 0;  // GetNext blocked for the first split of an epoch (job start,
                                       // the next epoch not open yet while other tasks finish theirs)
  double wait_split_seconds = 0;      // GetNext blocked for a later split (the prefetch fell behind)
  double wait_end_seconds = 0;        // GetNext blocked until end_of_splits (other tasks' last splits)
  double wait_ack_seconds = 0;        // GetNext blocked until the split's start was acknowledged
  double wait_lease_seconds = 0;      // RenewLease blocked on an unacknowledged lease
  double wait_epoch_end_seconds = 0;  // GetNext at the end of an epoch, until the finishes were acknowledged
};

class DispatcherSplitProvider : public pipeline::SplitProvider {
 public:
  // `dispatcher` must outlive the provider.
  DispatcherSplitProvider(DispatcherClient* dispatcher, int64_t task_id, std::string worker_address,
                          SplitProviderOptions options = {});
  ~DispatcherSplitProvider() override;

  absl::StatusOr<std::optional<pipeline::Split>> GetNext() override;
  absl::Status Reset() override;
  absl::StatusOr<pipeline::SplitLease> RenewLease(const pipeline::Split& split, int64_t position) override;
  void SplitFinished(const pipeline::Split& split, int64_t elements) override;
  bool UsesLeases() const override { return leases_on(); }
  bool ReleaseRequested() const override { return release_flag_.load(std::memory_order_relaxed); }
  void SplitReleased(const pipeline::Split& split, int64_t position) override;

  // Hands the input back (see "release" above). Any thread; idempotent.
  void RequestRelease();
  // Whether the input is being (or was) handed back.
  bool releasing() const { return release_flag_.load(); }

  // Stops fetching; GetNext and Reset return CANCELLED from now on.
  void Cancel();

  // Started split indices not yet reported to the dispatcher; the caller reports them (heartbeat)
  // and gives them back with RestoreUnreportedStarts if that fails. Always empty with
  // ack_before_start (the provider reports every start itself before the split is read).
  std::vector<uint64_t> TakeUnreportedStarts();
  void RestoreUnreportedStarts(const std::vector<uint64_t>& indices);

  int64_t epoch() const;
  SplitProviderStats stats() const;
  int64_t get_splits_calls() const;   // RPCs made, including failed ones
  int64_t splits_started() const;     // splits handed to the source so far

 private:
  void FetchLoop();
  bool NeedFetch() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool NeedAck() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool FinishesPending() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Hand-backs not acknowledged yet (returned splits, released leases).
  bool ReleasesPending() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool DirtyLeases() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void StartReleaseLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool leases_on() const { return options_.ack_before_start && options_.leases; }

  // A started split's lease, until its end is acknowledged.
  struct Lease {
    int64_t epoch = 0;       // the job epoch the split was handed out in
    int64_t granted = -1;    // acknowledged lease end
    int64_t requested = -1;  // lease end to report
    int64_t window = 0;
    bool finished = false;
    bool released = false;   // handed back at released_at (a drained worker)
    int64_t released_at = -1;
    bool dirty = false;      // requested, finished or released not sent yet
  };

  DispatcherClient* const dispatcher_;
  const int64_t task_id_;
  const std::string worker_address_;
  const SplitProviderOptions options_;
  const size_t refill_threshold_;
  CancelToken cancel_;  // interrupts the in-flight RPC and backoff waits

  mutable absl::Mutex mu_;
  std::deque<std::pair<pipeline::Split, int64_t>> queue_ ABSL_GUARDED_BY(mu_);  // split, its epoch
  std::map<uint64_t, Lease> leases_ ABSL_GUARDED_BY(mu_);
  std::vector<uint64_t> unreported_starts_ ABSL_GUARDED_BY(mu_);
  int64_t epoch_ ABSL_GUARDED_BY(mu_) = 0;
  bool end_of_splits_ ABSL_GUARDED_BY(mu_) = false;
  bool fetch_in_flight_ ABSL_GUARDED_BY(mu_) = false;
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status error_ ABSL_GUARDED_BY(mu_);
  int64_t calls_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t started_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t started_in_epoch_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t acked_ ABSL_GUARDED_BY(mu_) = 0;  // ack_before_start: starts 1..acked_ are acknowledged
  int waiting_readers_ ABSL_GUARDED_BY(mu_) = 0;  // GetNext calls waiting for a split
  bool release_ ABSL_GUARDED_BY(mu_) = false;     // handing the input back
  std::atomic<bool> release_flag_{false};          // release_, read without the lock by readers
  std::vector<uint64_t> returns_ ABSL_GUARDED_BY(mu_);  // unstarted splits to hand back, until acknowledged
  SplitProviderStats stats_ ABSL_GUARDED_BY(mu_);

  std::thread fetcher_;
};

// Conversions between the wire and the pipeline's split.
pipeline::Split FromProto(const service::Split& split);
service::Split ToProto(const pipeline::Split& split);

}  // namespace sluice::worker

#endif  // SLUICE_DATAPLANE_WORKER_SPLIT_PROVIDER_H_
