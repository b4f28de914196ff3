// Sequential stages: source, filter, shuffle, batch, unbatch, repeat, take, skip, shard, cache,
// bucket_by_length. Parallel ones (map, interleave, prefetch) live in stages_parallel.cc.
#include "dataplane/pipeline/stages.h"

#include <algorithm>
#include <cstring>
#include <deque>
#include <random>

#include "absl/strings/str_cat.h"

namespace sluice::pipeline {
namespace {

// Counts output elements and bytes and the consumer's time waiting in Next(). The wait is timed
// on one call in kWaitSampleEvery (the first, then every kWaitSampleEvery-th) and counted for
// kWaitSampleEvery calls: two clock readings per element and stage were ~5% of a worker's CPU
// replaying 1 KiB elements, for a figure nothing acts on element by element.
class InstrumentedIterator : public StageIterator {
 public:
  static constexpr uint32_t kWaitSampleEvery = 16;

  InstrumentedIterator(std::unique_ptr<StageIterator> inner, StageStats* stats)
      : inner_(std::move(inner)), stats_(stats) {}
  NextResult Next() override {
    const bool timed = calls_++ % kWaitSampleEvery == 0;
    const uint64_t start = timed ? MonotonicNanos() : 0;
    NextResult r = inner_->Next();  // constructed in place: an Element's fields are inline, moves copy them
    if (timed) stats_->AddWait((MonotonicNanos() - start) * kWaitSampleEvery);
    if (r.ok() && r->has_value()) stats_->AddOut((*r)->ByteSize());
    return r;
  }

 private:
  std::unique_ptr<StageIterator> inner_;
  StageStats* stats_;
  uint32_t calls_ = 0;
};

}  // namespace

absl::StatusOr<std::unique_ptr<StageIterator>> Stage::MakeIterator(ExecContext& ctx) const {
  auto it = MakeRawIterator(ctx);
  if (!it.ok()) return it.status();
  return std::unique_ptr<StageIterator>(new InstrumentedIterator(*std::move(it), stats_));
}

absl::Status CheckElementSize(const Element& e, int64_t max_bytes, const StageStats* stats) {
  if (max_bytes <= 0) return absl::OkStatus();
  size_t bytes = e.ByteSize();
  if (static_cast<int64_t>(bytes) > max_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "an element of ", bytes, " bytes produced by stage ", stats ? stats->name() : "?",
        " exceeds options.max_element_bytes (", max_bytes,
        "); raise the bound in the spec's options, or batch less / crop earlier"));
  }
  return absl::OkStatus();
}

namespace {

// ---------------------------------------------------------------- source

class SourceIterator : public StageIterator {
 public:
  SourceIterator(const Source* source, SourceContext sctx, ExecContext& ctx)
      : source_(source), sctx_(sctx), ctx_(ctx) {}
  NextResult Next() override {
    while (true) {
      if (ctx_.cancel->cancelled) return absl::CancelledError("pipeline cancelled");
      if (reader_ == nullptr) {
        auto split = ctx_.splits->GetNext();
        if (!split.ok()) return split.status();
        if (!split->has_value()) return std::optional<Element>();
        ScopedCpuTimer timer(sctx_.stats);
        auto reader = OpenSplit(*source_, **split, sctx_, ctx_.splits.get());
        if (!reader.ok()) return reader.status();
        reader_ = *std::move(reader);
      }
      NextResult r;
      {
        ScopedCpuTimer timer(sctx_.stats);
        r = reader_->Next();
      }
      if (!r.ok()) return r;
      if (!r->has_value()) {
        reader_.reset();
        continue;
      }
      if (auto s = CheckElementSize(**r, ctx_.max_element_bytes, sctx_.stats); !s.ok()) return s;
      return r;
    }
  }

 private:
  const Source* source_;
  SourceContext sctx_;
  ExecContext& ctx_;
  std::unique_ptr<SplitReader> reader_;
};

class SourceStage : public Stage {
 public:
  SourceStage(std::shared_ptr<const Source> source, SourceContext sctx, StageStats* stats, std::string description)
      : Stage(nullptr, stats), source_(std::move(source)), sctx_(sctx), description_(std::move(description)) {
    sctx_.stats = stats;
  }
  std::string Describe() const override { return description_; }

 protected:
  absl::StatusOr<std::unique_ptr<StageIterator>> MakeRawIterator(ExecContext& ctx) const override {
    return std::unique_ptr<StageIterator>(new SourceIterator(source_.get(), sctx_, ctx));
  }

 private:
  std::shared_ptr<const Source> source_;
  SourceContext sctx_;
  std::string description_;
};

// ---------------------------------------------------------------- filter

// The test of a filter step: the field's size and value against the given bounds.
class FieldPredicate : public ElementPredicate {
 public:
  explicit FieldPredicate(const Args& args) {
    field_ = args.String("field");
    for (const char* k : {"lt", "le", "gt", "ge", "eq", "ne"}) {
      if (args.Has(k)) comparisons_.emplace_back(k, args.Float(k));
    }
    if (args.Has("min_size")) min_size_ = args.Int("min_size");
    if (args.Has("max_size")) max_size_ = args.Int("max_size");
  }
  const std::string& field() const { return field_; }

  absl::StatusOr<bool> Keep(const Element& e) const override {
    const Tensor* t = e.Find(field_);
    if (t == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("filter: element has no field '", field_, "'; fields: ", e.FieldNames()));
    }
    if (min_size_ || max_size_) {
      int64_t size = (t->dtype() == DType::kString && t->rank() == 0) ? static_cast<int64_t>(t->ByteSize())
                                                                       : t->num_elements();
      if (min_size_ && size < *min_size_) return false;
      if (max_size_ && size > *max_size_) return false;
    }
    if (!comparisons_.empty()) {
      auto v = t->AsDouble();
      if (!v.ok()) return absl::InvalidArgumentError(absl::StrCat("filter(", field_, "): ", v.status().message()));
      for (const auto& [op, x] : comparisons_) {
        bool ok = op == "lt" ? *v < x : op == "le" ? *v <= x : op == "gt" ? *v > x
                : op == "ge" ? *v >= x : op == "eq" ? *v == x : *v != x;
        if (!ok) return false;
      }
    }
    return true;
  }

 private:
  std::string field_;
  std::vector<std::pair<std::string, double>> comparisons_;
  std::optional<int64_t> min_size_, max_size_;
};

class FilterStage : public Stage {
 public:
  FilterStage(std::unique_ptr<Stage> input, const Args& args, StageStats* stats)
      : Stage(std::move(input), stats), predicate_(args) {}
  std::string Describe() const override { return absl::StrCat("filter(", predicate_.field(), ")"); }
  absl::StatusOr<bool> Keep(const Element& e) const { return predicate_.Keep(e); }

 protected:
  absl::StatusOr<std::unique_ptr<StageIterator>> MakeRawIterator(ExecContext& ctx) const override;

 private:
  FieldPredicate predicate_;
};

class FilterIterator : public StageIterator {
 public:
  FilterIterator(const FilterStage* stage, std::unique_ptr<StageIterator> input) : stage_(stage), input_(std::move(input)) {}
  NextResult Next() override {
    while (true) {
      NextResult r = input_->Next();
      if (!r.ok() || !r->has_value()) return r;
      ScopedCpuTimer timer(stage_->stats());
      auto keep = stage_->Keep(**r);
      if (!keep.ok()) return keep.status();
      if (*keep) return r;
    }
  }

 private:
  const FilterStage* stage_;
  std::unique_ptr<StageIterator> input_;
};

absl::StatusOr<std::unique_ptr<StageIterator>> FilterStage::MakeRawIterator(ExecContext& ctx) const {
  auto input = MakeInputIterator(ctx);
  if (!input.ok()) return input.status();
  return std::unique_ptr<StageIterator>(new FilterIterator(this, *std::move(input)));
}

// ---------------------------------------------------------------- shuffle

class ShuffleIterator : public StageIterator {
 public:
  ShuffleIterator(std::unique_ptr<StageIterator> input, int64_t buffer, uint64_t seed, StageStats* stats)
      : input_(std::move(input)), capacity_(static_cast<size_t>(buffer)), rng_(seed), stats_(stats) {}
  NextResult Next() override {
    while (!input_done_ && buffer_.size() < capacity_) {
      NextResult r = input_->Next();
      if (!r.ok()) return r;
      if (!r->has_value()) {
        input_done_ = true;
        break;
      }
      buffer_.push_back(std::move(**r));
    }
    stats_->SetBuffered(static_cast<int64_t>(buffer_.size()));
    if (buffer_.empty()) return std::optional<Element>();
    ScopedCpuTimer timer(stats_);
    std::uniform_int_distribution<size_t> pick(0, buffer_.size() - 1);
    size_t i = pick(rng_);
    std::swap(buffer_[i], buffer_.back());
    Element out = std::move(buffer_.back());
    buffer_.pop_back();
    // Refill one so the buffer stays full.
    return std::optional<Element>(std::move(out));
  }

 private:
  std::unique_ptr<StageIterator> input_;
  size_t capacity_;
  std::vector<Element> buffer_;
  std::mt19937_64 rng_;
  bool input_done_ = false;
  StageStats* stats_;
};

class ShuffleStage : public Stage {
 public:
  ShuffleStage(std::unique_ptr<Stage> input, const Args& args, uint64_t pipeline_seed, StageStats* stats)
      : Stage(std::move(input), stats),
        buffer_(args.Int("buffer")),
        seed_(args.Has("seed") ? static_cast<uint64_t>(args.Int("seed")) : pipeline_seed),
        reshuffle_(args.Bool("reshuffle_each_iteration", true)) {
    stats->SetBufferSize(buffer_);
  }
  std::string Describe() const override { return absl::StrCat("shuffle(buffer=", buffer_, ", seed=", seed_, ")"); }

 protected:
  absl::StatusOr<std::unique_ptr<StageIterator>> MakeRawIterator(ExecContext& ctx) const override {
    auto input = MakeInputIterator(ctx);
    if (!input.ok()) return input.status();
    uint64_t epoch = reshuffle_ ? epoch_.fetch_add(1) : 0;
    return std::unique_ptr<StageIterator>(
        new ShuffleIterator(*std::move(input), buffer_, MixKey(seed_, epoch), stats()));
  }

 private:
  int64_t buffer_;
  uint64_t seed_;
  bool reshuffle_;
  mutable std::atomic<uint64_t> epoch_{0};
};

// ---------------------------------------------------------------- batch

class BatchIterator : public StageIterator {
 public:
  BatchIterator(std::unique_ptr<StageIterator> input, int64_t size, bool drop_remainder, bool pad, double padding,
                StageStats* stats, int64_t max_bytes)
      : input_(std::move(input)), size_(size), drop_remainder_(drop_remainder), pad_(pad), padding_(padding),
        stats_(stats), max_bytes_(max_bytes) {}
  NextResult Next() override {
    if (done_) return std::optional<Element>();
    std::vector<Element> items;
    items.reserve(static_cast<size_t>(size_));
    while (static_cast<int64_t>(items.size()) < size_) {
      NextResult r = input_->Next();
      if (!r.ok()) return r;
      if (!r->has_value()) {
        done_ = true;
        break;
      }
      items.push_back(std::move(**r));
    }
    if (items.empty() || (drop_remainder_ && static_cast<int64_t>(items.size()) < size_)) {
      return std::optional<Element>();
    }
    ScopedCpuTimer timer(stats_);
    auto batch = StackElements(items, pad_, padding_);
    if (!batch.ok()) return batch.status();
    if (auto s = CheckElementSize(*batch, max_bytes_, stats_); !s.ok()) return s;
    return std::optional<Element>(*std::move(batch));
  }

 private:
  std::unique_ptr<StageIterator> input_;
  int64_t size_;
  bool drop_remainder_, pad_;
  double padding_;
  StageStats* stats_;
  int64_t max_bytes_;
  bool done_ = false;
};

class BatchStage : public Stage {
 public:
  BatchStage(std::unique_ptr<Stage> input, const Args& args, StageStats* stats)
      : Stage(std::move(input), stats), size_(args.Int("size")), drop_remainder_(args.Bool("drop_remainder")),
        pad_(args.Bool("pad")), padding_(args.Float("padding_value")) {}
  std::string Describe() const override {
    return absl::StrCat("batch(size=", size_, drop_remainder_ ? ", drop_remainder" : "", pad_ ? ", pad" : "", ")");
  }

 protected:
  absl::StatusOr<std::unique_ptr<StageIterator>> MakeRawIterator(ExecContext& ctx) const override {
    auto input = MakeInputIterator(ctx);
    if (!input.ok()) return input.status();
    return std::unique_ptr<StageIterator>(
        new BatchIterator(*std::move(input), size_, drop_remainder_, pad_, padding_, stats(), ctx.max_element_bytes));
  }

 private:
  int64_t size_;
  bool drop_remainder_, pad_;
  double padding_;
};

// ---------------------------------------------------------------- unbatch

class UnbatchIterator : public StageIterator {
 public:
  UnbatchIterator(std::unique_ptr<StageIterator> input, StageStats* stats) : input_(std::move(input)), stats_(stats) {}
  NextResult Next() override {
    while (!current_ || index_ >= rows_) {
      NextResult r = input_->Next();
      if (!r.ok() || !r->has_value()) return r;
      current_ = std::move(**r);
      index_ = 0;
      rows_ = -1;
      for (const auto& [name, t] : current_->fields()) {
        if (t.rank() == 0) {
          return absl::InvalidArgumentError(absl::StrCat("unbatch: field '", name, "' is a scalar; every field needs a first dimension"));
        }
        if (rows_ >= 0 && t.shape()[0] != rows_) {
          return absl::InvalidArgumentError(absl::StrCat("unbatch: field '", name, "' has ", t.shape()[0],
                                                         " rows but other fields have ", rows_));
        }
        rows_ = t.shape()[0];
      }
      if (rows_ < 0) rows_ = 0;
    }
    ScopedCpuTimer timer(stats_);
    Element out;
    out.set_key(MixKey(current_->key(), static_cast<uint64_t>(index_)));
    for (const auto& [name, t] : current_->fields()) {
      auto row = t.Slice(index_);
      if (!row.ok()) return row.status();
      out.Set(name, *std::move(row));
    }
    ++index_;
    return std::optional<Element>(std::move(out));
  }

 private:
  std::unique_ptr<StageIterator> input_;
  StageStats* stats_;
  std::optional<Element> current_;
  int64_t index_ = 0, rows_ = 0;
};

class UnbatchStage : public Stage {
 public:
  using Stage::Stage;
  std::string Describe() const override { return "unbatch"; }

 protected:
  absl::StatusOr<std::unique_ptr<StageIterator>> MakeRawIterator(ExecContext& ctx) const override {
    auto input = MakeInputIterator(ctx);
    if (!input.ok()) return input.status();
    return std::unique_ptr<StageIterator>(new UnbatchIterator(*std::move(input), stats()));
  }
};

// ---------------------------------------------------------------- repeat

class RepeatStage;

class RepeatIterator : public StageIterator {
 public:
  RepeatIterator(const Stage* input_stage, int64_t count, ExecContext& ctx) : input_stage_(input_stage), count_(count), ctx_(ctx) {}
  NextResult Next() override {
    while (true) {
      if (count_ >= 0 && epoch_ >= count_) return std::optional<Element>();
      if (!input_) {
        if (epoch_ > 0) {
          if (auto s = ctx_.splits->Reset(); !s.ok()) return s;
        }
        auto it = input_stage_->MakeIterator(ctx_);
        if (!it.ok()) return it.status();
        input_ = *std::move(it);
        produced_in_epoch_ = 0;
      }
      NextResult r = input_->Next();
      if (!r.ok()) return r;
      if (r->has_value()) {
        ++produced_in_epoch_;
        return r;
      }
      input_.reset();
      ++epoch_;
      if (produced_in_epoch_ == 0) return std::optional<Element>();  // an empty input would loop forever
    }
  }

 private:
  const Stage* input_stage_;
  int64_t count_;
  ExecContext& ctx_;
  std::unique_ptr<StageIterator> input_;
  int64_t epoch_ = 0;
  int64_t produced_in_epoch_ = 0;
};

class RepeatStage : public Stage {
 public:
  RepeatStage(std::unique_ptr<Stage> input, const Args& args, StageStats* stats)
      : Stage(std::move(input), stats), count_(args.Int("count", -1)) {}
  std::string Describe() const override { return count_ < 0 ? "repeat(forever)" : absl::StrCat("repeat(", count_, ")"); }

 protected:
  absl::StatusOr<std::unique_ptr<StageIterator>> MakeRawIterator(ExecContext& ctx) const override {
    return std::unique_ptr<StageIterator>(new RepeatIterator(input(), count_, ctx));
  }

 private:
  int64_t count_;
};

// ---------------------------------------------------------------- take, skip, shard

class CountingIterator : public StageIterator {
 public:
  enum class Mode { kTake, kSkip, kShard };
  CountingIterator(std::unique_ptr<StageIterator> input, Mode mode, int64_t a, int64_t b)
      : input_(std::move(input)), mode_(mode), a_(a), b_(b) {}
  NextResult Next() override {
    switch (mode_) {
      case Mode::kTake:
        if (seen_ >= a_) return std::optional<Element>();
        ++seen_;
        return input_->Next();
      case Mode::kSkip:
        while (seen_ < a_) {
          NextResult r = input_->Next();
          if (!r.ok() || !r->has_value()) return r;
          ++seen_;
        }
        return input_->Next();
      case Mode::kShard:
        while (true) {
          NextResult r = input_->Next();
          if (!r.ok() || !r->has_value()) return r;
          int64_t i = seen_++;
          if (i % a_ == b_) return r;
        }
    }
    return absl::InternalError("bad mode");
  }

 private:
  std::unique_ptr<StageIterator> input_;
  Mode mode_;
  int64_t a_, b_;
  int64_t seen_ = 0;
};

class CountingStage : public Stage {
 public:
  CountingStage(std::unique_ptr<Stage> input, CountingIterator::Mode mode, int64_t a, int64_t b, StageStats* stats)
      : Stage(std::move(input), stats), mode_(mode), a_(a), b_(b) {}
  std::string Describe() const override {
    switch (mode_) {
      case CountingIterator::Mode::kTake: return absl::StrCat("take(", a_, ")");
      case CountingIterator::Mode::kSkip: return absl::StrCat("skip(", a_, ")");
      case CountingIterator::Mode::kShard: return absl::StrCat("shard(", b_, "/", a_, ")");
    }
    return "?";
  }

 protected:
  absl::StatusOr<std::unique_ptr<StageIterator>> MakeRawIterator(ExecContext& ctx) const override {
    auto input = MakeInputIterator(ctx);
    if (!input.ok()) return input.status();
    return std::unique_ptr<StageIterator>(new CountingIterator(*std::move(input), mode_, a_, b_));
  }

 private:
  CountingIterator::Mode mode_;
  int64_t a_, b_;
};

// ---------------------------------------------------------------- cache

// Where the cache keeps its small numeric tensors: copied back to back (64-byte aligned) into
// blocks of kBlockBytes, each block one owner. Replaying then copies an element's tensors with
// reference counts on one shared, hot control block instead of one per tensor scattered over the
// heap, and reads the payloads in order (a 1 KiB element replayed from per-element allocations
// spent ~10% of a worker's CPU copying the Element and more reading its scattered bytes).
class CacheArena {
 public:
  static constexpr size_t kBlockBytes = 1 << 20;
  static constexpr size_t kMaxTensorBytes = 64 << 10;  // larger tensors keep their own buffers
  static constexpr size_t kAlign = 64;

  // `e` with its small numeric tensors moved into the arena (a copy of their bytes).
  Element Compact(const Element& e) {
    Element out = e;
    for (auto& field : out.mutable_fields()) {
      Tensor& t = field.second;
      if (!t.valid() || t.dtype() == DType::kString || t.nbytes() == 0 || t.nbytes() > kMaxTensorBytes) continue;
      const size_t n = t.nbytes();
      if (block_ == nullptr || used_ + n > kBlockBytes) {
        block_ = std::shared_ptr<uint8_t[]>(new uint8_t[kBlockBytes + kAlign]);
        used_ = (kAlign - reinterpret_cast<uintptr_t>(block_.get()) % kAlign) % kAlign;
      }
      uint8_t* at = block_.get() + used_;
      std::memcpy(at, t.raw(), n);
      used_ = std::min(used_ + ((n + kAlign - 1) / kAlign) * kAlign, kBlockBytes + kAlign);
      auto moved = Tensor::FromBuffer(t.dtype(), t.shape(), Buffer{block_, at, n});
      if (moved.ok()) t = *std::move(moved);
    }
    return out;
  }
  void Clear() {
    block_.reset();
    used_ = 0;
  }

 private:
  std::shared_ptr<uint8_t[]> block_;
  size_t used_ = 0;
};

struct CacheData {
  absl::Mutex mu;
  std::vector<Element> elements ABSL_GUARDED_BY(mu);
  CacheArena arena ABSL_GUARDED_BY(mu);
  bool complete ABSL_GUARDED_BY(mu) = false;
  bool filling ABSL_GUARDED_BY(mu) = false;
  bool abandoned ABSL_GUARDED_BY(mu) = false;
  uint64_t bytes ABSL_GUARDED_BY(mu) = 0;
};

class CacheIterator : public StageIterator {
 public:
  // `replay`: the elements of a complete cache (nothing writes them any more), or null to read
  // `input`.
  CacheIterator(std::shared_ptr<CacheData> data, std::unique_ptr<StageIterator> input, bool filler, int64_t max_bytes,
                const std::vector<Element>* replay = nullptr)
      : data_(std::move(data)), input_(std::move(input)), filler_(filler), max_bytes_(max_bytes), replay_(replay) {}
  ~CacheIterator() override {
    if (filler_) {
      absl::MutexLock lock(&data_->mu);
      if (!data_->complete) {
        data_->filling = false;  // an unfinished pass is not a full cache
        data_->elements.clear();
        data_->arena.Clear();
        data_->bytes = 0;
      }
    }
  }
  NextResult Next() override {
    if (replay_ != nullptr) {  // a complete cache: never changes again, read without the lock
      if (index_ >= replay_->size()) return std::optional<Element>();
      return std::optional<Element>((*replay_)[index_++]);
    }
    NextResult r = input_->Next();
    if (!filler_ || !r.ok()) return r;
    absl::MutexLock lock(&data_->mu);
    if (!r->has_value()) {
      if (!data_->abandoned) data_->complete = true;
      data_->filling = false;
      filler_ = false;
      return r;
    }
    if (!data_->abandoned) {
      data_->bytes += (*r)->ByteSize();
      if (max_bytes_ > 0 && static_cast<int64_t>(data_->bytes) > max_bytes_) {
        data_->abandoned = true;
        data_->elements.clear();
        data_->elements.shrink_to_fit();
        data_->arena.Clear();
      } else {
        data_->elements.push_back(data_->arena.Compact(**r));
      }
    }
    return r;
  }

 private:
  std::shared_ptr<CacheData> data_;
  std::unique_ptr<StageIterator> input_;
  bool filler_;
  int64_t max_bytes_;
  const std::vector<Element>* const replay_;
  size_t index_ = 0;
};

class CacheStage : public Stage {
 public:
  CacheStage(std::unique_ptr<Stage> input, const Args& args, StageStats* stats)
      : Stage(std::move(input), stats), max_bytes_(args.Int("max_bytes")), data_(std::make_shared<CacheData>()) {}
  std::string Describe() const override { return "cache(memory)"; }

 protected:
  absl::StatusOr<std::unique_ptr<StageIterator>> MakeRawIterator(ExecContext& ctx) const override {
    bool filler = false;
    {
      absl::MutexLock lock(&data_->mu);
      if (data_->complete) {
        return std::unique_ptr<StageIterator>(new CacheIterator(data_, nullptr, false, max_bytes_, &data_->elements));
      }
      if (!data_->filling && !data_->abandoned) {
        data_->filling = true;
        filler = true;
      }
    }
    auto input = MakeInputIterator(ctx);
    if (!input.ok()) return input.status();
    return std::unique_ptr<StageIterator>(new CacheIterator(data_, *std::move(input), filler, max_bytes_));
  }

 private:
  int64_t max_bytes_;
  std::shared_ptr<CacheData> data_;
};

// ---------------------------------------------------------------- bucket_by_length

// Elements go to the bucket of their length; a bucket that holds group × batch_size elements
// emits them as `group` batches back to back (in arrival order), so `group` consecutive outputs
// come from one bucket — with coordinated reads (group = num_consumers) the batches of one round.
class BucketIterator : public StageIterator {
 public:
  BucketIterator(std::unique_ptr<StageIterator> input, std::string field, std::vector<int64_t> boundaries,
                 std::vector<int64_t> sizes, double padding, bool drop_remainder, int64_t group, StageStats* stats)
      : input_(std::move(input)), field_(std::move(field)), boundaries_(std::move(boundaries)),
        sizes_(std::move(sizes)), padding_(padding), drop_remainder_(drop_remainder), group_(group), stats_(stats),
        buckets_(sizes_.size()) {}
  NextResult Next() override {
    while (true) {
      if (!ready_.empty()) {
        Element e = std::move(ready_.front());
        ready_.pop_front();
        return std::optional<Element>(std::move(e));
      }
      if (input_done_) {
        // The end: what is left in the buckets, unless partial groups are dropped.
        for (size_t b = 0; b < buckets_.size() && ready_.empty(); ++b) {
          if (buckets_[b].empty()) continue;
          if (drop_remainder_) {
            buckets_[b].clear();
          } else if (auto s = Emit(b); !s.ok()) {
            return s;
          }
        }
        if (ready_.empty()) return std::optional<Element>();
        continue;
      }
      NextResult r = input_->Next();
      if (!r.ok()) return r;
      if (!r->has_value()) {
        input_done_ = true;
        continue;
      }
      const Tensor* t = (*r)->Find(field_);
      if (t == nullptr) {
        return absl::InvalidArgumentError(absl::StrCat("bucket_by_length: element has no field '", field_,
                                                       "'; fields: ", (*r)->FieldNames()));
      }
      int64_t length = t->rank() == 0 ? static_cast<int64_t>(t->ByteSize()) : t->shape()[0];
      size_t b = static_cast<size_t>(std::upper_bound(boundaries_.begin(), boundaries_.end(), length) - boundaries_.begin());
      buckets_[b].push_back(std::move(**r));
      if (static_cast<int64_t>(buckets_[b].size()) >= sizes_[b] * group_) {
        if (auto s = Emit(b); !s.ok()) return s;
      }
    }
  }

 private:
  // Stacks bucket b's elements into batches of its batch size (the last may be short), queued.
  absl::Status Emit(size_t b) {
    ScopedCpuTimer timer(stats_);
    std::vector<Element> items = std::move(buckets_[b]);
    buckets_[b].clear();
    const size_t size = static_cast<size_t>(sizes_[b]);
    for (size_t begin = 0; begin < items.size(); begin += size) {
      std::vector<Element> chunk(std::make_move_iterator(items.begin() + static_cast<std::ptrdiff_t>(begin)),
                                 std::make_move_iterator(items.begin() + static_cast<std::ptrdiff_t>(
                                                                             std::min(items.size(), begin + size))));
      auto batch = StackElements(chunk, /*pad=*/true, padding_);
      if (!batch.ok()) return batch.status();
      ready_.push_back(*std::move(batch));
    }
    return absl::OkStatus();
  }

  std::unique_ptr<StageIterator> input_;
  std::string field_;
  std::vector<int64_t> boundaries_, sizes_;
  double padding_;
  bool drop_remainder_;
  int64_t group_;
  StageStats* stats_;
  std::vector<std::vector<Element>> buckets_;
  std::deque<Element> ready_;
  bool input_done_ = false;
};

class BucketStage : public Stage {
 public:
  BucketStage(std::unique_ptr<Stage> input, const Args& args, StageStats* stats)
      : Stage(std::move(input), stats), field_(args.String("field")), boundaries_(args.IntList("boundaries")),
        sizes_(args.IntList("batch_sizes")), padding_(args.Float("padding_value")),
        drop_remainder_(args.Bool("drop_remainder")), group_(args.Int("group")) {}
  std::string Describe() const override {
    return absl::StrCat("bucket_by_length(", field_, ", ", sizes_.size(), " buckets",
                        group_ > 1 ? absl::StrCat(", groups of ", group_) : std::string(), ")");
  }

 protected:
  absl::StatusOr<std::unique_ptr<StageIterator>> MakeRawIterator(ExecContext& ctx) const override {
    auto input = MakeInputIterator(ctx);
    if (!input.ok()) return input.status();
    return std::unique_ptr<StageIterator>(
        new BucketIterator(*std::move(input), field_, boundaries_, sizes_, padding_, drop_remainder_, group_, stats()));
  }

 private:
  std::string field_;
  std::vector<int64_t> boundaries_, sizes_;
  double padding_;
  bool drop_remainder_;
  int64_t group_;
};

template <typename T>
void FillPadding(uint8_t* dst, int64_t count, double value) {
  T v = static_cast<T>(value);
  for (int64_t i = 0; i < count; ++i) std::memcpy(dst + i * sizeof(T), &v, sizeof(T));
}

void FillWith(DType dtype, uint8_t* dst, int64_t count, double value) {
  switch (dtype) {
    case DType::kBool:
    case DType::kUInt8: FillPadding<uint8_t>(dst, count, value); break;
    case DType::kInt8: FillPadding<int8_t>(dst, count, value); break;
    case DType::kUInt16: FillPadding<uint16_t>(dst, count, value); break;
    case DType::kInt16: FillPadding<int16_t>(dst, count, value); break;
    case DType::kInt32: FillPadding<int32_t>(dst, count, value); break;
    case DType::kInt64: FillPadding<int64_t>(dst, count, value); break;
    case DType::kFloat32: FillPadding<float>(dst, count, value); break;
    case DType::kFloat64: FillPadding<double>(dst, count, value); break;
    default: break;
  }
}

// Copies `src` (shape s) into the padded row `dst` (shape d >= s elementwise), row-major.
void CopyPadded(const uint8_t* src, const Shape& s, uint8_t* dst, const Shape& d, size_t item) {
  if (s.empty()) {
    std::memcpy(dst, src, item);
    return;
  }
  if (s.size() == 1) {
    std::memcpy(dst, src, static_cast<size_t>(s[0]) * item);
    return;
  }
  Shape s_inner(s.begin() + 1, s.end()), d_inner(d.begin() + 1, d.end());
  size_t s_stride = static_cast<size_t>(NumElements(s_inner)) * item;
  size_t d_stride = static_cast<size_t>(NumElements(d_inner)) * item;
  for (int64_t i = 0; i < s[0]; ++i) CopyPadded(src + i * s_stride, s_inner, dst + i * d_stride, d_inner, item);
}

}  // namespace

absl::StatusOr<Element> StackElements(std::vector<Element>& elements, bool pad, double padding_value) {
  Element out;
  if (elements.empty()) return out;
  out.set_key(elements[0].key());
  const Element& first = elements[0];
  const int64_t n = static_cast<int64_t>(elements.size());
  for (const auto& [name, proto] : first.fields()) {
    Shape max_shape = proto.shape();
    bool same = true;
    for (int64_t i = 1; i < n; ++i) {
      const Tensor* t = elements[static_cast<size_t>(i)].Find(name);
      if (t == nullptr) {
        return absl::InvalidArgumentError(absl::StrCat("batch: element ", i, " has no field '", name, "'; fields: ",
                                                       elements[static_cast<size_t>(i)].FieldNames()));
      }
      if (t->dtype() != proto.dtype()) {
        return absl::InvalidArgumentError(absl::StrCat("batch: field '", name, "' is ", DTypeName(proto.dtype()),
                                                       " in one element and ", DTypeName(t->dtype()), " in another"));
      }
      if (t->shape() != proto.shape()) {
        same = false;
        if (t->rank() != proto.rank()) {
          return absl::InvalidArgumentError(absl::StrCat("batch: field '", name, "' has shapes ", ShapeToString(proto.shape()),
                                                         " and ", ShapeToString(t->shape()), " of different rank"));
        }
        for (int d = 0; d < t->rank(); ++d) max_shape[d] = std::max(max_shape[d], t->shape()[d]);
      }
    }
    if (!same && !pad) {
      return absl::InvalidArgumentError(absl::StrCat(
          "batch: field '", name, "' has different shapes across elements (e.g. ", ShapeToString(proto.shape()),
          "); set `pad: true` to pad them, or resize/crop before batching"));
    }
    Shape out_shape;
    out_shape.push_back(n);
    out_shape.insert(out_shape.end(), max_shape.begin(), max_shape.end());
    if (proto.dtype() == DType::kString) {
      if (!same) return absl::InvalidArgumentError(absl::StrCat("batch: cannot pad string field '", name, "'"));
      std::vector<std::string> values;
      for (auto& e : elements) {
        for (auto sv : e.Find(name)->strings()) values.emplace_back(sv);
      }
      out.Set(name, Tensor::StringsCopy(values, out_shape));
      continue;
    }
    // Every byte is written below (rows copied, padded rows filled first), so skip zero-filling.
    Tensor batch = Tensor::AllocateUninitialized(proto.dtype(), out_shape);
    size_t item = DTypeSize(proto.dtype());
    size_t row_bytes = static_cast<size_t>(NumElements(max_shape)) * item;
    uint8_t* dst = batch.mutable_raw();
    for (int64_t i = 0; i < n; ++i) {
      const Tensor* t = elements[static_cast<size_t>(i)].Find(name);
      uint8_t* row = dst + static_cast<size_t>(i) * row_bytes;
      if (t->shape() == max_shape) {
        std::memcpy(row, t->raw(), row_bytes);
      } else {
        FillWith(proto.dtype(), row, NumElements(max_shape), padding_value);
        CopyPadded(t->raw(), t->shape(), row, max_shape, item);
      }
    }
    out.Set(name, std::move(batch));
  }
  return out;
}

std::unique_ptr<Stage> MakeSourceStage(std::shared_ptr<const Source> source, SourceContext sctx, StageStats* stats,
                                       std::string description) {
  return std::make_unique<SourceStage>(std::move(source), sctx, stats, std::move(description));
}
std::unique_ptr<ElementPredicate> MakeFilterPredicate(const Args& args) { return std::make_unique<FieldPredicate>(args); }

std::unique_ptr<Stage> MakeFilterStage(std::unique_ptr<Stage> input, const Args& args, StageStats* stats) {
  return std::make_unique<FilterStage>(std::move(input), args, stats);
}
std::unique_ptr<Stage> MakeShuffleStage(std::unique_ptr<Stage> input, const Args& args, uint64_t seed, StageStats* stats) {
  return std::make_unique<ShuffleStage>(std::move(input), args, seed, stats);
}
std::unique_ptr<Stage> MakeBatchStage(std::unique_ptr<Stage> input, const Args& args, StageStats* stats) {
  return std::make_unique<BatchStage>(std::move(input), args, stats);
}
std::unique_ptr<Stage> MakeUnbatchStage(std::unique_ptr<Stage> input, StageStats* stats) {
  return std::make_unique<UnbatchStage>(std::move(input), stats);
}
std::unique_ptr<Stage> MakeRepeatStage(std::unique_ptr<Stage> input, const Args& args, StageStats* stats) {
  return std::make_unique<RepeatStage>(std::move(input), args, stats);
}
std::unique_ptr<Stage> MakeTakeStage(std::unique_ptr<Stage> input, const Args& args, StageStats* stats) {
  return std::make_unique<CountingStage>(std::move(input), CountingIterator::Mode::kTake, args.Int("count"), 0, stats);
}
std::unique_ptr<Stage> MakeSkipStage(std::unique_ptr<Stage> input, const Args& args, StageStats* stats) {
  return std::make_unique<CountingStage>(std::move(input), CountingIterator::Mode::kSkip, args.Int("count"), 0, stats);
}
std::unique_ptr<Stage> MakeShardStage(std::unique_ptr<Stage> input, const Args& args, StageStats* stats) {
  return std::make_unique<CountingStage>(std::move(input), CountingIterator::Mode::kShard, args.Int("num_shards"),
                                         args.Int("index"), stats);
}
std::unique_ptr<Stage> MakeCacheStage(std::unique_ptr<Stage> input, const Args& args, StageStats* stats) {
  return std::make_unique<CacheStage>(std::move(input), args, stats);
}
std::unique_ptr<Stage> MakeBucketByLengthStage(std::unique_ptr<Stage> input, const Args& args, StageStats* stats) {
  return std::make_unique<BucketStage>(std::move(input), args, stats);
}

}  // namespace sluice::pipeline
