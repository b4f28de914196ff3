#include "dataplane/pipeline/stats.h"

#include <ctime>

namespace sluice::pipeline {

StageStatsSnapshot StageStats::Snapshot() const {
  StageStatsSnapshot s;
  s.index = index_;
  s.name = name_;
  s.kind = kind_;
  s.elements_in = elements_in_.load(std::memory_order_relaxed);
  s.elements_out = elements_out_.load(std::memory_order_relaxed);
  s.bytes_in = bytes_in_.load(std::memory_order_relaxed);
  s.bytes_out = bytes_out_.load(std::memory_order_relaxed);
  s.cpu_ns = cpu_ns_.load(std::memory_order_relaxed);
  s.wait_ns = wait_ns_.load(std::memory_order_relaxed);
  s.errors_skipped = errors_skipped_.load(std::memory_order_relaxed);
  s.parallelism = parallelism_.load(std::memory_order_relaxed);
  s.buffer_size = buffer_size_.load(std::memory_order_relaxed);
  s.buffered = buffered_.load(std::memory_order_relaxed);
  return s;
}

StageStats* PipelineStats::AddStage(std::string name, std::string kind) {
  absl::MutexLock lock(&mu_);
  stages_.push_back(std::make_unique<StageStats>(static_cast<int>(stages_.size()), std::move(name), std::move(kind)));
  return stages_.back().get();
}

std::vector<StageStatsSnapshot> PipelineStats::Snapshot() const {
  absl::MutexLock lock(&mu_);
  std::vector<StageStatsSnapshot> out;
  out.reserve(stages_.size());
  for (const auto& s : stages_) out.push_back(s->Snapshot());
  return out;
}

uint64_t ThreadCpuNanos() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ULL + static_cast<uint64_t>(ts.tv_nsec);
}

uint64_t MonotonicNanos() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ULL + static_cast<uint64_t>(ts.tv_nsec);
}

}  // namespace sluice::pipeline
