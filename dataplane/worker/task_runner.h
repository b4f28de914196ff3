// Task runners: what a worker runs for each task the dispatcher assigns to it.
//
// An ElementProducer yields a task's encoded elements over all its epochs: PipelineProducer runs
// the task's own pipeline with the split provider its sharding policy calls for (DYNAMIC: the
// dispatcher's splits; FILE: every num_workers-th split; DATA: the whole input with an element-level
// `shard`; OFF: everything); SharedProducer reads a cross-job-shared run (shared_pipeline.h).
//
// A TaskRunner drives a producer on its own thread:
//  - StreamingTaskRunner fills a bounded ElementBuffer that every GetElements stream of the task
//    pops from (job sharing: each element reaches exactly one reader);
//  - RoundRobinTaskRunner (coordinated reads, num_consumers = N > 0) prepares rounds of N elements
//    and serves GetElement(round, consumer_index): the first request for round r binds the oldest
//    prepared round to r; consumer c gets its c-th element; the round completes when all N took
//    theirs. With allow_skip_round, a round whose data is not ready within round_timeout of its
//    first request is skipped for every consumer.
//
// Threading: every public method is thread-safe; each runner owns one producer thread, joined by
// its destructor (which also interrupts blocked readers).
#ifndef SLUICE_DATAPLANE_WORKER_TASK_RUNNER_H_
#define SLUICE_DATAPLANE_WORKER_TASK_RUNNER_H_

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "dataplane/pipeline/pipeline.h"
#include "dataplane/worker/cancel_token.h"
#include "dataplane/worker/dispatcher_client.h"
#include "dataplane/worker/element_buffer.h"
#include "dataplane/worker/shared_pipeline.h"
#include "dataplane/worker/split_provider.h"
#include "dataplane/worker/worker_metrics.h"
#include "dataservice.pb.h"

namespace sluice::worker {

struct TaskRunnerOptions {
  size_t buffer_elements = 256;             // per task
  size_t buffer_bytes = 64 << 20;           // per task
  // Streaming tasks: small elements may pass buffer_elements up to this many bytes (ElementBuffer's
  // min_bytes; 0: buffer_elements bounds always).
  size_t buffer_min_bytes = 0;
  // Streaming tasks: the producer pauses while it has produced this many elements more than the
  // job's clients reported received (relayed by the dispatcher, see SetDelivered): what a killed
  // worker can take with it. 0: no cap (the buffer bounds alone).
  int64_t max_undelivered_elements = 0;
  absl::Duration round_timeout = absl::Seconds(1);
  pipeline::RuntimeOptions runtime;         // cpu budget for the task pipelines
  SplitProviderOptions splits;
  // Plugins a task's pipeline may name: only libraries inside these directories (symlinks and ".."
  // resolved; see pipeline::CheckPluginPath). Empty: a task naming any plugin fails (its readers
  // get FAILED_PRECONDITION naming the plugin and --plugin_dir).
  std::vector<std::string> plugin_dirs;
};

// What runners need from the worker. Pointers may be null where not needed (dispatcher: only
// DYNAMIC; sharing: only cross-job sharing; metrics: optional).
struct TaskRunnerEnv {
  TaskRunnerOptions options;
  DispatcherClient* dispatcher = nullptr;
  std::string worker_address;
  SharedPipelineRegistry* sharing = nullptr;
  WorkerMetrics* metrics = nullptr;
};

class ElementProducer {
 public:
  virtual ~ElementProducer() = default;
  // The next element; nullopt after the last epoch. Called by one thread at a time.
  virtual absl::StatusOr<std::optional<EncodedElementPtr>> Next() = 0;
  // Interrupts Next (any thread); Next returns CANCELLED from then on.
  virtual void Cancel() = 0;
  // Dynamic sharding: started splits to acknowledge (see DispatcherSplitProvider).
  virtual std::vector<uint64_t> TakeUnreportedStarts() { return {}; }
  virtual void RestoreUnreportedStarts(const std::vector<uint64_t>&) {}
  // Dynamic sharding, a drained worker: hand the input back (DispatcherSplitProvider::RequestRelease)
  // and end once what was read is produced. Any thread; idempotent. Other producers ignore it.
  virtual void ReleaseInput() {}
  // Whether the input is being handed back (ReleaseInput took effect).
  virtual bool Releasing() const { return false; }
};

// The producer for `task`: SharedProducer when it asks for cross-job sharing, else PipelineProducer.
// Errors name the TaskDef field at fault.
absl::StatusOr<std::unique_ptr<ElementProducer>> MakeElementProducer(const service::TaskDef& task,
                                                                     const TaskRunnerEnv& env);

// The pipeline def a task runs: the task's pipeline, plus an element-level `shard` for DATA.
absl::StatusOr<pipeline::PipelineDef> TaskPipelineDef(const service::TaskDef& task);

struct RoundElement {
  EncodedElementPtr element;   // set unless skipped or end_of_sequence
  bool round_skipped = false;
  bool end_of_sequence = false;
};

struct TaskProgressSnapshot {
  bool finished = false;          // all input produced and handed out
  int64_t elements_produced = 0;  // elements that entered the task's buffer
  int64_t buffered_elements = 0;
};

class TaskRunner {
 public:
  explicit TaskRunner(service::TaskDef def) : def_(std::move(def)) {}
  virtual ~TaskRunner() = default;
  TaskRunner(const TaskRunner&) = delete;
  TaskRunner& operator=(const TaskRunner&) = delete;

  const service::TaskDef& def() const { return def_; }
  int64_t task_id() const { return def_.task_id(); }
  bool coordinated() const { return def_.num_consumers() > 0; }

  // Streaming reads: see ElementBuffer::Pop.
  virtual absl::StatusOr<ElementBuffer::Batch> GetNextBatch(size_t max_elements, size_t max_bytes,
                                                            CancelToken* cancel) = 0;
  // Coordinated reads. `cancel` ends a wait (CANCELLED); a token cancelled beforehand makes this a
  // non-blocking attempt that answers when it can without waiting.
  virtual absl::StatusOr<RoundElement> GetRoundElement(int64_t round, int64_t consumer_index, bool allow_skip,
                                                       CancelToken* cancel) = 0;
  // Shutdown: stop producing; what is buffered (or the bound round) is still served, then readers
  // get UNAVAILABLE.
  virtual void BeginDrain() = 0;
  // Task deletion: stops producing, drops what is buffered and wakes every reader with `reason`
  // (readers of a task that had finished still get end_of_sequence). Does not wait for the
  // producer thread (the destructor joins it).
  virtual void Stop(absl::Status reason) = 0;
  // Coordinated reads: waits until no round is bound with elements not yet taken (or `deadline`).
  // True when none is.
  virtual bool WaitForRoundToComplete(absl::Time /*deadline*/) { return true; }
  virtual TaskProgressSnapshot Progress() const = 0;
  virtual std::vector<uint64_t> TakeUnreportedStarts() { return {}; }
  virtual void RestoreUnreportedStarts(const std::vector<uint64_t>&) {}
  // The elements of this task the job's clients reported received (from a dispatcher heartbeat
  // answer; only growth counts). Streaming tasks under max_undelivered_elements resume on it.
  virtual void SetDelivered(int64_t /*elements*/) {}
  // The dispatcher drains the worker: a DYNAMIC task hands its splits back and ends once its
  // pipeline flushed what it read (ElementProducer::ReleaseInput). Any thread; idempotent.
  virtual void ReleaseInput() {}
  // True unless the task is handing its input back and has not yet produced its last element or
  // had its buffer read (SIGTERM waits for this before it stops serving).
  virtual bool HandBackDone() const { return true; }

 protected:
  const service::TaskDef def_;
};

// The runner for `task`. A task whose pipeline cannot be built gets a runner that reports the error
// to its readers (and counts as finished), so clients see why.
std::unique_ptr<TaskRunner> CreateTaskRunner(const service::TaskDef& task, const TaskRunnerEnv& env);

class StreamingTaskRunner : public TaskRunner {
 public:
  StreamingTaskRunner(service::TaskDef def, std::unique_ptr<ElementProducer> producer, const TaskRunnerOptions& options);
  ~StreamingTaskRunner() override;

  absl::StatusOr<ElementBuffer::Batch> GetNextBatch(size_t max_elements, size_t max_bytes, CancelToken* cancel) override;
  absl::StatusOr<RoundElement> GetRoundElement(int64_t round, int64_t consumer_index, bool allow_skip,
                                               CancelToken* cancel) override;
  void BeginDrain() override;
  void Stop(absl::Status reason) override;
  TaskProgressSnapshot Progress() const override;
  std::vector<uint64_t> TakeUnreportedStarts() override { return producer_->TakeUnreportedStarts(); }
  void RestoreUnreportedStarts(const std::vector<uint64_t>& i) override { producer_->RestoreUnreportedStarts(i); }
  void SetDelivered(int64_t elements) override;
  void ReleaseInput() override { producer_->ReleaseInput(); }
  bool HandBackDone() const override;

 private:
  void ProduceLoop();
  // max_undelivered_elements: waits while produced - delivered reaches the cap. False when stopped.
  bool WaitForDeliveryRoom();

  std::unique_ptr<ElementProducer> producer_;
  ElementBuffer buffer_;
  CancelToken stop_;
  const int64_t max_undelivered_;
  std::atomic<int64_t> produced_{0};
  absl::Mutex delivery_mu_;
  int64_t delivered_ ABSL_GUARDED_BY(delivery_mu_) = 0;
  bool delivery_wait_stopped_ ABSL_GUARDED_BY(delivery_mu_) = false;
  std::atomic<bool> draining_{false};
  std::atomic<bool> stopped_{false};
  std::thread thread_;
};

class RoundRobinTaskRunner : public TaskRunner {
 public:
  RoundRobinTaskRunner(service::TaskDef def, std::unique_ptr<ElementProducer> producer, const TaskRunnerOptions& options);
  ~RoundRobinTaskRunner() override;

  absl::StatusOr<ElementBuffer::Batch> GetNextBatch(size_t max_elements, size_t max_bytes, CancelToken* cancel) override;
  absl::StatusOr<RoundElement> GetRoundElement(int64_t round, int64_t consumer_index, bool allow_skip,
                                               CancelToken* cancel) override;
  void BeginDrain() override;
  void Stop(absl::Status reason) override;
  bool WaitForRoundToComplete(absl::Time deadline) override;
  TaskProgressSnapshot Progress() const override;
  std::vector<uint64_t> TakeUnreportedStarts() override { return producer_->TakeUnreportedStarts(); }
  void RestoreUnreportedStarts(const std::vector<uint64_t>& i) override { producer_->RestoreUnreportedStarts(i); }

 private:
  void ProduceLoop();
  void BindRound(int64_t round) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void CompleteRound() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void SkipRound(int64_t round) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  std::unique_ptr<ElementProducer> producer_;
  const int64_t num_consumers_;
  const int64_t starting_round_;
  const absl::Duration round_timeout_;
  const size_t max_prepared_rounds_;

  mutable absl::Mutex mu_;
  std::deque<std::vector<EncodedElementPtr>> prepared_ ABSL_GUARDED_BY(mu_);
  int64_t current_round_ ABSL_GUARDED_BY(mu_) = -1;  // the round bound to `current_`, or -1
  std::vector<EncodedElementPtr> current_ ABSL_GUARDED_BY(mu_);
  std::vector<bool> taken_ ABSL_GUARDED_BY(mu_);
  int64_t taken_count_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t last_completed_round_ ABSL_GUARDED_BY(mu_) = -1;
  std::set<int64_t> skipped_ ABSL_GUARDED_BY(mu_);
  std::map<int64_t, absl::Time> round_deadlines_ ABSL_GUARDED_BY(mu_);
  uint64_t version_ ABSL_GUARDED_BY(mu_) = 0;  // bumped on every state change readers wait for
  int64_t produced_ ABSL_GUARDED_BY(mu_) = 0;
  bool done_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status status_ ABSL_GUARDED_BY(mu_);
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
  bool draining_ ABSL_GUARDED_BY(mu_) = false;
  bool aborted_ ABSL_GUARDED_BY(mu_) = false;  // Stop() was called
  std::thread thread_;
};

}  // namespace sluice::worker

#endif  // SLUICE_DATAPLANE_WORKER_TASK_RUNNER_H_
