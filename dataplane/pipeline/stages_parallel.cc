// Parallel stages: map (ordered or unordered parallel application of element ops), interleave
// (several source splits read at once) and prefetch (a background producer).
#include <algorithm>
#include <deque>
#include <map>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "dataplane/pipeline/stages.h"

namespace sluice::pipeline {
namespace {

constexpr absl::Duration kCancelPoll = absl::Milliseconds(50);

// Applies a map's ops to one element, with per-op seeds derived from the element's key.
absl::Status ApplyOps(const std::vector<std::unique_ptr<ElementOp>>& ops, const std::vector<OpSeedSlot>& slots,
                      uint64_t pipeline_seed, Element& e) {
  for (size_t j = 0; j < ops.size(); ++j) {
    if (auto s = ops[j]->Apply(e, OpSeed(pipeline_seed, slots[j], e.key())); !s.ok()) return s;
  }
  return absl::OkStatus();
}

class MapStage;

// Runs the ops inline on the consumer's thread (parallelism 1).
class SequentialMapIterator : public StageIterator {
 public:
  SequentialMapIterator(const MapStage* stage, std::unique_ptr<StageIterator> input, ExecContext& ctx)
      : stage_(stage), input_(std::move(input)), ctx_(ctx) {}
  NextResult Next() override;

 private:
  const MapStage* stage_;
  std::unique_ptr<StageIterator> input_;
  ExecContext& ctx_;
};

// Pulls inputs on worker threads and applies the ops in parallel; results are returned in input
// order (deterministic) or as they finish. Outstanding work is bounded by twice the parallelism.
class ParallelMapIterator : public StageIterator {
 public:
  ParallelMapIterator(const MapStage* stage, std::unique_ptr<StageIterator> input, ExecContext& ctx,
                      std::shared_ptr<Tunable> parallelism);
  ~ParallelMapIterator() override;
  NextResult Next() override;

 private:
  struct Result {
    enum class Kind { kElement, kSkipped, kEnd, kError } kind;
    std::optional<Element> element;
    absl::Status status;
  };
  void Work(int index);
  int64_t ChunkSize() const;

  const MapStage* stage_;
  std::unique_ptr<StageIterator> input_ ABSL_GUARDED_BY(input_mu_);
  ExecContext& ctx_;
  std::shared_ptr<Tunable> parallelism_;

  absl::Mutex input_mu_;
  uint64_t next_input_ ABSL_GUARDED_BY(input_mu_) = 0;
  bool input_exhausted_ ABSL_GUARDED_BY(input_mu_) = false;

  absl::Mutex mu_;
  absl::CondVar consumer_cv_;  // a result arrived
  absl::CondVar worker_cv_;    // a slot freed, or the input ended
  std::map<uint64_t, Result> results_ ABSL_GUARDED_BY(mu_);
  int64_t outstanding_ ABSL_GUARDED_BY(mu_) = 0;  // reserved slots: in flight + finished, not consumed
  uint64_t next_output_ ABSL_GUARDED_BY(mu_) = 0;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;   // the consumer saw the end
  bool input_done_ ABSL_GUARDED_BY(mu_) = false; // a worker saw the end or an error
  std::vector<std::thread> threads_;
};

class MapStage : public Stage {
 public:
  MapStage(std::unique_ptr<Stage> input, std::vector<std::unique_ptr<ElementOp>> ops, std::vector<OpSeedSlot> seed_slots,
           std::string ops_description, const Args& args, StageStats* stats)
      : Stage(std::move(input), stats), ops_(std::move(ops)), seed_slots_(std::move(seed_slots)),
        ops_description_(std::move(ops_description)), parallelism_(args.Int("parallelism", kAuto)),
        deterministic_(args.Bool("deterministic", true)), skip_errors_(args.String("on_error", "fail") == "skip") {}

  std::string Describe() const override {
    return absl::StrCat("map[", ops_description_, "] parallelism=",
                        parallelism_ == kAuto ? std::string("auto") : absl::StrCat(parallelism_),
                        deterministic_ ? "" : " unordered", skip_errors_ ? " on_error=skip" : "");
  }

  // Applies the ops; returns true when the element was kept, false when skipped.
  absl::StatusOr<bool> Process(Element& e, uint64_t pipeline_seed, int64_t max_bytes) const {
    ScopedCpuTimer timer(stats());
    absl::Status s = ApplyOps(ops_, seed_slots_, pipeline_seed, e);
    if (s.ok()) s = CheckElementSize(e, max_bytes, stats());
    if (!s.ok()) {
      bool op_skips = s.code() == absl::StatusCode::kDataLoss;  // see ElementOp::Apply
      if ((skip_errors_ || op_skips) && s.code() != absl::StatusCode::kResourceExhausted) {
        stats()->AddSkipped();
        return false;
      }
      return s;
    }
    return true;
  }
  bool deterministic() const { return deterministic_; }

 protected:
  absl::StatusOr<std::unique_ptr<StageIterator>> MakeRawIterator(ExecContext& ctx) const override {
    auto input = MakeInputIterator(ctx);
    if (!input.ok()) return input.status();
    if (parallelism_ == 1) {
      stats()->SetParallelism(1);
      return std::unique_ptr<StageIterator>(new SequentialMapIterator(this, *std::move(input), ctx));
    }
    auto tunable = std::make_shared<Tunable>();
    tunable->kind = Tunable::Kind::kParallelism;
    tunable->stats = stats();
    if (parallelism_ == kAuto) {
      tunable->max = std::max(1, ctx.cpu_budget);
      tunable->value = tunable->max;  // the autotuner rebalances once costs are measured
      if (ctx.autotune) ctx.tunables.push_back(tunable);
    } else {
      tunable->max = parallelism_;
      tunable->value = parallelism_;
    }
    stats()->SetParallelism(tunable->value);
    return std::unique_ptr<StageIterator>(new ParallelMapIterator(this, *std::move(input), ctx, tunable));
  }

 private:
  std::vector<std::unique_ptr<ElementOp>> ops_;
  std::vector<OpSeedSlot> seed_slots_;  // parallel to ops_
  std::string ops_description_;
  int64_t parallelism_;
  bool deterministic_;
  bool skip_errors_;
};

NextResult SequentialMapIterator::Next() {
  while (true) {
    NextResult r = input_->Next();
    if (!r.ok() || !r->has_value()) return r;
    auto kept = stage_->Process(**r, ctx_.seed, ctx_.max_element_bytes);
    if (!kept.ok()) return kept.status();
    if (*kept) return r;
  }
}

ParallelMapIterator::ParallelMapIterator(const MapStage* stage, std::unique_ptr<StageIterator> input,
                                         ExecContext& ctx, std::shared_ptr<Tunable> parallelism)
    : stage_(stage), input_(std::move(input)), ctx_(ctx), parallelism_(std::move(parallelism)) {
  for (int i = 0; i < parallelism_->max; ++i) threads_.emplace_back([this, i] { Work(i); });
}

ParallelMapIterator::~ParallelMapIterator() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
    worker_cv_.SignalAll();
  }
  for (auto& t : threads_) t.join();
}

// How many inputs a worker takes at once: cheap ops are processed in chunks so that locking and
// wake-ups do not dominate; expensive ones one at a time for the best load balance.
int64_t ParallelMapIterator::ChunkSize() const {
  uint64_t n = stage_->stats()->elements_out();
  if (n < 16) return 4;
  uint64_t cost = stage_->stats()->cpu_ns() / n;
  if (cost < 20'000) return 64;
  if (cost < 200'000) return 8;
  return 1;
}

void ParallelMapIterator::Work(int index) {
  std::vector<std::pair<uint64_t, NextResult>> inputs;
  std::vector<std::pair<uint64_t, Result>> done;
  while (true) {
    int64_t want;
    {
      absl::MutexLock lock(&mu_);
      int64_t capacity;
      while (true) {
        if (stop_ || input_done_ || ctx_.cancel->cancelled) return;
        int64_t target = std::max<int64_t>(1, parallelism_->value.load(std::memory_order_relaxed));
        capacity = 2 * target * ChunkSize();
        if (index < target && outstanding_ < capacity) break;
        worker_cv_.WaitWithTimeout(&mu_, kCancelPoll);
      }
      want = std::min(ChunkSize(), capacity - outstanding_);
      outstanding_ += want;
    }
    inputs.clear();
    {
      absl::MutexLock lock(&input_mu_);
      while (!input_exhausted_ && static_cast<int64_t>(inputs.size()) < want) {
        uint64_t seq = next_input_++;
        NextResult in = input_->Next();
        if (!in.ok() || !in->has_value()) input_exhausted_ = true;
        inputs.emplace_back(seq, std::move(in));
      }
    }
    done.clear();
    for (auto& [seq, in] : inputs) {
      if (!in.ok()) {
        done.emplace_back(seq, Result{Result::Kind::kError, std::nullopt, in.status()});
      } else if (!in->has_value()) {
        done.emplace_back(seq, Result{Result::Kind::kEnd, std::nullopt, absl::OkStatus()});
      } else {
        auto kept = stage_->Process(**in, ctx_.seed, ctx_.max_element_bytes);
        if (!kept.ok()) {
          done.emplace_back(seq, Result{Result::Kind::kError, std::nullopt, kept.status()});
        } else if (!*kept) {
          done.emplace_back(seq, Result{Result::Kind::kSkipped, std::nullopt, absl::OkStatus()});
        } else {
          done.emplace_back(seq, Result{Result::Kind::kElement, std::move(*in), absl::OkStatus()});
        }
      }
    }
    absl::MutexLock lock(&mu_);
    int64_t unused = want - static_cast<int64_t>(done.size());
    outstanding_ -= unused;
    for (auto& [seq, r] : done) {
      if (r.kind == Result::Kind::kEnd || r.kind == Result::Kind::kError) input_done_ = true;
      results_.emplace(seq, std::move(r));
    }
    if (!done.empty()) consumer_cv_.Signal();
    if (input_done_) worker_cv_.SignalAll();
    if (done.empty()) return;  // the input was already exhausted
  }
}

NextResult ParallelMapIterator::Next() {
  absl::MutexLock lock(&mu_);
  while (true) {
    if (finished_) return std::optional<Element>();
    if (ctx_.cancel->cancelled) return absl::CancelledError("pipeline cancelled");
    auto it = results_.end();
    if (stage_->deterministic()) {
      it = results_.find(next_output_);
    } else if (!results_.empty()) {
      it = results_.begin();
      // The end (or an error) may only be taken once everything before it has been delivered.
      bool terminal = it->second.kind == Result::Kind::kEnd || it->second.kind == Result::Kind::kError;
      if (terminal && outstanding_ > 1) it = results_.end();
    }
    if (it == results_.end()) {
      consumer_cv_.WaitWithTimeout(&mu_, kCancelPoll);
      continue;
    }
    Result r = std::move(it->second);
    results_.erase(it);
    ++next_output_;
    --outstanding_;
    worker_cv_.Signal();
    switch (r.kind) {
      case Result::Kind::kElement: return std::move(r.element);
      case Result::Kind::kSkipped: continue;
      case Result::Kind::kEnd: finished_ = true; return std::optional<Element>();
      case Result::Kind::kError: finished_ = true; return r.status;
    }
  }
}

// ---------------------------------------------------------------- interleave

// Reads up to cycle_length splits at once. The consumer assigns splits to slots in order, so the
// output order is deterministic for a given split order; with `parallel`, each slot has a thread
// that reads ahead into a small queue.
class InterleaveIterator : public StageIterator {
 public:
  InterleaveIterator(const Source* source, SourceContext sctx, ExecContext& ctx, int cycle_length, int block_length,
                     bool parallel, bool deterministic)
      : source_(source), sctx_(sctx), ctx_(ctx), block_length_(block_length), parallel_(parallel),
        deterministic_(deterministic), slots_(static_cast<size_t>(cycle_length)) {
    if (parallel_) {
      for (size_t i = 0; i < slots_.size(); ++i) threads_.emplace_back([this, i] { SlotLoop(i); });
    }
  }
  ~InterleaveIterator() override {
    {
      absl::MutexLock lock(&mu_);
      stop_ = true;
      cv_.SignalAll();
    }
    for (auto& t : threads_) t.join();
  }

  NextResult Next() override {
    if (!started_) {
      started_ = true;
      for (size_t i = 0; i < slots_.size(); ++i) {
        if (auto s = Assign(i); !s.ok()) return s;
      }
    }
    while (true) {
      if (ctx_.cancel->cancelled) return absl::CancelledError("pipeline cancelled");
      size_t active = 0;
      {
        absl::MutexLock lock(&mu_);
        for (auto& s : slots_) active += s.active ? 1 : 0;
      }
      if (active == 0) return std::optional<Element>();
      if (!deterministic_ && parallel_) {
        // Prefer a slot with data ready.
        absl::MutexLock lock(&mu_);
        for (size_t k = 0; k < slots_.size(); ++k) {
          size_t i = (current_ + k) % slots_.size();
          if (slots_[i].active && !slots_[i].queue.empty()) {
            current_ = i;
            break;
          }
        }
      }
      Slot& slot = slots_[current_];
      bool slot_active;
      {
        absl::MutexLock lock(&mu_);
        slot_active = slot.active;
      }
      if (!slot_active) {
        Advance();
        continue;
      }
      NextResult r = TakeFrom(current_);
      if (!r.ok()) return r;
      if (!r->has_value()) {  // this split is done: give the slot the next split
        if (auto s = Assign(current_); !s.ok()) return s;
        Advance();
        continue;
      }
      if (++taken_in_block_ >= block_length_) Advance();
      return r;
    }
  }

 private:
  struct Slot {
    bool active = false;
    bool assigned = false;  // a split waiting for the slot's thread to open it
    Split split;
    std::unique_ptr<SplitReader> reader;
    std::deque<NextResult> queue;
  };

  void Advance() {
    current_ = (current_ + 1) % slots_.size();
    taken_in_block_ = 0;
  }

  absl::Status Assign(size_t i) {
    auto split = ctx_.splits->GetNext();
    if (!split.ok()) return split.status();
    absl::MutexLock lock(&mu_);
    Slot& slot = slots_[i];
    slot.reader.reset();
    slot.queue.clear();
    if (!split->has_value()) {
      slot.active = false;
      return absl::OkStatus();
    }
    slot.active = true;
    slot.split = **split;
    slot.assigned = true;
    cv_.SignalAll();
    return absl::OkStatus();
  }

  // Opens the slot's split if needed and reads one element (sequential mode, or the slot thread).
  NextResult ReadOne(Slot& slot, const Split& split, std::unique_ptr<SplitReader>& reader) {
    ScopedCpuTimer timer(sctx_.stats);
    if (!reader) {
      auto opened = OpenSplit(*source_, split, sctx_, ctx_.splits.get());
      if (!opened.ok()) return opened.status();
      reader = *std::move(opened);
    }
    (void)slot;
    NextResult r = reader->Next();
    if (r.ok() && r->has_value()) {
      if (auto s = CheckElementSize(**r, ctx_.max_element_bytes, sctx_.stats); !s.ok()) return s;
    }
    return r;
  }

  NextResult TakeFrom(size_t i) {
    Slot& slot = slots_[i];
    if (!parallel_) {
      if (slot.assigned) slot.assigned = false;
      return ReadOne(slot, slot.split, slot.reader);
    }
    absl::MutexLock lock(&mu_);
    while (slot.queue.empty()) {
      if (ctx_.cancel->cancelled) return absl::CancelledError("pipeline cancelled");
      cv_.WaitWithTimeout(&mu_, kCancelPoll);
    }
    NextResult r = std::move(slot.queue.front());
    slot.queue.pop_front();
    cv_.SignalAll();
    return r;
  }

  void SlotLoop(size_t i) {
    const size_t capacity = static_cast<size_t>(std::max(2, 2 * block_length_));
    Slot& slot = slots_[i];
    std::unique_ptr<SplitReader> reader;
    Split split;
    bool reading = false;
    while (true) {
      {
        absl::MutexLock lock(&mu_);
        while (true) {
          if (stop_ || ctx_.cancel->cancelled) return;
          if (slot.assigned) {
            slot.assigned = false;
            split = slot.split;
            reader.reset();
            reading = true;
          }
          if (reading && slot.queue.size() < capacity) break;
          cv_.WaitWithTimeout(&mu_, kCancelPoll);
        }
      }
      NextResult r = ReadOne(slot, split, reader);
      bool last = !r.ok() || !r->has_value();
      absl::MutexLock lock(&mu_);
      if (slot.assigned) continue;  // reassigned meanwhile (cannot happen before our end marker)
      slot.queue.push_back(std::move(r));
      if (last) reading = false;
      cv_.SignalAll();
    }
  }

  const Source* source_;
  SourceContext sctx_;
  ExecContext& ctx_;
  const int block_length_;
  const bool parallel_;
  const bool deterministic_;
  absl::Mutex mu_;
  absl::CondVar cv_;
  std::vector<Slot> slots_;  // queue/active/assigned guarded by mu_ in parallel mode
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
  bool started_ = false;
  size_t current_ = 0;
  int taken_in_block_ = 0;
};

class InterleaveStage : public Stage {
 public:
  InterleaveStage(std::shared_ptr<const Source> source, SourceContext sctx, const Args& args, StageStats* stats,
                  std::string description)
      : Stage(nullptr, stats), source_(std::move(source)), sctx_(sctx), cycle_length_(args.Int("cycle_length", kAuto)),
        block_length_(static_cast<int>(args.Int("block_length", 1))), parallel_(args.Bool("parallel", true)),
        deterministic_(args.Bool("deterministic", true)), description_(std::move(description)) {
    sctx_.stats = stats;
  }
  std::string Describe() const override {
    return absl::StrCat(description_, " interleave(cycle_length=",
                        cycle_length_ == kAuto ? std::string("auto") : absl::StrCat(cycle_length_),
                        ", block_length=", block_length_, parallel_ ? ", parallel" : "", ")");
  }

 protected:
  absl::StatusOr<std::unique_ptr<StageIterator>> MakeRawIterator(ExecContext& ctx) const override {
    int cycle = cycle_length_ == kAuto ? std::clamp(ctx.cpu_budget, 2, 8) : static_cast<int>(cycle_length_);
    stats()->SetParallelism(parallel_ ? cycle : 0);
    return std::unique_ptr<StageIterator>(
        new InterleaveIterator(source_.get(), sctx_, ctx, cycle, block_length_, parallel_, deterministic_));
  }

 private:
  std::shared_ptr<const Source> source_;
  SourceContext sctx_;
  int64_t cycle_length_;
  int block_length_;
  bool parallel_, deterministic_;
  std::string description_;
};

// ---------------------------------------------------------------- prefetch

class PrefetchIterator : public StageIterator {
 public:
  PrefetchIterator(std::unique_ptr<StageIterator> input, ExecContext& ctx, std::shared_ptr<Tunable> buffer,
                   StageStats* stats)
      : input_(std::move(input)), ctx_(ctx), buffer_(std::move(buffer)), stats_(stats) {
    thread_ = std::thread([this] { Produce(); });
  }
  ~PrefetchIterator() override {
    {
      absl::MutexLock lock(&mu_);
      stop_ = true;
      cv_.SignalAll();
    }
    thread_.join();
  }
  NextResult Next() override {
    absl::MutexLock lock(&mu_);
    if (queue_.empty()) buffer_->consumer_waits.fetch_add(1, std::memory_order_relaxed);
    while (queue_.empty()) {
      if (ctx_.cancel->cancelled) return absl::CancelledError("pipeline cancelled");
      if (done_) return std::optional<Element>();
      cv_.WaitWithTimeout(&mu_, kCancelPoll);
    }
    NextResult r = std::move(queue_.front());
    queue_.pop_front();
    stats_->SetBuffered(static_cast<int64_t>(queue_.size()));
    cv_.SignalAll();
    if (!r.ok() || !r->has_value()) done_ = true;
    return r;
  }

 private:
  void Produce() {
    while (true) {
      {
        absl::MutexLock lock(&mu_);
        while (!stop_ && !ctx_.cancel->cancelled &&
               static_cast<int64_t>(queue_.size()) >= std::max<int64_t>(1, buffer_->value.load())) {
          cv_.WaitWithTimeout(&mu_, kCancelPoll);
        }
        if (stop_ || ctx_.cancel->cancelled) return;
      }
      NextResult r = input_->Next();
      bool last = !r.ok() || !r->has_value();
      absl::MutexLock lock(&mu_);
      queue_.push_back(std::move(r));
      stats_->SetBuffered(static_cast<int64_t>(queue_.size()));
      cv_.SignalAll();
      if (last) return;
    }
  }

  std::unique_ptr<StageIterator> input_;
  ExecContext& ctx_;
  std::shared_ptr<Tunable> buffer_;
  StageStats* stats_;
  absl::Mutex mu_;
  absl::CondVar cv_;
  std::deque<NextResult> queue_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  bool done_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

class PrefetchStage : public Stage {
 public:
  PrefetchStage(std::unique_ptr<Stage> input, const Args& args, StageStats* stats)
      : Stage(std::move(input), stats), buffer_(args.Int("buffer", kAuto)) {}
  std::string Describe() const override {
    return absl::StrCat("prefetch(buffer=", buffer_ == kAuto ? std::string("auto") : absl::StrCat(buffer_), ")");
  }

 protected:
  absl::StatusOr<std::unique_ptr<StageIterator>> MakeRawIterator(ExecContext& ctx) const override {
    auto input = MakeInputIterator(ctx);
    if (!input.ok()) return input.status();
    auto tunable = std::make_shared<Tunable>();
    tunable->kind = Tunable::Kind::kBuffer;
    tunable->stats = stats();
    if (buffer_ == kAuto) {
      tunable->value = 2;
      tunable->max = 1024;
      if (ctx.autotune) ctx.tunables.push_back(tunable);
    } else {
      tunable->value = std::max<int64_t>(1, buffer_);
      tunable->max = tunable->value;
    }
    stats()->SetBufferSize(tunable->value);
    return std::unique_ptr<StageIterator>(new PrefetchIterator(*std::move(input), ctx, tunable, stats()));
  }

 private:
  int64_t buffer_;
};

}  // namespace

uint64_t OpSeed(uint64_t pipeline_seed, OpSeedSlot slot, uint64_t element_key) {
  const uint64_t stage_seed = MixKey(pipeline_seed, static_cast<uint64_t>(slot.stage) + 1000);
  return MixKey(MixKey(stage_seed, static_cast<uint64_t>(slot.index)), element_key);
}

std::unique_ptr<Stage> MakeMapStage(std::unique_ptr<Stage> input, std::vector<std::unique_ptr<ElementOp>> ops,
                                    std::vector<OpSeedSlot> seed_slots, std::string ops_description, const Args& args,
                                    StageStats* stats) {
  return std::make_unique<MapStage>(std::move(input), std::move(ops), std::move(seed_slots), std::move(ops_description),
                                    args, stats);
}
std::unique_ptr<Stage> MakeInterleaveStage(std::shared_ptr<const Source> source, SourceContext sctx, const Args& args,
                                           StageStats* stats, std::string description) {
  return std::make_unique<InterleaveStage>(std::move(source), sctx, args, stats, std::move(description));
}
std::unique_ptr<Stage> MakePrefetchStage(std::unique_ptr<Stage> input, const Args& args, StageStats* stats) {
  return std::make_unique<PrefetchStage>(std::move(input), args, stats);
}

}  // namespace sluice::pipeline
