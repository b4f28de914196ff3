#include "dataplane/pipeline/pipeline.h"

#include <algorithm>
#include <cmath>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "dataplane/pipeline/spec_parser.h"
#include "dataplane/pipeline/stages.h"

namespace sluice::pipeline {

namespace {

int DefaultCpuBudget() {
  unsigned n = std::thread::hardware_concurrency();
  return n == 0 ? 1 : static_cast<int>(n);
}

// How the ops of one map stage compile: groups of one op, or of two that fuse into one.
struct FusionGroup {
  size_t first = 0;
  size_t count = 1;
};

absl::StatusOr<std::unique_ptr<ElementOp>> TryFuse(const OpDescriptor& d, const OpDef& def, const OpDef& next) {
  if (!d.fuse_with_next) return std::unique_ptr<ElementOp>();
  return d.fuse_with_next(Args(def.args()), next.op(), Args(next.args()));
}

// The seed slot of a compiled op made of defs[g.first, g.first + g.count) at compiled index j of
// map stage `stage`: the slot its random member (or, with none or several, its first member) was
// given, else its own position.
OpSeedSlot SlotOf(const std::vector<const OpDef*>& defs, const FusionGroup& g, int stage, int j) {
  size_t member = g.first;
  int random_members = 0;
  for (size_t k = g.first; k < g.first + g.count; ++k) {
    const OpDescriptor* d = OpRegistry::Builtin().Find(defs[k]->op());
    if (d != nullptr && d->random && random_members++ == 0) member = k;
  }
  if (random_members > 1) member = g.first;
  const OpDef& def = *defs[member];
  if (def.has_seed_slot()) return OpSeedSlot{def.seed_slot().stage(), def.seed_slot().index()};
  return OpSeedSlot{stage, j};
}

// One compiled map step: its ops after fusion, their seed slots and a description for plans.
struct CompiledOps {
  std::vector<std::unique_ptr<ElementOp>> ops;
  std::vector<OpSeedSlot> slots;
  std::vector<std::string> names;
};

absl::StatusOr<CompiledOps> CompileOps(const std::vector<const OpDef*>& defs, int stage) {
  CompiledOps out;
  for (size_t j = 0; j < defs.size(); ++j) {
    const OpDef& def = *defs[j];
    const OpDescriptor* d = OpRegistry::Builtin().Find(def.op());
    if (d == nullptr) return OpRegistry::Builtin().UnknownOpError(def.op(), def.location().path());
    Args args(def.args());
    if (j + 1 < defs.size()) {
      auto fused = TryFuse(*d, def, *defs[j + 1]);
      if (!fused.ok()) return fused.status();
      if (*fused != nullptr) {
        const OpDef& next = *defs[j + 1];
        std::string desc = (*fused)->Describe();
        out.names.push_back(desc.empty() ? absl::StrCat(def.op(), "+", next.op(), " (fused)") : desc);
        out.slots.push_back(SlotOf(defs, FusionGroup{j, 2}, stage, static_cast<int>(out.ops.size())));
        out.ops.push_back(*std::move(fused));
        ++j;
        continue;
      }
    }
    auto op = d->factory(args);
    if (!op.ok()) {
      return absl::Status(op.status().code(), absl::StrCat(def.location().path().empty() ? def.op() : def.location().path(),
                                                           ": ", op.status().message()));
    }
    std::string desc = (*op)->Describe();
    out.names.push_back(desc.empty() ? def.op() : desc);
    out.slots.push_back(SlotOf(defs, FusionGroup{j, 1}, stage, static_cast<int>(out.ops.size())));
    out.ops.push_back(*std::move(op));
  }
  return out;
}

bool SameMapSettings(const StepDef& a, const StepDef& b) {
  Args x(a.args()), y(b.args());
  return x.Int("parallelism") == y.Int("parallelism") && x.Bool("deterministic", true) == y.Bool("deterministic", true) &&
         x.String("on_error") == y.String("on_error");
}

// The steps of `def` as the executor builds its stages: calls `stage(index, first_step, last_step)`
// for every stage after the source (stage 0), where a run of consecutive map steps with the same
// settings is one stage (so ops can fuse across them) and every other step is one stage.
template <typename Fn>
void ForEachStage(const PipelineDef& def, Fn stage) {
  int first = def.steps_size() > 0 && def.steps(0).kind() == "interleave" ? 1 : 0;
  int index = 1;
  for (int i = first; i < def.steps_size(); ++i) {
    int last = i;
    if (def.steps(i).kind() == "map") {
      while (last + 1 < def.steps_size() && def.steps(last + 1).kind() == "map" &&
             SameMapSettings(def.steps(i), def.steps(last + 1))) {
        ++last;
      }
    }
    stage(index++, i, last);
    i = last;
  }
}

std::vector<const OpDef*> OpsOf(const PipelineDef& def, int first_step, int last_step) {
  std::vector<const OpDef*> ops;
  for (int i = first_step; i <= last_step; ++i) {
    for (const auto& op : def.steps(i).ops()) ops.push_back(&op);
  }
  return ops;
}

// An in-memory source (RuntimeOptions::elements): one split holding the given elements.
class ElementListSource : public Source {
 public:
  explicit ElementListSource(std::shared_ptr<const std::vector<Element>> elements) : elements_(std::move(elements)) {}
  absl::StatusOr<std::vector<Split>> ListSplits() const override {
    Split split;
    split.path = "(elements in memory)";
    return std::vector<Split>{split};
  }
  absl::StatusOr<std::unique_ptr<SplitReader>> Open(const Split&, const SourceContext&) const override {
    return std::unique_ptr<SplitReader>(new Reader(elements_));
  }

 private:
  class Reader : public SplitReader {
   public:
    explicit Reader(std::shared_ptr<const std::vector<Element>> elements) : elements_(std::move(elements)) {}
    absl::StatusOr<std::optional<Element>> Next() override {
      if (next_ >= elements_->size()) return std::optional<Element>();
      return std::optional<Element>((*elements_)[next_++]);
    }

   private:
    std::shared_ptr<const std::vector<Element>> elements_;
    size_t next_ = 0;
  };
  std::shared_ptr<const std::vector<Element>> elements_;
};

}  // namespace

// Holds the compiled stage graph and the stats registry.
class Pipeline::Impl {
 public:
  PipelineStats stats;
  std::shared_ptr<const Source> source;
  std::unique_ptr<Stage> root;
  std::vector<std::string> plan;
  int cpu_budget = 1;
  bool autotune = true;
  uint64_t seed = 0;
  int64_t max_element_bytes = 0;
  int64_t ram_budget_bytes = 0;
  std::vector<const Stage*> stage_order;  // source first
};

void AutotuneStep(std::vector<std::shared_ptr<Tunable>>& tunables, int cpu_budget, int64_t ram_budget) {
  double total_cost = 0;
  std::vector<std::pair<Tunable*, double>> maps;
  for (auto& t : tunables) {
    StageStatsSnapshot s = t->stats->Snapshot();
    if (t->kind == Tunable::Kind::kParallelism) {
      uint64_t de = s.elements_out - t->last_elements;
      uint64_t dc = s.cpu_ns - t->last_cpu_ns;
      if (de > 0) {
        double cost = static_cast<double>(dc) / static_cast<double>(de);
        maps.emplace_back(t.get(), cost);
        total_cost += cost;
        t->last_elements = s.elements_out;
        t->last_cpu_ns = s.cpu_ns;
      }
    } else {
      uint64_t waits = t->consumer_waits.load();
      if (waits > t->last_waits && s.elements_out > 0) {
        double avg = static_cast<double>(s.bytes_out) / static_cast<double>(s.elements_out);
        int64_t cap = ram_budget > 0 ? static_cast<int64_t>(static_cast<double>(ram_budget) / std::max(1.0, avg)) : t->max;
        int64_t next = std::min({t->value.load() * 2, t->max, std::max<int64_t>(1, cap)});
        t->value = std::max<int64_t>(next, 1);
        t->stats->SetBufferSize(t->value);
      }
      t->last_waits = waits;
    }
  }
  if (maps.size() > 1 && total_cost > 0) {
    for (auto& [t, cost] : maps) {
      int64_t p = static_cast<int64_t>(std::lround(cpu_budget * cost / total_cost));
      t->value = std::clamp<int64_t>(p, 1, t->max);
      t->stats->SetParallelism(t->value);
    }
  }
}

namespace {

// Periodically rebalances map parallelism (proportional to each map's measured CPU cost per
// element, within the CPU budget) and grows prefetch buffers whose consumer finds them empty
// (within the RAM budget). Runs on its own thread for the life of one pipeline iterator.
class Autotuner {
 public:
  Autotuner(std::vector<std::shared_ptr<Tunable>> tunables, int cpu_budget, int64_t ram_budget)
      : tunables_(std::move(tunables)), cpu_budget_(cpu_budget), ram_budget_(ram_budget) {
    if (!tunables_.empty()) thread_ = std::thread([this] { Loop(); });
  }
  ~Autotuner() {
    {
      absl::MutexLock lock(&mu_);
      stop_ = true;
    }
    if (thread_.joinable()) thread_.join();
  }

 private:
  void Loop() {
    absl::MutexLock lock(&mu_);
    while (!stop_) {
      mu_.AwaitWithTimeout(absl::Condition(&stop_), absl::Milliseconds(100));
      if (stop_) break;
      AutotuneStep(tunables_, cpu_budget_, ram_budget_);
    }
  }

  std::vector<std::shared_ptr<Tunable>> tunables_;
  int cpu_budget_;
  int64_t ram_budget_;
  absl::Mutex mu_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

// The top-level iterator: owns the context, the stage iterators and the autotuner; cancels
// everything before tearing it down.
class TopIterator : public PipelineIterator {
 public:
  TopIterator() = default;
  ~TopIterator() override {
    ctx_->cancel->cancelled = true;
    autotuner_.reset();
    root_.reset();
  }
  absl::StatusOr<std::optional<Element>> Next() override { return root_->Next(); }

  std::unique_ptr<ExecContext> ctx_;
  std::unique_ptr<StageIterator> root_;
  std::unique_ptr<Autotuner> autotuner_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Pipeline>> Pipeline::Create(PipelineDef def, RuntimeOptions options) {
  if (auto s = Canonicalize(def); !s.ok()) return s;
  std::unique_ptr<Pipeline> p(new Pipeline());
  p->def_ = def;
  p->fingerprint_ = Fingerprint(def);
  p->impl_ = std::make_unique<Impl>();
  Impl& impl = *p->impl_;
  impl.cpu_budget = options.cpu_budget > 0 ? options.cpu_budget
                    : def.options().cpu_budget() > 0 ? def.options().cpu_budget()
                                                     : DefaultCpuBudget();
  impl.autotune = options.autotune.value_or(def.options().autotune());
  impl.seed = static_cast<uint64_t>(def.options().seed());
  impl.max_element_bytes = def.options().max_element_bytes();
  impl.ram_budget_bytes = def.options().ram_budget_bytes();

  const SourceDescriptor* sd = SourceRegistry::Builtin().Find(def.source().kind());
  Args source_args(def.source().args());
  if (options.elements != nullptr) {
    impl.source = std::make_shared<ElementListSource>(options.elements);
  } else {
    auto source = sd->factory(source_args);
    if (!source.ok()) {
      return absl::Status(source.status().code(), absl::StrCat("source.", def.source().kind(), ": ", source.status().message()));
    }
    impl.source = std::shared_ptr<const Source>(std::move(*source));
  }
  SourceContext sctx;
  sctx.on_error = source_args.String("on_error", "fail") == "skip" ? OnError::kSkip : OnError::kFail;
  sctx.max_element_bytes = impl.max_element_bytes;
  std::string source_desc = absl::StrCat("source ", def.source().kind());
  if (options.elements != nullptr) {
    source_desc = absl::StrCat("source: ", options.elements->size(), " elements in memory");
  } else {
    for (const char* key : {"files", "images", "path", "start", "stop", "count"}) {
      if (const Value* v = source_args.Raw(key)) absl::StrAppend(&source_desc, " ", key, "=", ValueToString(*v));
    }
  }

  if (def.steps_size() > 0 && def.steps(0).kind() == "interleave") {
    StageStats* st = impl.stats.AddStage("source+interleave", "source");
    impl.root = MakeInterleaveStage(impl.source, sctx, Args(def.steps(0).args()), st, source_desc);
  } else {
    StageStats* st = impl.stats.AddStage(absl::StrCat("source[", def.source().kind(), "]"), "source");
    impl.root = MakeSourceStage(impl.source, sctx, st, source_desc);
  }
  impl.stage_order.push_back(impl.root.get());

  absl::Status status;
  ForEachStage(def, [&](int index, int first_step, int last_step) {
    if (!status.ok()) return;
    const StepDef& step = def.steps(first_step);
    Args args(step.args());
    const std::string& kind = step.kind();
    if (kind == "map") {
      // Consecutive map steps with the same settings are one stage, so ops can fuse across them.
      std::vector<const OpDef*> ops = OpsOf(def, first_step, last_step);
      auto compiled = CompileOps(ops, index);
      if (!compiled.ok()) {
        status = compiled.status();
        return;
      }
      std::string desc = absl::StrJoin(compiled->names, " -> ");
      std::vector<std::string> short_names;
      for (const OpDef* op : ops) short_names.push_back(op->op());
      StageStats* st = impl.stats.AddStage(absl::StrCat("map[", absl::StrJoin(short_names, "+"), "]"), "map");
      impl.root = MakeMapStage(std::move(impl.root), std::move(compiled->ops), std::move(compiled->slots), desc, args, st);
    } else {
      StageStats* st = impl.stats.AddStage(kind, kind);
      if (kind == "filter") impl.root = MakeFilterStage(std::move(impl.root), args, st);
      else if (kind == "shuffle") impl.root = MakeShuffleStage(std::move(impl.root), args, impl.seed, st);
      else if (kind == "batch") impl.root = MakeBatchStage(std::move(impl.root), args, st);
      else if (kind == "unbatch") impl.root = MakeUnbatchStage(std::move(impl.root), st);
      else if (kind == "repeat") impl.root = MakeRepeatStage(std::move(impl.root), args, st);
      else if (kind == "take") impl.root = MakeTakeStage(std::move(impl.root), args, st);
      else if (kind == "skip") impl.root = MakeSkipStage(std::move(impl.root), args, st);
      else if (kind == "shard") impl.root = MakeShardStage(std::move(impl.root), args, st);
      else if (kind == "cache") impl.root = MakeCacheStage(std::move(impl.root), args, st);
      else if (kind == "prefetch") impl.root = MakePrefetchStage(std::move(impl.root), args, st);
      else if (kind == "bucket_by_length") impl.root = MakeBucketByLengthStage(std::move(impl.root), args, st);
      else {
        status = absl::InvalidArgumentError(absl::StrCat("steps[", first_step, "]: '", kind, "' is not allowed here"));
        return;
      }
    }
    impl.stage_order.push_back(impl.root.get());
  });
  if (!status.ok()) return status;
  return p;
}

void AssignSeedSlots(PipelineDef& def) {
  // Slots per op, in the order OpsOf lists them (steps, then ops), computed before any is set.
  std::vector<std::pair<std::pair<int, int>, OpSeedSlot>> assigned;  // ((step, op), slot)
  ForEachStage(def, [&](int index, int first_step, int last_step) {
    if (def.steps(first_step).kind() != "map") return;
    std::vector<const OpDef*> ops = OpsOf(def, first_step, last_step);
    std::vector<std::pair<int, int>> where;
    for (int i = first_step; i <= last_step; ++i) {
      for (int k = 0; k < def.steps(i).ops_size(); ++k) where.emplace_back(i, k);
    }
    int compiled = 0;
    for (size_t j = 0; j < ops.size(); j += 1) {
      FusionGroup g{j, 1};
      if (j + 1 < ops.size()) {
        if (const OpDescriptor* d = OpRegistry::Builtin().Find(ops[j]->op())) {
          auto fused = TryFuse(*d, *ops[j], *ops[j + 1]);
          if (fused.ok() && *fused != nullptr) g.count = 2;
        }
      }
      OpSeedSlot slot = SlotOf(ops, g, index, compiled++);
      for (size_t k = g.first; k < g.first + g.count; ++k) assigned.emplace_back(where[k], slot);
      j += g.count - 1;
    }
  });
  for (const auto& [at, slot] : assigned) {
    SeedSlot* s = def.mutable_steps(at.first)->mutable_ops(at.second)->mutable_seed_slot();
    s->set_stage(slot.stage);
    s->set_index(slot.index);
  }
}

Pipeline::~Pipeline() = default;

int Pipeline::cpu_budget() const { return impl_->cpu_budget; }

absl::StatusOr<std::vector<Split>> Pipeline::ListSplits() const { return impl_->source->ListSplits(); }

absl::StatusOr<std::unique_ptr<PipelineIterator>> Pipeline::MakeIterator(std::shared_ptr<SplitProvider> splits) {
  if (splits == nullptr) {
    auto list = impl_->source->ListSplits();
    if (!list.ok()) return list.status();
    splits = std::make_shared<ListSplitProvider>(*std::move(list));
  }
  auto top = std::make_unique<TopIterator>();
  top->ctx_ = std::make_unique<ExecContext>();
  ExecContext& ctx = *top->ctx_;
  ctx.splits = std::move(splits);
  ctx.cancel = std::make_shared<Cancellation>();
  ctx.seed = impl_->seed;
  ctx.cpu_budget = impl_->cpu_budget;
  ctx.max_element_bytes = impl_->max_element_bytes;
  ctx.ram_budget_bytes = impl_->ram_budget_bytes;
  ctx.autotune = impl_->autotune;
  auto root = impl_->root->MakeIterator(ctx);
  if (!root.ok()) return root.status();
  top->root_ = *std::move(root);
  if (ctx.autotune && !ctx.tunables.empty()) {
    top->autotuner_ = std::make_unique<Autotuner>(ctx.tunables, ctx.cpu_budget, ctx.ram_budget_bytes);
  }
  return std::unique_ptr<PipelineIterator>(std::move(top));
}

std::vector<StageStatsSnapshot> Pipeline::Stats() const {
  std::vector<StageStatsSnapshot> out = impl_->stats.Snapshot();
  for (size_t i = 0; i < out.size(); ++i) {
    if (i == 0) {
      out[i].elements_in = out[i].elements_out + out[i].errors_skipped;
      out[i].bytes_in = out[i].bytes_out;
    } else {
      out[i].elements_in = out[i - 1].elements_out;
      out[i].bytes_in = out[i - 1].bytes_out;
    }
  }
  return out;
}

std::string Pipeline::Explain() const {
  std::string out = absl::StrCat("pipeline ", def_.name().empty() ? "(unnamed)" : def_.name(), "  fingerprint ",
                                 fingerprint_, "\n  cpu_budget ", impl_->cpu_budget, "  autotune ",
                                 impl_->autotune ? "on" : "off", "  seed ", impl_->seed, "\n");
  auto stats = impl_->stats.Snapshot();
  for (size_t i = 0; i < impl_->stage_order.size(); ++i) {
    absl::StrAppend(&out, "  ", i, ". ", impl_->stage_order[i]->Describe(), "\n");
  }
  return out;
}

std::string FormatStatsTable(const std::vector<StageStatsSnapshot>& stats, double wall_seconds) {
  std::string out = absl::StrFormat("%-3s %-36s %10s %10s %10s %10s %9s %7s %6s %7s\n", "#", "stage", "in", "out",
                                    "MB in", "MB out", "cpu s", "cpu %", "par", "skipped");
  for (const auto& s : stats) {
    double cpu = static_cast<double>(s.cpu_ns) / 1e9;
    std::string name = s.name.size() > 36 ? s.name.substr(0, 33) + "..." : s.name;
    out += absl::StrFormat("%-3d %-36s %10d %10d %10.1f %10.1f %9.2f %6.0f%% %6s %7d\n", s.index, name, s.elements_in,
                           s.elements_out, static_cast<double>(s.bytes_in) / 1e6, static_cast<double>(s.bytes_out) / 1e6,
                           cpu, wall_seconds > 0 ? 100.0 * cpu / wall_seconds : 0.0,
                           s.parallelism > 0 ? absl::StrCat(s.parallelism) : std::string("-"), s.errors_skipped);
  }
  return out;
}

}  // namespace sluice::pipeline
