#include "tools/sluice/pipeline_commands.h"

#include <unistd.h>

#include <cstdio>
#include <iomanip>
#include <iostream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "dataplane/pipeline/autoorder/auto_order.h"
#include "dataplane/pipeline/op.h"
#include "dataplane/pipeline/pipeline.h"
#include "dataplane/pipeline/source.h"
#include "dataplane/pipeline/spec_parser.h"
#include "dataplane/pipeline/transforms.h"

namespace sluice::cli {

using pipeline::ArgSpec;

int PipelineCheck(const std::string& file, std::ostream& out, std::ostream& err) {
  auto def = pipeline::ParsePipelineSpecFile(file);
  if (!def.ok()) {
    err << "error: " << def.status().message() << "\n";
    return 1;
  }
  auto p = pipeline::Pipeline::Create(*def);
  if (!p.ok()) {
    err << "error: " << file << ": " << p.status().message() << "\n";
    return 1;
  }
  auto splits = (*p)->ListSplits();
  if (!splits.ok()) {
    err << "error: " << file << ": " << splits.status().message() << "\n";
    return 1;
  }
  out << "# " << file << ": valid; fingerprint " << (*p)->fingerprint() << "; " << splits->size() << " splits\n";
  out << pipeline::ToYaml(*def);
  return 0;
}

namespace {

// Applies AutoOrder to `def` when asked; the report goes to `report` (nothing when off).
absl::Status ApplyAutoOrder(const AutoOrderFlags& flags, pipeline::PipelineDef& def, std::ostream& report) {
  auto mode = pipeline::ParseAutoOrderMode(flags.mode);
  if (!mode.ok()) return absl::InvalidArgumentError(absl::StrCat("--auto-order: ", mode.status().message()));
  if (*mode == pipeline::AutoOrderMode::kOff) return absl::OkStatus();
  if (flags.sample < 1) return absl::InvalidArgumentError("--auto-order-sample: must be at least 1");
  pipeline::AutoOrderOptions options;
  options.mode = *mode;
  options.sample_elements = flags.sample;
  auto result = pipeline::PlanAutoOrder(def, options);
  if (!result.ok()) return result.status();
  report << pipeline::FormatAutoOrderReport(result->report);
  def = std::move(result->def);
  return absl::OkStatus();
}

}  // namespace

int PipelineExplain(const std::string& file, const AutoOrderFlags& auto_order, std::ostream& out, std::ostream& err) {
  auto def = pipeline::ParsePipelineSpecFile(file);
  if (!def.ok()) {
    err << "error: " << def.status().message() << "\n";
    return 1;
  }
  if (absl::Status s = ApplyAutoOrder(auto_order, *def, out); !s.ok()) {
    err << "error: " << file << ": " << s.message() << "\n";
    return 1;
  }
  auto p = pipeline::Pipeline::Create(*def);
  if (!p.ok()) {
    err << "error: " << file << ": " << p.status().message() << "\n";
    return 1;
  }
  out << (*p)->Explain();
  return 0;
}

namespace {

std::string HumanRate(double per_second) {
  if (per_second >= 1e6) return absl::StrFormat("%.2fM", per_second / 1e6);
  if (per_second >= 1e3) return absl::StrFormat("%.1fk", per_second / 1e3);
  return absl::StrFormat("%.1f", per_second);
}

}  // namespace

int PipelineRun(const std::string& file, const RunOptions& options, std::ostream& out, std::ostream& err) {
  auto def = pipeline::ParsePipelineSpecFile(file);
  if (!def.ok()) {
    err << "error: " << def.status().message() << "\n";
    return 1;
  }
  if (absl::Status s = ApplyAutoOrder(options.auto_order, *def, err); !s.ok()) {
    err << "error: " << file << ": " << s.message() << "\n";
    return 1;
  }
  pipeline::RuntimeOptions runtime;
  runtime.cpu_budget = options.cpu_budget;
  runtime.autotune = options.autotune;
  auto p = pipeline::Pipeline::Create(*def, runtime);
  if (!p.ok()) {
    err << "error: " << file << ": " << p.status().message() << "\n";
    return 1;
  }
  auto it = (*p)->MakeIterator();
  if (!it.ok()) {
    err << "error: " << file << ": " << it.status().message() << "\n";
    return 1;
  }
  const bool tty = ::isatty(STDERR_FILENO) != 0;
  uint64_t start = pipeline::MonotonicNanos();
  uint64_t last_report = start;
  uint64_t cpu_start = 0;
  {
    timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    cpu_start = static_cast<uint64_t>(ts.tv_sec) * 1000000000ULL + static_cast<uint64_t>(ts.tv_nsec);
  }
  int64_t elements = 0;
  uint64_t bytes = 0;
  std::string first_element;
  absl::Status status;
  while (options.take < 0 || elements < options.take) {
    auto next = (*it)->Next();
    if (!next.ok()) {
      status = next.status();
      break;
    }
    if (!next->has_value()) break;
    if (elements == 0) first_element = (*next)->DebugString();
    ++elements;
    bytes += (*next)->ByteSize();
    uint64_t now = pipeline::MonotonicNanos();
    double interval = tty ? options.progress_interval_seconds : options.progress_interval_seconds * 4;
    if (options.progress && static_cast<double>(now - last_report) / 1e9 >= interval) {
      double secs = static_cast<double>(now - start) / 1e9;
      err << (tty ? "\r" : "") << absl::StrFormat("progress: %d elements  %s elem/s  %.1f MB/s  %.1fs", elements,
                                                  HumanRate(static_cast<double>(elements) / secs),
                                                  static_cast<double>(bytes) / 1e6 / secs, secs)
          << (tty ? "" : "\n") << std::flush;
      last_report = now;
    }
  }
  double secs = static_cast<double>(pipeline::MonotonicNanos() - start) / 1e9;
  if (options.progress && tty) err << "\n";
  auto stats = (*p)->Stats();
  it->reset();  // stop the pipeline's threads before reading the final process CPU time
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  double cpu = static_cast<double>(static_cast<uint64_t>(ts.tv_sec) * 1000000000ULL + static_cast<uint64_t>(ts.tv_nsec) - cpu_start) / 1e9;
  if (!status.ok()) {
    err << "error: after " << elements << " elements: " << status.message() << "\n";
    return 1;
  }
  if (options.json) {
    out << absl::StrFormat(
        "{\"pipeline\": \"%s\", \"fingerprint\": \"%s\", \"elements\": %d, \"bytes\": %d, \"seconds\": %.3f, "
        "\"elements_per_sec\": %.1f, \"mb_per_sec\": %.2f, \"cpu_seconds\": %.3f}\n",
        def->name(), (*p)->fingerprint(), elements, bytes, secs, static_cast<double>(elements) / std::max(secs, 1e-9),
        static_cast<double>(bytes) / 1e6 / std::max(secs, 1e-9), cpu);
    return 0;
  }
  out << "pipeline " << (def->name().empty() ? file : def->name()) << " (fingerprint " << (*p)->fingerprint() << ")\n";
  if (!first_element.empty()) out << "first element: " << first_element << "\n";
  out << absl::StrFormat("%d elements, %.1f MB in %.2f s: %s elements/s, %.1f MB/s; CPU %.2f s (%.0f%% of %d cores)\n",
                         elements, static_cast<double>(bytes) / 1e6, secs,
                         HumanRate(static_cast<double>(elements) / std::max(secs, 1e-9)),
                         static_cast<double>(bytes) / 1e6 / std::max(secs, 1e-9), cpu,
                         100.0 * cpu / std::max(secs, 1e-9) / (*p)->cpu_budget(), (*p)->cpu_budget());
  out << pipeline::FormatStatsTable(stats, secs);
  return 0;
}

namespace {

std::string DefaultOf(const ArgSpec& a) {
  if (a.required) return "required";
  if (!a.default_value) return "optional";
  if (a.type == pipeline::ArgType::kIntOrAuto && a.default_value->int_value() == pipeline::kAuto) return "auto";
  return pipeline::ValueToString(*a.default_value);
}

void PrintArgs(const std::vector<ArgSpec>& args, bool markdown, std::ostream& out) {
  if (args.empty()) {
    out << (markdown ? "_No arguments._\n\n" : "    (no arguments)\n");
    return;
  }
  if (markdown) out << "| argument | type | default | meaning |\n|---|---|---|---|\n";
  for (const auto& a : args) {
    std::string type(pipeline::ArgTypeName(a.type));
    if (!a.choices.empty()) type = absl::StrJoin(a.choices, " \\| ");
    if (markdown) {
      out << "| `" << a.name << "` | " << type << " | " << DefaultOf(a) << " | " << a.doc << " |\n";
    } else {
      out << "    " << std::left << std::setw(26) << a.name << " " << std::setw(22) << type << " " << std::setw(10)
          << DefaultOf(a) << " " << a.doc << "\n";
    }
  }
  if (markdown) out << "\n";
}

}  // namespace

int PipelineOps(bool markdown, std::ostream& out) {
  auto& sources = pipeline::SourceRegistry::Builtin();
  auto& ops = pipeline::OpRegistry::Builtin();
  out << (markdown ? "## Sources\n\n" : "SOURCES\n");
  for (const auto& name : sources.Names()) {
    const auto* d = sources.Find(name);
    out << (markdown ? "### `" + name + "`\n\n" + d->summary + "\n\n" : "  " + name + ": " + d->summary + "\n");
    PrintArgs(d->args, markdown, out);
  }
  out << (markdown ? "## Steps\n\n" : "STEPS\n");
  for (const auto& t : pipeline::AllTransforms()) {
    out << (markdown ? "### `" + t.name + "`\n\n" + t.summary + "\n\n" : "  " + t.name + ": " + t.summary + "\n");
    PrintArgs(t.args, markdown, out);
  }
  out << (markdown ? "## Ops (inside `map`, or as a step of their own)\n\n" : "OPS\n");
  for (const auto& name : ops.Names()) {
    const auto* d = ops.Find(name);
    std::string summary = d->summary + (d->random ? " (random: seeded per element)" : "");
    out << (markdown ? "### `" + name + "`\n\n" + summary + "\n\n" : "  " + name + ": " + summary + "\n");
    PrintArgs(d->args, markdown, out);
  }
  return 0;
}

namespace {

std::string FieldsText(const std::vector<pipeline::FieldRef>& refs) {
  if (refs.empty()) return "-";
  std::vector<std::string> parts;
  for (const auto& r : refs) parts.push_back(r.ToString());
  return absl::StrJoin(parts, ", ");
}

std::string RuleText(const std::string& other, const pipeline::CommuteRule& c) {
  std::string entry = absl::StrCat("`", other, "` ", c.exact ? "exact" : "approx.");
  if (!c.condition.empty()) absl::StrAppend(&entry, " (", c.condition, ")");
  return entry;
}

// The rules `name` declares, and those other ops declare about it.
std::vector<std::string> CommuteTexts(const std::string& name, const pipeline::OrderDeclaration& d) {
  std::vector<std::string> out;
  for (const auto& c : d.commutes) out.push_back(RuleText(c.other, c));
  auto& ops = pipeline::OpRegistry::Builtin();
  for (const auto& other : ops.Names()) {
    const auto* od = ops.Find(other);
    if (od->order == nullptr || other == name) continue;
    for (const auto& c : od->order->commutes) {
      if (c.other == name) out.push_back(RuleText(other, c));
    }
  }
  return out;
}

void PrintDeclaration(const std::string& name, bool random, const pipeline::OrderDeclaration* d, std::ostream& out) {
  if (d == nullptr) {
    out << "| `" << name << "` | barrier (no declaration) | | | | | | | |\n";
    return;
  }
  std::vector<std::string> commutes = CommuteTexts(name, *d);
  out << "| `" << name << "` | " << FieldsText(d->reads) << " | " << FieldsText(d->writes) << " | "
      << pipeline::ShapeEffectName(d->shape) << " | " << d->dtype.ToString() << " | " << pipeline::SizeEffectName(d->size)
      << " | " << pipeline::CostDriverName(d->cost) << " | "
      << (d->may_drop ? "may drop elements" : random ? "random (seeded per element)" : "") << " | "
      << (commutes.empty() ? "-" : absl::StrJoin(commutes, "; ")) << " |\n";
}

}  // namespace

int PipelineOrderProperties(std::ostream& out) {
  out << "| op | reads | writes | shape | dtype | size | cost grows with | | commutes on the same field with |\n"
      << "|---|---|---|---|---|---|---|---|---|\n";
  PrintDeclaration("filter", false, pipeline::FilterOrderDeclaration().get(), out);
  auto& ops = pipeline::OpRegistry::Builtin();
  for (const auto& name : ops.Names()) {
    const auto* d = ops.Find(name);
    PrintDeclaration(name, d->random, d->order.get(), out);
  }
  out << "\nOps touching different fields always commute exactly. Every other step (batch, unbatch, shuffle, "
         "take, skip, shard, repeat, cache, prefetch, interleave, bucket_by_length) is a barrier.\n";
  return 0;
}

}  // namespace sluice::cli
