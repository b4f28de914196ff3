#include "dataplane/worker/shared_pipeline.h"

#include <algorithm>
#include <limits>

#include "absl/strings/str_cat.h"
#include "common/log.h"
#include "dataplane/worker/response_encoder.h"

namespace sluice::worker {

SharedPipelineRun::SharedPipelineRun(std::unique_ptr<pipeline::Pipeline> pipeline, size_t window,
                                     WorkerMetrics* metrics)
    : pipeline_(std::move(pipeline)), window_(std::max<size_t>(1, window)), metrics_(metrics) {
}

SharedPipelineRun::~SharedPipelineRun() {
  {
    absl::MutexLock lock(&mu_);
    stopped_ = true;
  }
  if (producer_.joinable()) producer_.join();
}

int64_t SharedPipelineRun::MinCursor() const {
  int64_t min = std::numeric_limits<int64_t>::max();
  for (const auto& [reader, cursor] : cursors_) min = std::min(min, cursor);
  return min;
}

void SharedPipelineRun::ProduceLoop() {
  auto iterator = pipeline_->MakeIterator();
  if (!iterator.ok()) {
    absl::MutexLock lock(&mu_);
    done_ = true;
    status_ = iterator.status();
    return;
  }
  WireEncoder encoder;
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      // Room means: below the window, or the oldest element was read by every reader.
      auto room = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return stopped_ || elements_.size() < window_ || MinCursor() > base_;
      };
      mu_.Await(absl::Condition(&room));
      if (stopped_) break;
      const int64_t min_cursor = MinCursor();
      while (elements_.size() >= window_ && min_cursor > base_) {
        elements_.pop_front();
        ++base_;
      }
    }
    auto next = (*iterator)->Next();
    absl::StatusOr<EncodedElementPtr> encoded;
    if (next.ok() && next->has_value()) encoded = encoder.Encode(**next, service::COMPRESSION_AUTO);
    absl::MutexLock lock(&mu_);
    if (!next.ok() || (next->has_value() && !encoded.ok())) {
      done_ = true;
      status_ = next.ok() ? encoded.status() : next.status();
      break;
    }
    if (!next->has_value()) {
      done_ = true;
      break;
    }
    if (metrics_ != nullptr) metrics_->AddProduced(1, static_cast<int64_t>((*encoded)->size()));
    elements_.push_back(*std::move(encoded));
  }
  iterator->reset();
}

std::optional<int64_t> SharedPipelineRun::TryAddReader() {
  absl::MutexLock lock(&mu_);
  if (stopped_ || base_ > 0) return std::nullopt;
  int64_t reader = next_reader_++;
  cursors_[reader] = 0;
  if (!producer_.joinable()) {
    // Start with the first reader, so nothing can be evicted before it is registered.
    if (metrics_ != nullptr) metrics_->AddPipelineRun();
    producer_ = std::thread([this] { ProduceLoop(); });
  }
  return reader;
}

void SharedPipelineRun::RemoveReader(int64_t reader) {
  absl::MutexLock lock(&mu_);
  cursors_.erase(reader);
  if (cursors_.empty()) stopped_ = true;  // nobody can join once a reader has gone: stop producing
}

absl::StatusOr<std::optional<EncodedElementPtr>> SharedPipelineRun::Next(int64_t reader, CancelToken* cancel) {
  CancelCallback wake(cancel, [this] { absl::MutexLock lock(&mu_); });
  absl::MutexLock lock(&mu_);
  auto it = cursors_.find(reader);
  if (it == cursors_.end()) return absl::InternalError(absl::StrCat("shared pipeline: reader ", reader, " is not registered"));
  int64_t& cursor = it->second;
  auto ready = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return IsCancelled(cancel) || done_ || stopped_ || cursor < base_ + static_cast<int64_t>(elements_.size());
  };
  mu_.Await(absl::Condition(&ready));
  if (cursor < base_ + static_cast<int64_t>(elements_.size())) {
    EncodedElementPtr element = elements_[static_cast<size_t>(cursor - base_)];
    ++cursor;
    return std::optional<EncodedElementPtr>(std::move(element));
  }
  if (!status_.ok()) return status_;
  if (!done_) return absl::CancelledError(stopped_ ? "shared pipeline run stopped" : "shared pipeline read cancelled");
  return std::optional<EncodedElementPtr>();
}

int64_t SharedPipelineRun::produced() const {
  absl::MutexLock lock(&mu_);
  return base_ + static_cast<int64_t>(elements_.size());
}

size_t SharedPipelineRun::window_size() const {
  absl::MutexLock lock(&mu_);
  return elements_.size();
}

absl::StatusOr<SharedPipelineRegistry::Membership> SharedPipelineRegistry::Join(const std::string& dataset_id,
                                                                                const pipeline::PipelineDef& def) {
  absl::MutexLock lock(&mu_);
  // Drop runs nobody holds any more.
  for (auto it = runs_.begin(); it != runs_.end();) {
    it = it->second.expired() ? runs_.erase(it) : std::next(it);
  }
  if (auto it = runs_.find(dataset_id); it != runs_.end()) {
    if (auto run = it->second.lock()) {
      if (auto reader = run->TryAddReader()) return Membership{std::move(run), *reader};
    }
  }
  auto pipeline = pipeline::Pipeline::Create(def, runtime_);
  if (!pipeline.ok()) {
    return absl::Status(pipeline.status().code(),
                        absl::StrCat("dataset_id ", dataset_id, ": pipeline: ", pipeline.status().message()));
  }
  auto run = std::make_shared<SharedPipelineRun>(*std::move(pipeline), window_, metrics_);
  auto reader = run->TryAddReader();
  if (!reader) return absl::InternalError("a new shared pipeline run refused its first reader");
  runs_[dataset_id] = run;
  SLUICE_LOG(Info, "shared pipeline run started").With("dataset_id", dataset_id).With("window", static_cast<int64_t>(window_));
  return Membership{std::move(run), *reader};
}

}  // namespace sluice::worker
