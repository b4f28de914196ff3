// Non-coordinated reading: one reader thread per selected task, each reading the task's elements
// from its worker with a streaming GetElements call and decoding them into the ElementQueue.
//
// Update() applies each heartbeat answer: the tasks to read are chosen by SelectTasks
// (task_selection.h) from the listed ones; readers of newly selected tasks start, readers of
// tasks no longer listed are stopped (their streams cancelled) and joined. Once the job has
// finished, a finished job lists no tasks, but a stream still open may carry its task's last
// elements (popped by the worker before the task reported finished): it is read to its
// end_of_sequence. Readers that can receive nothing more — between streams, or reconnecting
// without having received anything while the worker's connection is down (waiting,
// wait_for_ready, for a worker that may be gone for good) — are stopped. When the job has finished and every reader is done, the queue is told the
// data ended.
//
// A reader whose stream fails or closes without end_of_sequence reconnects as the retry policy
// says (retry_policy.h, kWorkerStream) for as long as the task is listed and the job unfinished;
// an error it cannot retry, or a malformed response, is the client's error (ElementQueue::Fail),
// delivered after the elements received before it.
//
// Locality preference (AUTO, sharding other than OFF): a remote task's reader yields to local ones
// — it waits while the buffer is a quarter full or more and a local task is being read — so local
// workers serve the trainer when they keep up and remote ones fill in when they do not.
//
// Threading: thread-safe. Lock order: this set's mutex, then a reader's CancelToken, then the
// queue's mutex (Update and StopAll cancel tokens and inform the queue under this set's lock).
#ifndef SLUICE_DATAPLANE_CLIENT_TASK_READERS_H_
#define SLUICE_DATAPLANE_CLIENT_TASK_READERS_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "dataplane/client/buffer_pool.h"
#include "dataplane/client/cancel_token.h"
#include "dataplane/client/element_queue.h"
#include "dataplane/client/service_rpc.h"
#include "dataservice.pb.h"

namespace sluice::client {

class TaskReaderSet {
 public:
  struct Options {
    int64_t job_client_id = 0;
    service::TargetWorkers target_workers = service::TARGET_WORKERS_AUTO;
    service::ShardingPolicy sharding = service::SHARDING_OFF;
    std::string client_host;
    service::Compression compression = service::COMPRESSION_AUTO;
    int max_elements_per_response = 0;
    uint64_t max_element_bytes = uint64_t{1} << 30;
    // Offer same-host shared memory to workers (docs/dataservice.md, "Same-host shared memory").
    bool shared_memory = true;
    absl::Duration initial_backoff = absl::Milliseconds(100);
    absl::Duration max_backoff = absl::Seconds(5);
  };

  // `workers` and `queue` must outlive this set; `buffers` recycles the elements' buffers.
  TaskReaderSet(Options options, WorkerRpc* workers, ElementQueue* queue, std::shared_ptr<BufferPool> buffers);
  ~TaskReaderSet();  // StopAll + JoinAll
  TaskReaderSet(const TaskReaderSet&) = delete;
  TaskReaderSet& operator=(const TaskReaderSet&) = delete;

  // Applies a heartbeat answer (see the class comment). Joins the readers it retires before
  // returning (without the lock held).
  void Update(const std::vector<service::TaskInfo>& tasks, bool job_finished) ABSL_LOCKS_EXCLUDED(mu_);
  // Stops every reader (cancels their streams and waits); no reader starts afterwards.
  void StopAll() ABSL_LOCKS_EXCLUDED(mu_);
  // Joins every reader thread (after StopAll, or once they ended).
  void JoinAll() ABSL_LOCKS_EXCLUDED(mu_);
  // Without the dispatcher's word: if at least one task was read and every task read has ended
  // with end_of_sequence (no stream open, none retrying), the data ended — as if the job finished.
  // Returns whether it did; `before_end` runs first (under this set's lock).
  bool EndIfEveryTaskEnded(const std::function<void()>& before_end) ABSL_LOCKS_EXCLUDED(mu_);

  int64_t active_readers() const ABSL_LOCKS_EXCLUDED(mu_);  // reader threads still running
  int64_t reconnects() const ABSL_LOCKS_EXCLUDED(mu_);      // streams opened again after a failure
  // Elements received (pushed into the queue) from each task read, since the start.
  std::map<int64_t, int64_t> received_by_task() const ABSL_LOCKS_EXCLUDED(received_mu_);

 private:
  struct Reader {
    service::TaskInfo info;
    bool local = false;            // the task runs on the client's host (fixed per task)
    bool yields_to_local = false;  // a remote task's reader under the locality preference
    std::atomic<bool> draining{false};  // its worker is being drained: read first (TaskInfo.draining)
    CancelToken stop;              // asked to stop (task no longer read, job finished, shutdown, error)
    std::thread thread;
    // Guarded by the set's mutex (the analysis cannot name it from here).
    bool stream_open = false;   // a stream is open (or being opened)
    bool reconnecting = false;  // the open stream is a retry that has received nothing yet
    bool done = false;          // the thread finished its loop
  };

  void StartReaderLocked(const service::TaskInfo& info) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ReaderLoop(Reader* r) ABSL_LOCKS_EXCLUDED(mu_);
  // Tells the queue how many readers there are, whether a local one is active, and, once the job
  // finished and every reader is done, that the data ended.
  void PublishLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const Options opts_;
  WorkerRpc* const workers_;
  ElementQueue* const queue_;
  const std::shared_ptr<BufferPool> buffers_;

  mutable absl::Mutex mu_;
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
  bool job_finished_ ABSL_GUARDED_BY(mu_) = false;
  std::map<int64_t, std::unique_ptr<Reader>> readers_ ABSL_GUARDED_BY(mu_);
  std::set<int64_t> finished_tasks_ ABSL_GUARDED_BY(mu_);  // end_of_sequence received
  int64_t reconnects_ ABSL_GUARDED_BY(mu_) = 0;
  // Its own mutex: taken per response by the readers, never with another lock held.
  mutable absl::Mutex received_mu_;
  std::map<int64_t, int64_t> received_ ABSL_GUARDED_BY(received_mu_);
};

}  // namespace sluice::client

#endif  // SLUICE_DATAPLANE_CLIENT_TASK_READERS_H_
