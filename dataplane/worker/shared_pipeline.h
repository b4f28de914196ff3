// Cross-job sharing: one pipeline run feeding several jobs of the same dataset on this worker.
//
// A SharedPipelineRun runs a pipeline once (one pass over the data, SHARDING_OFF) on its own thread
// into a sliding window of at most `window` encoded elements. Each reader (a sharing job's task)
// has its own cursor. The oldest element is evicted only after every reader has read it; when the
// window is full and the slowest reader still needs its oldest element, the producer waits. So every
// reader sees every element of the run while the pipeline runs once.
//
// A run accepts new readers only while it still holds its first element (nothing evicted yet); a
// job that arrives later starts a new run. SharedPipelineRegistry keeps the joinable run per
// dataset_id. A run stops producing when its last reader leaves.
//
// Threading: all methods are thread-safe. The run's producer thread is joined by its destructor.
#ifndef SLUICE_DATAPLANE_WORKER_SHARED_PIPELINE_H_
#define SLUICE_DATAPLANE_WORKER_SHARED_PIPELINE_H_

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "dataplane/pipeline/pipeline.h"
#include "dataplane/worker/cancel_token.h"
#include "dataplane/worker/element_buffer.h"
#include "dataplane/worker/worker_metrics.h"

namespace sluice::worker {

class SharedPipelineRun {
 public:
  // Starts producing when the first reader joins. `metrics` may be null.
  SharedPipelineRun(std::unique_ptr<pipeline::Pipeline> pipeline, size_t window, WorkerMetrics* metrics);
  ~SharedPipelineRun();

  // A new reader at the first element, or nullopt when that element is gone or the run stopped.
  std::optional<int64_t> TryAddReader();
  void RemoveReader(int64_t reader);
  // The reader's next element; nullopt at the end of the run. CANCELLED when `cancel` fires.
  absl::StatusOr<std::optional<EncodedElementPtr>> Next(int64_t reader, CancelToken* cancel);

  int64_t produced() const;   // elements produced so far
  size_t window_size() const; // elements held now

 private:
  void ProduceLoop();
  int64_t MinCursor() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  std::unique_ptr<pipeline::Pipeline> pipeline_;
  const size_t window_;
  WorkerMetrics* const metrics_;

  mutable absl::Mutex mu_;
  std::deque<EncodedElementPtr> elements_ ABSL_GUARDED_BY(mu_);
  int64_t base_ ABSL_GUARDED_BY(mu_) = 0;  // position of elements_.front()
  std::map<int64_t, int64_t> cursors_ ABSL_GUARDED_BY(mu_);  // reader -> next position
  int64_t next_reader_ ABSL_GUARDED_BY(mu_) = 0;
  bool done_ ABSL_GUARDED_BY(mu_) = false;
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status status_ ABSL_GUARDED_BY(mu_);

  std::thread producer_ ABSL_GUARDED_BY(mu_);
};

class SharedPipelineRegistry {
 public:
  SharedPipelineRegistry(size_t window, pipeline::RuntimeOptions runtime, WorkerMetrics* metrics)
      : window_(window), runtime_(runtime), metrics_(metrics) {}

  struct Membership {
    std::shared_ptr<SharedPipelineRun> run;
    int64_t reader = 0;
  };
  // Joins the joinable run of `dataset_id`, or starts one from `def`.
  absl::StatusOr<Membership> Join(const std::string& dataset_id, const pipeline::PipelineDef& def);

  size_t window() const { return window_; }

 private:
  const size_t window_;
  const pipeline::RuntimeOptions runtime_;
  WorkerMetrics* const metrics_;
  absl::Mutex mu_;
  std::map<std::string, std::weak_ptr<SharedPipelineRun>> runs_ ABSL_GUARDED_BY(mu_);
};

}  // namespace sluice::worker

#endif  // SLUICE_DATAPLANE_WORKER_SHARED_PIPELINE_H_
