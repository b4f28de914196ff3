// Per-stage statistics: every stage of a running pipeline counts elements and bytes in and out,
// the CPU time of its own work and the time its consumer spent waiting on it. AutoOrder, the
// autotuner, the CLI's per-stage table and the worker's metrics all read these.
//
// Thread-safe: counters are atomics updated by whichever thread does the stage's work.
#ifndef SLUICE_DATAPLANE_PIPELINE_STATS_H_
#define SLUICE_DATAPLANE_PIPELINE_STATS_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include <string>
#include <vector>

namespace sluice::pipeline {

struct StageStatsSnapshot {
  int index = 0;
  std::string name;         // e.g. "map[decode_jpeg+random_resized_crop]"
  std::string kind;         // source, map, filter, batch, ...
  uint64_t elements_in = 0;
  uint64_t elements_out = 0;
  uint64_t bytes_in = 0;
  uint64_t bytes_out = 0;
  uint64_t cpu_ns = 0;      // CPU time spent in this stage's own work (all threads)
  uint64_t wait_ns = 0;     // time this stage's consumer waited for its next element (estimated: one call in 16 is timed)
  uint64_t errors_skipped = 0;
  int64_t parallelism = 0;  // current parallelism (maps, interleave), 0 if not parallel
  int64_t buffer_size = 0;  // current buffer target (prefetch, shuffle), 0 if none
  int64_t buffered = 0;     // elements currently buffered
};

class StageStats {
 public:
  StageStats(int index, std::string name, std::string kind)
      : index_(index), name_(std::move(name)), kind_(std::move(kind)) {}

  void AddIn(uint64_t bytes) {
    elements_in_.fetch_add(1, std::memory_order_relaxed);
    bytes_in_.fetch_add(bytes, std::memory_order_relaxed);
  }
  void AddOut(uint64_t bytes) {
    elements_out_.fetch_add(1, std::memory_order_relaxed);
    bytes_out_.fetch_add(bytes, std::memory_order_relaxed);
  }
  void AddCpu(uint64_t ns) { cpu_ns_.fetch_add(ns, std::memory_order_relaxed); }
  void AddWait(uint64_t ns) { wait_ns_.fetch_add(ns, std::memory_order_relaxed); }
  void AddSkipped() { errors_skipped_.fetch_add(1, std::memory_order_relaxed); }
  void SetParallelism(int64_t p) { parallelism_.store(p, std::memory_order_relaxed); }
  void SetBufferSize(int64_t b) { buffer_size_.store(b, std::memory_order_relaxed); }
  void SetBuffered(int64_t b) { buffered_.store(b, std::memory_order_relaxed); }

  uint64_t cpu_ns() const { return cpu_ns_.load(std::memory_order_relaxed); }
  uint64_t elements_out() const { return elements_out_.load(std::memory_order_relaxed); }
  const std::string& name() const { return name_; }
  const std::string& kind() const { return kind_; }
  int index() const { return index_; }
  StageStatsSnapshot Snapshot() const;

 private:
  const int index_;
  const std::string name_;
  const std::string kind_;
  std::atomic<uint64_t> elements_in_{0}, elements_out_{0}, bytes_in_{0}, bytes_out_{0};
  std::atomic<uint64_t> cpu_ns_{0}, wait_ns_{0}, errors_skipped_{0};
  std::atomic<int64_t> parallelism_{0}, buffer_size_{0}, buffered_{0};
};

// The stats of all stages of one pipeline, in pipeline order (source first).
class PipelineStats {
 public:
  StageStats* AddStage(std::string name, std::string kind);
  std::vector<StageStatsSnapshot> Snapshot() const;

 private:
  mutable absl::Mutex mu_;
  std::vector<std::unique_ptr<StageStats>> stages_ ABSL_GUARDED_BY(mu_);  // append-only
};

// CPU time consumed by the calling thread, in nanoseconds.
uint64_t ThreadCpuNanos();
// Monotonic wall time in nanoseconds.
uint64_t MonotonicNanos();

// Adds the calling thread's CPU time between construction and destruction to a stage.
class ScopedCpuTimer {
 public:
  explicit ScopedCpuTimer(StageStats* stats) : stats_(stats), start_(ThreadCpuNanos()) {}
  ~ScopedCpuTimer() {
    if (stats_ != nullptr) stats_->AddCpu(ThreadCpuNanos() - start_);
  }
  ScopedCpuTimer(const ScopedCpuTimer&) = delete;
  ScopedCpuTimer& operator=(const ScopedCpuTimer&) = delete;

 private:
  StageStats* stats_;
  uint64_t start_;
};

}  // namespace sluice::pipeline

#endif  // SLUICE_DATAPLANE_PIPELINE_STATS_H_
