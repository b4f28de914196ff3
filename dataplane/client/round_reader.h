// Coordinated reading (num_consumers > 0): one thread that fetches this consumer's element of
// round r = 0, 1, 2, ... with a GetElement call to the worker serving r (round_robin.h), one round
// in flight at a time, each element pushed to the ElementQueue.
//
// Answers: one element for round r — delivered, next round; round_skipped — next round, nothing
// delivered; end_of_sequence — the end for this consumer (the queue is told the data ended); an
// RPC error — retried as the retry policy says (kWorkerRound), the round's task recomputed from
// the latest task list each time, and not retried once the job finished; anything else (wrong
// count, another round's element, corrupt data) — a malformed response, the client's error.
//
// Update() applies each heartbeat answer: the task list, job_finished and a block_round. A
// proposed block is held only if this consumer has not started that round (the reader then does
// not start it, or any later round, before an answer without it, and FillHeartbeat acknowledges
// it); otherwise the next heartbeat (current_round past it) makes the dispatcher propose a later
// one. If every listed task starts after the consumer's round (it started late), it jumps to the
// earliest starting_round.
//
// Threading: thread-safe. Lock order: the reader's CancelToken, then this reader's mutex, then
// the queue's mutex.
#ifndef SLUICE_DATAPLANE_CLIENT_ROUND_READER_H_
#define SLUICE_DATAPLANE_CLIENT_ROUND_READER_H_

#include <cstdint>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "dataplane/client/cancel_token.h"
#include "dataplane/client/element_queue.h"
#include "dataplane/client/service_rpc.h"
#include "dataservice.pb.h"

namespace sluice::client {

class RoundReader {
 public:
  struct Options {
    int64_t job_client_id = 0;
    int32_t consumer_index = 0;
    service::Compression compression = service::COMPRESSION_AUTO;
    uint64_t max_element_bytes = uint64_t{1} << 30;
    absl::Duration rpc_timeout = absl::Seconds(10);
    absl::Duration initial_backoff = absl::Milliseconds(100);
    absl::Duration max_backoff = absl::Seconds(5);
  };

  // `workers` and `queue` must outlive this reader.
  RoundReader(Options options, WorkerRpc* workers, ElementQueue* queue);
  ~RoundReader();  // Stop + Join
  RoundReader(const RoundReader&) = delete;
  RoundReader& operator=(const RoundReader&) = delete;

  void Start();
  // Applies a heartbeat answer; true while this consumer holds a block (heartbeat sooner).
  bool Update(const service::ClientHeartbeatResponse& response) ABSL_LOCKS_EXCLUDED(mu_);
  // current_round (the round being fetched) and acked_block_round (the block held, 0: none).
  void FillHeartbeat(service::ClientHeartbeatRequest* request) const ABSL_LOCKS_EXCLUDED(mu_);
  // Cancels the round in flight and ends the loop; does not wait.
  void Stop() { stop_.Cancel(); }
  void Join();

  bool running() const ABSL_LOCKS_EXCLUDED(mu_);
  int64_t current_round() const ABSL_LOCKS_EXCLUDED(mu_);
  int64_t rounds_skipped() const ABSL_LOCKS_EXCLUDED(mu_);
  int64_t reconnects() const ABSL_LOCKS_EXCLUDED(mu_);  // GetElement calls retried after a failure

 private:
  void Loop() ABSL_LOCKS_EXCLUDED(mu_);

  const Options opts_;
  WorkerRpc* const workers_;
  ElementQueue* const queue_;
  CancelToken stop_;
  std::thread thread_;

  mutable absl::Mutex mu_;
  bool running_ ABSL_GUARDED_BY(mu_) = false;
  bool heard_ ABSL_GUARDED_BY(mu_) = false;  // a heartbeat was answered
  bool job_finished_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<service::TaskInfo> tasks_ ABSL_GUARDED_BY(mu_);  // as last listed by the dispatcher
  int64_t current_round_ ABSL_GUARDED_BY(mu_) = 0;  // the last round started (0 before any)
  bool round_started_ ABSL_GUARDED_BY(mu_) = false;
  // A worker is joining: do not start this round (or later) before a heartbeat answer without it.
  int64_t block_round_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t rounds_skipped_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t reconnects_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace sluice::client

#endif  // SLUICE_DATAPLANE_CLIENT_ROUND_READER_H_
