#include "dataplane/pipeline/autoorder/order_profiler.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "dataplane/pipeline/op.h"
#include "dataplane/pipeline/pipeline.h"
#include "dataplane/pipeline/stages.h"
#include "dataplane/pipeline/stats.h"

namespace sluice::pipeline::autoorder {
namespace {

// Steps that only reorder, repeat or buffer elements: the sample does without them.
bool OnlyReorders(const std::string& kind) {
  return kind == "shuffle" || kind == "repeat" || kind == "prefetch" || kind == "cache" || kind == "interleave";
}

// Runs everything on the calling thread: maps at parallelism 1 (in order), nothing in the background.
void MakeSequential(PipelineDef& def) {
  def.mutable_options()->set_autotune(false);
  def.mutable_options()->set_cpu_budget(1);
  for (StepDef& step : *def.mutable_steps()) {
    if (step.kind() != "map") continue;
    SetArg(*step.mutable_args(), "parallelism", IntValue(1));
    SetArg(*step.mutable_args(), "deterministic", BoolValue(true));
  }
}

RuntimeOptions SequentialRuntime() {
  RuntimeOptions options;
  options.cpu_budget = 1;
  options.autotune = false;
  return options;
}

absl::StatusOr<std::vector<Element>> Drain(Pipeline& pipeline, int64_t limit = -1) {
  auto it = pipeline.MakeIterator();
  if (!it.ok()) return it.status();
  std::vector<Element> out;
  while (limit < 0 || static_cast<int64_t>(out.size()) < limit) {
    auto next = (*it)->Next();
    if (!next.ok()) return next.status();
    if (!next->has_value()) break;
    out.push_back(std::move(**next));
  }
  return out;
}

// One unit as the profiler runs it: an op (without fusion) or a filter's predicate.
struct RunnableUnit {
  std::unique_ptr<ElementOp> op;
  std::unique_ptr<ElementPredicate> predicate;
  OpSeedSlot slot;
  bool skip_errors = false;  // the op's map drops elements an op rejects
  std::string name;
};

absl::StatusOr<RunnableUnit> MakeRunnable(const PipelineDef& def, const Unit& unit) {
  RunnableUnit r;
  r.name = unit.name;
  const StepDef& step = def.steps(unit.step);
  if (unit.kind == Unit::Kind::kFilter) {
    r.predicate = MakeFilterPredicate(Args(step.args()));
    return r;
  }
  const OpDef& op = step.ops(unit.op);
  const OpDescriptor* d = OpRegistry::Builtin().Find(op.op());
  if (d == nullptr) return OpRegistry::Builtin().UnknownOpError(op.op(), op.location().path());
  auto made = d->factory(Args(op.args()));
  if (!made.ok()) return absl::Status(made.status().code(), absl::StrCat(unit.name, ": ", made.status().message()));
  r.op = *std::move(made);
  r.slot = OpSeedSlot{op.seed_slot().stage(), op.seed_slot().index()};
  r.skip_errors = Args(step.args()).String("on_error", "fail") == "skip";
  return r;
}

// Applies `unit` to every element of `in` (in place), dropping what it drops.
absl::Status RunUnit(const RunnableUnit& unit, uint64_t pipeline_seed, std::vector<Element>& elements) {
  size_t kept = 0;
  for (size_t i = 0; i < elements.size(); ++i) {
    Element& e = elements[i];
    bool keep = true;
    if (unit.predicate != nullptr) {
      auto k = unit.predicate->Keep(e);
      if (!k.ok()) return absl::Status(k.status().code(), absl::StrCat(unit.name, ": ", k.status().message()));
      keep = *k;
    } else {
      absl::Status s = unit.op->Apply(e, OpSeed(pipeline_seed, unit.slot, e.key()));
      if (!s.ok()) {
        if (!unit.skip_errors && s.code() != absl::StatusCode::kDataLoss) {
          return absl::Status(s.code(), absl::StrCat(unit.name, ": ", s.message()));
        }
        keep = false;
      }
    }
    if (keep) {
      if (kept != i) elements[kept] = std::move(e);
      ++kept;
    }
  }
  elements.resize(kept);
  return absl::OkStatus();
}

std::string KeyString(uint64_t key) { return absl::StrFormat("0x%016x", key); }

}  // namespace

absl::StatusOr<Sample> CollectSample(const PipelineDef& def, const Chain& chain, size_t first_unit, int64_t count) {
  std::vector<size_t> prefix;
  for (size_t i = 0; i < first_unit; ++i) {
    const Unit& u = chain.units[i];
    if (u.kind == Unit::Kind::kStep && OnlyReorders(u.name)) continue;
    prefix.push_back(i);
  }
  PipelineDef sample_def = RebuildDef(def, chain, prefix);
  MakeSequential(sample_def);
  auto pipeline = Pipeline::Create(sample_def, SequentialRuntime());
  if (!pipeline.ok()) return pipeline.status();
  auto splits = (*pipeline)->ListSplits();
  if (!splits.ok()) return absl::Status(splits.status().code(), absl::StrCat("reading the sample: ", splits.status().message()));
  // Input is often ordered (by class, by file, by length): read a few elements from each of up to
  // kSampleSplits splits spread over the input rather than the first `count` of the first split.
  constexpr size_t kSampleSplits = 8;
  std::vector<Split> chosen;
  const size_t n = splits->size();
  const size_t want = std::min(n, kSampleSplits);
  for (size_t k = 0; k < want; ++k) chosen.push_back((*splits)[k * n / want]);
  auto elements = std::make_shared<std::vector<Element>>();
  for (size_t k = 0; k < chosen.size() && static_cast<int64_t>(elements->size()) < count; ++k) {
    const int64_t left = count - static_cast<int64_t>(elements->size());
    const int64_t per_split = (left + static_cast<int64_t>(chosen.size() - k) - 1) / static_cast<int64_t>(chosen.size() - k);
    auto it = (*pipeline)->MakeIterator(std::make_shared<ListSplitProvider>(std::vector<Split>{chosen[k]}));
    if (!it.ok()) return it.status();
    for (int64_t i = 0; i < per_split; ++i) {
      auto next = (*it)->Next();
      if (!next.ok()) {
        return absl::Status(next.status().code(), absl::StrCat("reading the sample: ", next.status().message()));
      }
      if (!next->has_value()) break;
      elements->push_back(std::move(**next));
    }
  }
  return std::shared_ptr<const std::vector<Element>>(std::move(elements));
}

FieldSizes MeasureFields(const std::vector<Element>& elements) {
  FieldSizes sizes;
  if (elements.empty()) return sizes;
  for (const Element& e : elements) {
    for (const auto& [name, t] : e.fields()) {
      FieldSize& s = sizes[name];
      if (t.dtype() == DType::kString) {
        s.values += static_cast<double>(t.ByteSize());
        s.value_bytes = 1;
      } else {
        s.values += static_cast<double>(t.num_elements());
        s.value_bytes = static_cast<double>(DTypeSize(t.dtype()));
      }
    }
  }
  for (auto& [name, s] : sizes) s.values /= static_cast<double>(elements.size());
  return sizes;
}

absl::StatusOr<std::vector<UnitProfile>> ProfileUnits(const PipelineDef& def, const Chain& chain, const Segment& segment,
                                                      const Sample& sample, int repetitions) {
  const uint64_t seed = static_cast<uint64_t>(def.options().seed());
  std::vector<UnitProfile> profiles;
  std::vector<Element> current = *sample;
  for (size_t k = segment.begin; k < segment.end; ++k) {
    auto runnable = MakeRunnable(def, chain.units[k]);
    if (!runnable.ok()) return runnable.status();
    UnitProfile p;
    p.in = MeasureFields(current);
    p.elements_in = static_cast<int64_t>(current.size());
    uint64_t best = std::numeric_limits<uint64_t>::max();
    std::vector<Element> out;
    for (int r = 0; r < std::max(1, repetitions); ++r) {
      std::vector<Element> work = current;  // shares the tensors' bytes
      const uint64_t start = ThreadCpuNanos();
      if (absl::Status s = RunUnit(*runnable, seed, work); !s.ok()) return s;
      best = std::min(best, ThreadCpuNanos() - start);
      out = std::move(work);
    }
    p.cpu_ns = current.empty() ? 0 : static_cast<double>(best) / static_cast<double>(current.size());
    p.keep = current.empty() ? 1.0 : static_cast<double>(out.size()) / static_cast<double>(current.size());
    p.out = MeasureFields(out);
    profiles.push_back(std::move(p));
    current = std::move(out);
  }
  return profiles;
}

absl::StatusOr<SegmentRun> RunSegment(const PipelineDef& def, const Chain& chain, const std::vector<size_t>& order,
                                      const Sample& sample) {
  PipelineDef segment = RebuildDef(def, chain, order);
  MakeSequential(segment);
  RuntimeOptions options = SequentialRuntime();
  options.elements = sample;
  auto pipeline = Pipeline::Create(segment, options);
  if (!pipeline.ok()) return pipeline.status();
  auto outputs = Drain(**pipeline, -1);
  if (!outputs.ok()) return outputs.status();
  SegmentRun run;
  run.outputs = *std::move(outputs);
  std::vector<StageStatsSnapshot> stats = (*pipeline)->Stats();
  for (size_t i = 1; i < stats.size(); ++i) run.cpu_ns += static_cast<double>(stats[i].cpu_ns);
  return run;
}

OutputDiff CompareOutputs(const std::vector<Element>& a, const std::vector<Element>& b) {
  OutputDiff diff;
  auto structural = [&](std::string what) {
    diff.identical = false;
    diff.same_structure = false;
    if (diff.first_difference.empty()) diff.first_difference = std::move(what);
  };
  if (a.size() != b.size()) {
    structural(absl::StrCat(a.size(), " elements instead of ", b.size()));
    return diff;
  }
  double total = 0;
  double count = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const Element& x = a[i];
    const Element& y = b[i];
    const std::string where = absl::StrCat("element ", i, " (key ", KeyString(x.key()), ")");
    if (x.key() != y.key()) {
      structural(absl::StrCat(where, ": key ", KeyString(y.key()), " in its place"));
      continue;
    }
    if (x.fields().size() != y.fields().size()) {
      structural(absl::StrCat(where, ": fields ", x.FieldNames(), " instead of ", y.FieldNames()));
      continue;
    }
    for (const auto& [name, tx] : x.fields()) {
      const Tensor* ty = y.Find(name);
      if (ty == nullptr) {
        structural(absl::StrCat(where, ": field '", name, "' is missing from ", y.FieldNames()));
        continue;
      }
      if (tx.dtype() != ty->dtype() || tx.shape() != ty->shape()) {
        structural(absl::StrCat(where, ", field '", name, "': ", DTypeName(tx.dtype()), ShapeToString(tx.shape()),
                                " instead of ", DTypeName(ty->dtype()), ShapeToString(ty->shape())));
        continue;
      }
      if (tx.dtype() == DType::kString) {
        auto sx = tx.strings();
        auto sy = ty->strings();
        for (size_t k = 0; k < sx.size(); ++k) {
          if (sx[k] != sy[k]) {
            structural(absl::StrCat(where, ", field '", name, "': strings differ"));
            break;
          }
        }
        continue;
      }
      if (tx.nbytes() == ty->nbytes() && std::memcmp(tx.raw(), ty->raw(), tx.nbytes()) == 0) {
        count += static_cast<double>(tx.num_elements());
        continue;
      }
      diff.identical = false;
      double field_max = 0;
      for (int64_t k = 0; k < tx.num_elements(); ++k) {
        const double d = std::abs(tx.GetAsDouble(k) - ty->GetAsDouble(k));
        const double dd = std::isnan(d) ? std::numeric_limits<double>::infinity() : d;
        field_max = std::max(field_max, dd);
        total += dd;
      }
      count += static_cast<double>(tx.num_elements());
      if (field_max > diff.max_abs && diff.same_structure) {
        diff.first_difference = absl::StrCat(where, ", field '", name, "': max abs diff ", field_max);
      }
      diff.max_abs = std::max(diff.max_abs, field_max);
    }
  }
  diff.mean_abs = count > 0 ? total / count : 0;
  if (!diff.identical && diff.first_difference.empty()) diff.first_difference = "bytes differ (e.g. +0.0 and -0.0)";
  return diff;
}

}  // namespace sluice::pipeline::autoorder
