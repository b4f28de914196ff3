#include "dataplane/pipeline/autoorder/auto_order.h"

#include <algorithm>
#include <numeric>
#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "dataplane/pipeline/autoorder/chain.h"
#include "dataplane/pipeline/autoorder/order_optimizer.h"
#include "dataplane/pipeline/autoorder/order_profiler.h"
#include "dataplane/pipeline/op.h"
#include "dataplane/pipeline/pipeline.h"
#include "dataplane/pipeline/spec_parser.h"
#include "dataplane/pipeline/stats.h"

namespace sluice::pipeline {
namespace {

using autoorder::Chain;
using autoorder::Segment;
using autoorder::Unit;

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

// Pairs of units (as "a+b") that the executor would fuse when the units run in `order`: adjacent
// ops of maps with the same settings whose first op fuses with the second (greedily from the left).
std::set<std::string> FusedPairs(const PipelineDef& def, const Chain& chain, const std::vector<size_t>& order) {
  std::set<std::string> pairs;
  for (size_t k = 0; k + 1 < order.size(); ++k) {
    const Unit& a = chain.units[order[k]];
    const Unit& b = chain.units[order[k + 1]];
    if (a.kind != Unit::Kind::kOp || b.kind != Unit::Kind::kOp) continue;
    const StepDef& sa = def.steps(a.step);
    const StepDef& sb = def.steps(b.step);
    if (sa.args().SerializeAsString() != sb.args().SerializeAsString()) continue;
    const OpDef& oa = sa.ops(a.op);
    const OpDef& ob = sb.ops(b.op);
    const OpDescriptor* d = OpRegistry::Builtin().Find(oa.op());
    if (d == nullptr || !d->fuse_with_next) continue;
    auto fused = d->fuse_with_next(Args(oa.args()), ob.op(), Args(ob.args()));
    if (fused.ok() && *fused != nullptr) {
      pairs.insert(absl::StrCat(a.name, "+", b.name));
      ++k;
    }
  }
  return pairs;
}

// Why a strict rewrite differs, when a fusion explains it.
std::string FusionHint(const PipelineDef& def, const Chain& chain, const std::vector<size_t>& written,
                       const std::vector<size_t>& candidate) {
  std::set<std::string> before = FusedPairs(def, chain, written);
  std::set<std::string> after = FusedPairs(def, chain, candidate);
  std::vector<std::string> hints;
  for (const auto& p : after) {
    if (before.count(p) == 0) hints.push_back(absl::StrCat("the new order fuses ", p, " (not bit-identical)"));
  }
  for (const auto& p : before) {
    if (after.count(p) == 0) hints.push_back(absl::StrCat("the new order no longer fuses ", p));
  }
  return absl::StrJoin(hints, "; ");
}

struct Totals {
  double predicted_written = 0, predicted_chosen = 0;
  double measured_written = 0, measured_chosen = 0;
  double max_abs = 0;
  double diff_sum = 0;
  double diff_weight = 0;
  void Add(double pw, double pc, double mw, double mc) {
    predicted_written += pw;
    predicted_chosen += pc;
    measured_written += mw;
    measured_chosen += mc;
  }
};

}  // namespace

absl::StatusOr<AutoOrderMode> ParseAutoOrderMode(absl::string_view text) {
  const std::string lower = absl::AsciiStrToLower(text);
  if (lower == "off" || lower.empty() || lower == "false") return AutoOrderMode::kOff;
  if (lower == "strict") return AutoOrderMode::kStrict;
  if (lower == "relaxed" || lower == "true") return AutoOrderMode::kRelaxed;
  return absl::InvalidArgumentError(absl::StrCat("unknown AutoOrder mode '", text, "'; use off, strict or relaxed"));
}

absl::string_view AutoOrderModeName(AutoOrderMode mode) {
  switch (mode) {
    case AutoOrderMode::kOff: return "off";
    case AutoOrderMode::kStrict: return "strict";
    case AutoOrderMode::kRelaxed: return "relaxed";
  }
  return "?";
}

absl::StatusOr<AutoOrderResult> PlanAutoOrder(const PipelineDef& input, const AutoOrderOptions& options) {
  const uint64_t cpu_start = ThreadCpuNanos();
  AutoOrderResult result;
  result.def = input;
  if (absl::Status s = Canonicalize(result.def); !s.ok()) return s;
  AutoOrderReport& report = result.report;
  report.set_mode(std::string(AutoOrderModeName(options.mode)));
  auto finish = [&](std::string outcome, std::string reason) -> absl::StatusOr<AutoOrderResult> {
    report.set_outcome(std::move(outcome));
    report.set_reason(std::move(reason));
    report.set_planning_cpu_seconds(static_cast<double>(ThreadCpuNanos() - cpu_start) / 1e9);
    return std::move(result);
  };
  if (options.mode == AutoOrderMode::kOff) return finish("unchanged", "AutoOrder is off");

  PipelineDef slotted = result.def;
  AssignSeedSlots(slotted);
  auto built = autoorder::BuildChain(slotted);
  if (!built.ok()) return finish("failed", std::string(built.status().message()));
  const Chain& chain = *built;
  if (chain.segments.empty()) {
    return finish("unchanged",
                  "nothing to reorder: no two ops or filters follow each other without a barrier (another step, a "
                  "pinned op or an op without a declaration) between them");
  }
  // Report the span from the first to the last segment, barriers in brackets.
  std::vector<size_t> order(chain.units.size());
  std::iota(order.begin(), order.end(), 0);
  const size_t span_begin = chain.segments.front().begin;
  const size_t span_end = chain.segments.back().end;
  auto names = [&](const std::vector<size_t>& o) {
    std::vector<std::string> out;
    for (size_t k = span_begin; k < span_end; ++k) {
      const Unit& u = chain.units[o[k]];
      out.push_back(u.movable() ? u.name : absl::StrCat("[", u.name, "]"));
    }
    return out;
  };
  for (const auto& n : names(order)) report.add_original_order(n);

  const autoorder::Exactness exactness = options.mode == AutoOrderMode::kStrict ? autoorder::Exactness::kExactOnly
                                                                                : autoorder::Exactness::kApproximateToo;
  Totals applied, refused;
  std::vector<std::string> notes;
  bool any_applied = false, any_refused = false;
  for (const Segment& segment : chain.segments) {
    std::vector<OrderProperties> props;
    for (size_t k = segment.begin; k < segment.end; ++k) props.push_back(chain.units[k].properties);
    const auto before = autoorder::MustStayBefore(props, exactness);
    bool free_pair = false;
    for (size_t k = 0; k + 1 < props.size(); ++k) free_pair |= !before[k][k + 1];
    const std::string seg_name = absl::StrCat(chain.units[segment.begin].name, " .. ", chain.units[segment.end - 1].name);
    if (!free_pair) {
      notes.push_back(absl::StrCat(seg_name, ": no two of its ops may swap (field dependencies",
                                   options.mode == AutoOrderMode::kStrict ? ", or only approximately" : "", ")"));
      continue;
    }
    auto sample = autoorder::CollectSample(slotted, chain, segment.begin, options.sample_elements);
    if (!sample.ok()) return finish("failed", std::string(sample.status().message()));
    if ((*sample)->empty()) {
      notes.push_back(absl::StrCat(seg_name, ": no element reaches it in the sample"));
      continue;
    }
    report.set_sample_elements(std::max<int64_t>(report.sample_elements(), static_cast<int64_t>((*sample)->size())));
    auto profiles = autoorder::ProfileUnits(slotted, chain, segment, *sample, options.profile_repetitions);
    if (!profiles.ok()) {
      return finish("failed", absl::StrCat("the pipeline fails on the sample: ", profiles.status().message()));
    }
    for (size_t k = 0; k < profiles->size(); ++k) {
      const autoorder::UnitProfile& p = (*profiles)[k];
      AutoOrderUnitCost* c = report.add_costs();
      c->set_name(chain.units[segment.begin + k].name);
      c->set_cpu_us_per_element(p.cpu_ns / 1e3);
      double in = 0, out = 0;
      for (const auto& [f, s] : p.in) in += s.bytes();
      for (const auto& [f, s] : p.out) out += s.bytes();
      c->set_bytes_in(in);
      c->set_bytes_out(out);
      c->set_keep_fraction(p.keep);
    }
    autoorder::SegmentModel model;
    model.units = props;
    model.profiles = *std::move(profiles);
    model.input = autoorder::MeasureFields(**sample);
    const autoorder::OrderChoice choice = autoorder::FindBestOrder(model, exactness, options.min_predicted_gain);
    std::vector<size_t> written(segment.size());
    std::iota(written.begin(), written.end(), segment.begin);
    std::vector<size_t> candidate;
    for (size_t u : choice.order) candidate.push_back(segment.begin + u);
    if (candidate == written) {
      notes.push_back(absl::StrCat(seg_name, ": no legal order is predicted at least ",
                                   absl::StrFormat("%.0f%%", 100 * options.min_predicted_gain), " cheaper"));
      continue;
    }
    // Measure both orders through the executor, alternating, and compare their outputs.
    std::vector<double> cpu_written, cpu_candidate;
    autoorder::OutputDiff diff;
    absl::Status candidate_error;
    for (int r = 0; r < std::max(1, options.rounds) && candidate_error.ok(); ++r) {
      auto a = autoorder::RunSegment(slotted, chain, written, *sample);
      if (!a.ok()) return finish("failed", absl::StrCat("the pipeline fails on the sample: ", a.status().message()));
      auto b = autoorder::RunSegment(slotted, chain, candidate, *sample);
      if (!b.ok()) {
        candidate_error = b.status();
        break;
      }
      cpu_written.push_back(a->cpu_ns);
      cpu_candidate.push_back(b->cpu_ns);
      if (r == 0) diff = autoorder::CompareOutputs(b->outputs, a->outputs);
    }
    const std::string chosen = absl::StrJoin(autoorder::UnitNames(chain, candidate), " -> ");
    if (!candidate_error.ok()) {
      any_refused = true;
      notes.push_back(absl::StrCat(seg_name, ": ", chosen, " fails on the sample (", candidate_error.message(), ")"));
      continue;
    }
    const double measured_written = Median(cpu_written);
    const double measured_candidate = Median(cpu_candidate);
    const double measured = measured_candidate > 0 ? measured_written / measured_candidate : 0;
    if (options.mode == AutoOrderMode::kStrict && !diff.identical) {
      any_refused = true;
      refused.Add(choice.original_cost, choice.cost, measured_written, measured_candidate);
      refused.max_abs = std::max(refused.max_abs, diff.max_abs);
      std::string hint = FusionHint(slotted, chain, written, candidate);
      notes.push_back(absl::StrCat(seg_name, ": strict mode refuses ", chosen, ": its output differs on the sample (",
                                   diff.first_difference, ")", hint.empty() ? "" : absl::StrCat("; ", hint),
                                   "; use relaxed mode, or keep_position to pin an op"));
      continue;
    }
    if (!diff.same_structure) {
      any_refused = true;
      refused.Add(choice.original_cost, choice.cost, measured_written, measured_candidate);
      notes.push_back(absl::StrCat(seg_name, ": ", chosen, " changes the elements (", diff.first_difference,
                                   "): a declaration is wrong"));
      continue;
    }
    if (measured < options.min_measured_speedup) {
      notes.push_back(absl::StrCat(seg_name, ": ", chosen, " measured ", absl::StrFormat("%.2fx", measured),
                                   " on the sample (predicted ", absl::StrFormat("%.2fx", choice.original_cost / choice.cost),
                                   "), below ", absl::StrFormat("%.2fx", options.min_measured_speedup)));
      continue;
    }
    any_applied = true;
    applied.Add(choice.original_cost, choice.cost, measured_written, measured_candidate);
    applied.max_abs = std::max(applied.max_abs, diff.max_abs);
    applied.diff_sum += diff.mean_abs;
    applied.diff_weight += 1;
    std::copy(candidate.begin(), candidate.end(), order.begin() + static_cast<std::ptrdiff_t>(segment.begin));
  }

  const Totals& t = any_applied ? applied : refused;
  if (t.predicted_chosen > 0) report.set_predicted_speedup(t.predicted_written / t.predicted_chosen);
  if (t.measured_chosen > 0) report.set_measured_speedup(t.measured_written / t.measured_chosen);
  report.set_max_abs_diff(t.max_abs);
  if (t.diff_weight > 0) report.set_mean_abs_diff(t.diff_sum / t.diff_weight);
  if (!any_applied) {
    for (const auto& n : names(order)) report.add_chosen_order(n);
    return finish(any_refused ? "refused" : "unchanged", absl::StrJoin(notes, "; "));
  }
  for (const auto& n : names(order)) report.add_chosen_order(n);
  result.def = autoorder::RebuildDef(slotted, chain, order);
  return finish("applied", notes.empty() ? "" : absl::StrCat("other parts unchanged: ", absl::StrJoin(notes, "; ")));
}

std::string SummarizeAutoOrderReport(const AutoOrderReport& r) {
  std::string s = r.outcome();
  if (r.outcome() == "applied") {
    absl::StrAppend(&s, ": ", absl::StrJoin(r.chosen_order(), " -> "), " (was ", absl::StrJoin(r.original_order(), " -> "),
                    ")", absl::StrFormat(", measured %.2fx, predicted %.2fx", r.measured_speedup(), r.predicted_speedup()));
    if (r.max_abs_diff() > 0) absl::StrAppend(&s, absl::StrFormat(", max abs diff %.3g", r.max_abs_diff()));
    return s;
  }
  if (!r.reason().empty()) absl::StrAppend(&s, ": ", r.reason());
  return s;
}

std::string FormatAutoOrderReport(const AutoOrderReport& r) {
  std::string out = absl::StrCat("AutoOrder (", r.mode(), "): ", r.outcome(), "\n");
  if (r.original_order_size() > 0) {
    absl::StrAppend(&out, "  as written: ", absl::StrJoin(r.original_order(), " -> "), "\n");
    absl::StrAppend(&out, "  chosen:     ", absl::StrJoin(r.chosen_order(), " -> "), "\n");
  }
  if (r.costs_size() > 0) {
    absl::StrAppend(&out, absl::StrFormat("  measured on %d sample elements, in the order as written:\n", r.sample_elements()));
    absl::StrAppend(&out, absl::StrFormat("    %-36s %14s %12s %12s %6s\n", "op", "cpu us/elem", "KB in", "KB out", "kept"));
    for (const auto& c : r.costs()) {
      absl::StrAppend(&out, absl::StrFormat("    %-36s %14.1f %12.1f %12.1f %5.0f%%\n", c.name(), c.cpu_us_per_element(),
                                            c.bytes_in() / 1e3, c.bytes_out() / 1e3, 100 * c.keep_fraction()));
    }
  }
  if (r.predicted_speedup() > 0) {
    absl::StrAppend(&out, absl::StrFormat("  speed-up (CPU per element of the reordered part): predicted %.2fx, measured %.2fx\n",
                                          r.predicted_speedup(), r.measured_speedup()));
  }
  if (r.outcome() == "applied" || r.outcome() == "refused") {
    absl::StrAppend(&out, absl::StrFormat("  output difference on the sample: max %.4g, mean %.4g\n", r.max_abs_diff(),
                                          r.mean_abs_diff()));
  }
  if (!r.reason().empty()) absl::StrAppend(&out, "  ", r.reason(), "\n");
  absl::StrAppend(&out, absl::StrFormat("  planning CPU: %.2f s\n", r.planning_cpu_seconds()));
  return out;
}

}  // namespace sluice::pipeline
