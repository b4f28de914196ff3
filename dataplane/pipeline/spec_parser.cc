#include "dataplane/pipeline/spec_parser.h"

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>
#include <openssl/evp.h>
#include <yaml-cpp/yaml.h>

#include <cerrno>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "dataplane/pipeline/op.h"
#include "dataplane/pipeline/plugin.h"
#include "dataplane/pipeline/source.h"
#include "dataplane/pipeline/transforms.h"

namespace sluice::pipeline {
namespace {

constexpr int kSpecVersion = 1;

// Context for one parse: the file name, for messages.
struct ParseContext {
  std::string filename;

  SourceLocation Location(const YAML::Node& node, const std::string& path) const {
    SourceLocation loc;
    loc.set_file(filename);
    YAML::Mark m = node.Mark();
    if (m.line >= 0) {
      loc.set_line(m.line + 1);
      loc.set_column(m.column + 1);
    }
    loc.set_path(path);
    return loc;
  }

  absl::Status Error(const YAML::Node& node, const std::string& path, absl::string_view message) const {
    YAML::Mark m = node.Mark();
    if (m.line >= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(filename, ":", m.line + 1, ":", m.column + 1, ": ", path, ": ", message));
    }
    return absl::InvalidArgumentError(absl::StrCat(filename, ": ", path, ": ", message));
  }
};

std::string Where(const SourceLocation& loc, absl::string_view fallback_path) {
  std::string path = loc.path().empty() ? std::string(fallback_path) : loc.path();
  if (loc.file().empty()) return path;
  if (loc.line() > 0) return absl::StrCat(loc.file(), ":", loc.line(), ":", loc.column(), ": ", path);
  return absl::StrCat(loc.file(), ": ", path);
}

bool ParseInt(const std::string& s, int64_t* out) {
  if (s.empty()) return false;
  errno = 0;
  char* end = nullptr;
  long long v = std::strtoll(s.c_str(), &end, 0);
  if (errno != 0 || end != s.c_str() + s.size()) return false;
  *out = v;
  return true;
}

bool ParseFloat(const std::string& s, double* out) {
  if (s.empty()) return false;
  errno = 0;
  char* end = nullptr;
  double v = std::strtod(s.c_str(), &end);
  if (errno != 0 || end != s.c_str() + s.size()) return false;
  *out = v;
  return true;
}

bool IsQuoted(const YAML::Node& node) { return node.Tag() == "!"; }

// Strings in a PipelineDef are protobuf `string`s, which must be UTF-8.
bool IsValidUtf8(absl::string_view s) {
  for (size_t i = 0; i < s.size();) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    size_t extra = c < 0x80 ? 0 : (c & 0xE0) == 0xC0 ? 1 : (c & 0xF0) == 0xE0 ? 2 : (c & 0xF8) == 0xF0 ? 3 : 4;
    if (extra == 4) return false;
    for (size_t k = 1; k <= extra; ++k) {
      if (i + k >= s.size() || (static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return false;
    }
    i += extra + 1;
  }
  return true;
}

// Converts a YAML node to a Value. `hint` (when known) decides how plain scalars are read, so a
// string-typed field may be written without quotes even when it looks like a number.
absl::StatusOr<Value> ConvertNode(const ParseContext& ctx, const YAML::Node& node, const std::string& path,
                                  std::optional<ArgType> hint) {
  Value out;
  switch (node.Type()) {
    case YAML::NodeType::Null:
    case YAML::NodeType::Undefined:
      return ctx.Error(node, path, "value is missing (null)");
    case YAML::NodeType::Scalar: {
      const std::string& text = node.Scalar();
      if (!IsValidUtf8(text)) return ctx.Error(node, path, "not valid UTF-8");
      bool want_string = hint && (*hint == ArgType::kString || *hint == ArgType::kStringList ||
                                  *hint == ArgType::kStringMap || *hint == ArgType::kStringOrList);
      // 'auto' quoted or not: JSON (a Python dict) has only quoted strings.
      if (hint && *hint == ArgType::kIntOrAuto && absl::AsciiStrToLower(text) == "auto") {
        out.set_int_value(kAuto);
        return out;
      }
      if (IsQuoted(node) || want_string) {
        out.set_string_value(text);
        return out;
      }
      int64_t i;
      double d;
      std::string lower = absl::AsciiStrToLower(text);
      if (ParseInt(text, &i)) {
        out.set_int_value(i);
      } else if (ParseFloat(text, &d)) {
        out.set_float_value(d);
      } else if (lower == "true" || lower == "false") {
        out.set_bool_value(lower == "true");
      } else {
        out.set_string_value(text);
      }
      return out;
    }
    case YAML::NodeType::Sequence: {
      std::optional<ArgType> item_hint;
      if (hint == ArgType::kStringList || hint == ArgType::kStringOrList) item_hint = ArgType::kString;
      auto* list = out.mutable_list_value();
      for (size_t i = 0; i < node.size(); ++i) {
        auto item = ConvertNode(ctx, node[i], absl::StrCat(path, "[", i, "]"), item_hint);
        if (!item.ok()) return item.status();
        *list->add_values() = *std::move(item);
      }
      return out;
    }
    case YAML::NodeType::Map: {
      std::optional<ArgType> item_hint;
      if (hint == ArgType::kStringMap) item_hint = ArgType::kString;
      auto* map = out.mutable_map_value();
      for (const auto& kv : node) {
        std::string key = kv.first.as<std::string>();
        if (!IsValidUtf8(key)) return ctx.Error(kv.first, path, "key is not valid UTF-8");
        auto item = ConvertNode(ctx, kv.second, absl::StrCat(path, ".", key), item_hint);
        if (!item.ok()) return item.status();
        auto* e = map->add_entries();
        e->set_name(key);
        *e->mutable_value() = *std::move(item);
      }
      return out;
    }
  }
  return ctx.Error(node, path, "unsupported YAML node");
}

// Reads the arguments map of a source, step or op, checking each key against `specs` as it goes
// so errors point at the offending line.
absl::Status ReadArgs(const ParseContext& ctx, const YAML::Node& node, const std::string& path,
                      const std::vector<ArgSpec>& specs, ValueMap& args, const std::vector<std::string>& reserved = {}) {
  if (!node || node.IsNull()) return absl::OkStatus();
  if (!node.IsMap()) {
    return ctx.Error(node, path, "expected a map of arguments (key: value)");
  }
  for (const auto& kv : node) {
    std::string key = kv.first.as<std::string>();
    if (std::find(reserved.begin(), reserved.end(), key) != reserved.end()) continue;
    auto it = std::find_if(specs.begin(), specs.end(), [&](const ArgSpec& s) { return s.name == key; });
    if (it == specs.end()) {
      std::vector<std::string> names;
      for (const auto& s : specs) names.push_back(s.name);
      for (const auto& r : reserved) names.push_back(r);
      return ctx.Error(kv.first, absl::StrCat(path, ".", key),
                       absl::StrCat("unknown field '", key, "'; known fields: ",
                                    names.empty() ? "(none)" : absl::StrJoin(names, ", ")));
    }
    std::string arg_path = absl::StrCat(path, ".", key);
    auto value = ConvertNode(ctx, kv.second, arg_path, it->type);
    if (!value.ok()) return value.status();
    ArgSpec float_tolerant = *it;
    if (auto s = CheckValue(*it, *value, path); !s.ok()) {
      return ctx.Error(kv.second, arg_path, s.message().substr(s.message().find(": ") + 2));
    }
    auto* e = args.add_entries();
    e->set_name(key);
    *e->mutable_value() = *std::move(value);
  }
  return absl::OkStatus();
}

// Splits a single-key map {kind: args} (or a bare scalar `kind`) into its parts.
absl::Status KindAndArgs(const ParseContext& ctx, const YAML::Node& node, const std::string& path,
                         std::string* kind, YAML::Node* args) {
  if (node.IsScalar()) {
    *kind = node.Scalar();
    *args = YAML::Node();
    return absl::OkStatus();
  }
  if (!node.IsMap() || node.size() != 1) {
    return ctx.Error(node, path, "expected a single-key map such as `batch: {size: 32}`");
  }
  auto it = node.begin();
  *kind = it->first.as<std::string>();
  *args = it->second;
  return absl::OkStatus();
}

std::string KnownStepsMessage() {
  std::vector<std::string> names;
  for (const auto& t : AllTransforms()) names.push_back(t.name);
  return absl::StrCat("known steps: ", absl::StrJoin(names, ", "),
                      "; or any op as a one-op map (known ops: ", absl::StrJoin(OpRegistry::Builtin().Names(), ", "), ")");
}

// The keys every op (keep_position, seed_slot) and step (keep_position) takes besides its own
// arguments: what AutoOrder may do with it (docs/autoorder.md).
constexpr char kKeepPosition[] = "keep_position";
constexpr char kSeedSlot[] = "seed_slot";

absl::Status ReadKeepPosition(const ParseContext& ctx, const YAML::Node& args, const std::string& path, bool* keep) {
  if (!args || !args.IsMap() || !args[kKeepPosition]) return absl::OkStatus();
  const YAML::Node v = args[kKeepPosition];
  std::string lower = v.IsScalar() ? absl::AsciiStrToLower(v.Scalar()) : "";
  if (lower != "true" && lower != "false") {
    return ctx.Error(v, absl::StrCat(path, ".", kKeepPosition), "expected true or false");
  }
  *keep = lower == "true";
  return absl::OkStatus();
}

absl::Status ReadSeedSlot(const ParseContext& ctx, const YAML::Node& args, const std::string& path, OpDef& op) {
  if (!args || !args.IsMap() || !args[kSeedSlot]) return absl::OkStatus();
  const YAML::Node v = args[kSeedSlot];
  int64_t stage = 0, index = 0;
  if (!v.IsSequence() || v.size() != 2 || !v[0].IsScalar() || !v[1].IsScalar() || !ParseInt(v[0].Scalar(), &stage) ||
      !ParseInt(v[1].Scalar(), &index) || stage < 1 || index < 0 || stage > (1 << 20) || index > (1 << 20)) {
    return ctx.Error(v, absl::StrCat(path, ".", kSeedSlot),
                     "expected [stage, index]: the map stage (>= 1) and op index (>= 0) whose seeds the op draws");
  }
  op.mutable_seed_slot()->set_stage(static_cast<int32_t>(stage));
  op.mutable_seed_slot()->set_index(static_cast<int32_t>(index));
  return absl::OkStatus();
}

absl::Status ParseOp(const ParseContext& ctx, const YAML::Node& node, const std::string& path, OpDef& op) {
  std::string kind;
  YAML::Node args;
  if (auto s = KindAndArgs(ctx, node, path, &kind, &args); !s.ok()) return s;
  const OpDescriptor* d = OpRegistry::Builtin().Find(kind);
  if (d == nullptr) {
    return ctx.Error(node, path, OpRegistry::Builtin().UnknownOpError(kind, "op").message().substr(4));
  }
  op.set_op(kind);
  const std::string op_path = absl::StrCat(path, ".", kind);
  *op.mutable_location() = ctx.Location(node, op_path);
  bool keep = false;
  if (auto s = ReadKeepPosition(ctx, args, op_path, &keep); !s.ok()) return s;
  op.set_keep_position(keep);
  if (auto s = ReadSeedSlot(ctx, args, op_path, op); !s.ok()) return s;
  return ReadArgs(ctx, args, op_path, d->args, *op.mutable_args(), {kKeepPosition, kSeedSlot});
}

absl::Status ParseStep(const ParseContext& ctx, const YAML::Node& node, const std::string& path, StepDef& step) {
  std::string kind;
  YAML::Node args;
  if (auto s = KindAndArgs(ctx, node, path, &kind, &args); !s.ok()) return s;
  std::string step_path = absl::StrCat(path, ".", kind);
  const TransformDescriptor* t = FindTransform(kind);
  if (t == nullptr) {
    if (OpRegistry::Builtin().Find(kind) != nullptr) {
      // An op used directly as a step: a map with that one op.
      step.set_kind("map");
      *step.mutable_location() = ctx.Location(node, step_path);
      return ParseOp(ctx, node, path, *step.add_ops());
    }
    return ctx.Error(node, path, absl::StrCat("unknown step '", kind, "'; ", KnownStepsMessage()));
  }
  step.set_kind(kind);
  *step.mutable_location() = ctx.Location(node, step_path);
  if (args && args.IsScalar() && !t->args.empty()) {
    // Shorthand: `take: 10`, `batch: 32`, `shuffle: 1000`, `prefetch: auto`.
    auto value = ConvertNode(ctx, args, absl::StrCat(step_path, ".", t->args[0].name), t->args[0].type);
    if (!value.ok()) return value.status();
    if (auto s = CheckValue(t->args[0], *value, step_path); !s.ok()) {
      return ctx.Error(args, step_path, s.message().substr(s.message().find(": ") + 2));
    }
    SetArg(*step.mutable_args(), t->args[0].name, *std::move(value));
    return absl::OkStatus();
  }
  std::vector<std::string> reserved = {kKeepPosition};
  if (kind == "map") reserved.push_back("ops");
  bool keep = false;
  if (auto s = ReadKeepPosition(ctx, args, step_path, &keep); !s.ok()) return s;
  step.set_keep_position(keep);
  if (auto s = ReadArgs(ctx, args, step_path, t->args, *step.mutable_args(), reserved); !s.ok()) return s;
  if (kind == "map") {
    YAML::Node ops = args ? args["ops"] : YAML::Node();
    if (!ops || !ops.IsSequence() || ops.size() == 0) {
      return ctx.Error(args ? args : node, step_path, "a map step needs `ops:`, a non-empty list of ops");
    }
    for (size_t i = 0; i < ops.size(); ++i) {
      if (auto s = ParseOp(ctx, ops[i], absl::StrCat(step_path, ".ops[", i, "]"), *step.add_ops()); !s.ok()) return s;
    }
  }
  return absl::OkStatus();
}

std::vector<ArgSpec> OptionSpecs() {
  return {
      WithDefault("seed", int64_t{0}, "base seed of random ops and shuffles"),
      AutoOrInt("cpu_budget", kAuto, "threads the pipeline may keep busy ('auto': all cores)"),
      Bounded(WithDefault("max_element_bytes", int64_t{256} << 20, "elements larger than this are rejected"), 1, std::nullopt),
      Bounded(WithDefault("ram_budget_bytes", int64_t{1} << 30, "bound on buffered bytes (prefetch, shuffle)"), 1, std::nullopt),
      WithDefault("autotune", true, "tune map parallelism and prefetch depth while running"),
  };
}

absl::StatusOr<PipelineDef> ParseDocument(const ParseContext& ctx, const YAML::Node& root) {
  if (!root || root.IsNull()) return absl::InvalidArgumentError(absl::StrCat(ctx.filename, ": the spec is empty"));
  if (!root.IsMap()) return ctx.Error(root, "(top level)", "expected a map with `source:` and `steps:`");
  PipelineDef def;
  def.set_version(kSpecVersion);
  static const std::vector<std::string> kTopLevel = {"version", "name", "source", "steps", "options", "plugins"};
  for (const auto& kv : root) {
    std::string key = kv.first.as<std::string>();
    if (std::find(kTopLevel.begin(), kTopLevel.end(), key) == kTopLevel.end()) {
      return ctx.Error(kv.first, key, absl::StrCat("unknown field '", key, "'; known fields: ", absl::StrJoin(kTopLevel, ", ")));
    }
  }
  if (YAML::Node v = root["version"]; v) {
    int64_t version = 0;
    if (!v.IsScalar() || !ParseInt(v.Scalar(), &version) || version != kSpecVersion) {
      return ctx.Error(v, "version", absl::StrCat("unsupported spec version '", v.IsScalar() ? v.Scalar() : "?",
                                                  "'; this Sluice reads version ", kSpecVersion));
    }
  }
  if (YAML::Node v = root["name"]; v) {
    if (!v.IsScalar()) return ctx.Error(v, "name", "expected a string");
    if (!IsValidUtf8(v.Scalar())) return ctx.Error(v, "name", "not valid UTF-8");
    def.set_name(v.Scalar());
  }
  if (YAML::Node plugins = root["plugins"]; plugins) {
    if (!plugins.IsSequence()) return ctx.Error(plugins, "plugins", "expected a list of shared-library paths");
    for (size_t i = 0; i < plugins.size(); ++i) {
      YAML::Node p = plugins[i];
      std::string path;
      if (p.IsScalar()) {
        path = p.Scalar();
      } else if (p.IsMap() && p["path"] && p["path"].IsScalar() && p.size() == 1) {
        path = p["path"].Scalar();
      } else {
        return ctx.Error(p, absl::StrCat("plugins[", i, "]"), "expected a path or {path: ...}");
      }
      if (auto s = LoadPlugin(path); !s.ok()) {
        return ctx.Error(p, absl::StrCat("plugins[", i, "]"), s.message());
      }
      def.add_plugins()->set_path(path);
    }
  }
  if (YAML::Node opts = root["options"]; opts) {
    ValueMap args;
    if (auto s = ReadArgs(ctx, opts, "options", OptionSpecs(), args); !s.ok()) return s;
    Args a(args);
    auto* o = def.mutable_options();
    o->set_seed(a.Int("seed", 0));
    if (a.Has("cpu_budget")) o->set_cpu_budget(static_cast<int32_t>(std::max<int64_t>(0, a.Int("cpu_budget"))));
    o->set_max_element_bytes(a.Int("max_element_bytes", 0));
    o->set_ram_budget_bytes(a.Int("ram_budget_bytes", 0));
    o->set_autotune(a.Bool("autotune", true));
    if (!a.Has("autotune")) o->set_autotune(true);
  } else {
    def.mutable_options()->set_autotune(true);
  }
  YAML::Node source = root["source"];
  if (!source) return ctx.Error(root, "source", "missing `source:` (e.g. `source: {tfrecord: {files: data/*.tfrecord}}`)");
  {
    std::string kind;
    YAML::Node args;
    if (auto s = KindAndArgs(ctx, source, "source", &kind, &args); !s.ok()) return s;
    const SourceDescriptor* d = SourceRegistry::Builtin().Find(kind);
    if (d == nullptr) {
      return ctx.Error(source, "source", absl::StrCat("unknown source '", kind, "'; known sources: ",
                                                      absl::StrJoin(SourceRegistry::Builtin().Names(), ", ")));
    }
    def.mutable_source()->set_kind(kind);
    *def.mutable_source()->mutable_location() = ctx.Location(source, absl::StrCat("source.", kind));
    if (auto s = ReadArgs(ctx, args, absl::StrCat("source.", kind), d->args, *def.mutable_source()->mutable_args()); !s.ok()) {
      return s;
    }
  }
  if (YAML::Node steps = root["steps"]; steps && !steps.IsNull()) {
    if (!steps.IsSequence()) return ctx.Error(steps, "steps", "expected a list of steps");
    for (size_t i = 0; i < steps.size(); ++i) {
      if (auto s = ParseStep(ctx, steps[i], absl::StrCat("steps[", i, "]"), *def.add_steps()); !s.ok()) return s;
    }
  }
  if (auto s = Canonicalize(def); !s.ok()) return s;
  return def;
}

absl::Status ValidateOp(OpDef& op, absl::string_view fallback_path) {
  std::string where = Where(op.location(), fallback_path);
  const OpDescriptor* d = OpRegistry::Builtin().Find(op.op());
  if (d == nullptr) return OpRegistry::Builtin().UnknownOpError(op.op(), where);
  if (op.has_seed_slot() && (op.seed_slot().stage() < 1 || op.seed_slot().index() < 0)) {
    return absl::InvalidArgumentError(absl::StrCat(where, ".seed_slot: [", op.seed_slot().stage(), ", ",
                                                   op.seed_slot().index(),
                                                   "] is not a slot: the stage must be >= 1 and the index >= 0"));
  }
  return ValidateArgs(d->args, *op.mutable_args(), where);
}

}  // namespace

absl::Status Canonicalize(PipelineDef& def) {
  if (def.version() == 0) def.set_version(kSpecVersion);
  if (def.version() != kSpecVersion) {
    return absl::InvalidArgumentError(absl::StrCat("version: unsupported spec version ", def.version()));
  }
  for (const auto& p : def.plugins()) {
    if (auto s = LoadPlugin(p.path()); !s.ok()) return s;
  }
  if (def.source().kind().empty()) return absl::InvalidArgumentError("source: missing source");
  const SourceDescriptor* sd = SourceRegistry::Builtin().Find(def.source().kind());
  if (sd == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("source: unknown source '", def.source().kind(),
                                                   "'; known sources: ", absl::StrJoin(SourceRegistry::Builtin().Names(), ", ")));
  }
  if (auto s = ValidateArgs(sd->args, *def.mutable_source()->mutable_args(),
                            Where(def.source().location(), absl::StrCat("source.", def.source().kind())));
      !s.ok()) {
    return s;
  }
  for (int i = 0; i < def.steps_size(); ++i) {
    StepDef& step = *def.mutable_steps(i);
    std::string fallback = absl::StrCat("steps[", i, "].", step.kind());
    std::string where = Where(step.location(), fallback);
    const TransformDescriptor* t = FindTransform(step.kind());
    if (t == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": unknown step '", step.kind(), "'; ", KnownStepsMessage()));
    }
    if (auto s = ValidateArgs(t->args, *step.mutable_args(), where); !s.ok()) return s;
    if (step.kind() == "map") {
      if (step.ops_size() == 0) return absl::InvalidArgumentError(absl::StrCat(where, ": a map step needs at least one op"));
      for (int j = 0; j < step.ops_size(); ++j) {
        if (auto s = ValidateOp(*step.mutable_ops(j), absl::StrCat(fallback, ".ops[", j, "]")); !s.ok()) return s;
      }
    } else if (step.ops_size() != 0) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": only map steps take ops"));
    }
    if (step.kind() == "interleave" && i != 0) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": interleave reads source splits, so it must be the first step"));
    }
    if (step.kind() == "shard") {
      Args a(step.args());
      if (a.Int("index") >= a.Int("num_shards")) {
        return absl::InvalidArgumentError(absl::StrCat(where, ".index: ", a.Int("index"), " must be below num_shards (",
                                                       a.Int("num_shards"), ")"));
      }
    }
    if (step.kind() == "bucket_by_length") {
      Args a(step.args());
      auto b = a.IntList("boundaries");
      auto sizes = a.IntList("batch_sizes");
      if (sizes.size() != b.size() + 1) {
        return absl::InvalidArgumentError(absl::StrCat(where, ".batch_sizes: needs ", b.size() + 1,
                                                       " entries (one more than boundaries), got ", sizes.size()));
      }
      for (size_t k = 1; k < b.size(); ++k) {
        if (b[k] <= b[k - 1]) return absl::InvalidArgumentError(absl::StrCat(where, ".boundaries: must be strictly ascending"));
      }
      for (int64_t s : sizes) {
        if (s < 1) return absl::InvalidArgumentError(absl::StrCat(where, ".batch_sizes: every batch size must be >= 1"));
      }
    }
    if (step.kind() == "filter") {
      Args a(step.args());
      bool any = false;
      for (const char* k : {"lt", "le", "gt", "ge", "eq", "ne", "min_size", "max_size"}) any |= a.Has(k);
      if (!any) {
        return absl::InvalidArgumentError(absl::StrCat(where, ": give at least one condition (lt, le, gt, ge, eq, ne, min_size, max_size)"));
      }
    }
  }
  auto* o = def.mutable_options();
  if (o->max_element_bytes() == 0) o->set_max_element_bytes(int64_t{256} << 20);
  if (o->ram_budget_bytes() == 0) o->set_ram_budget_bytes(int64_t{1} << 30);
  return absl::OkStatus();
}

absl::StatusOr<PipelineDef> ParsePipelineSpec(absl::string_view text, absl::string_view filename) {
  ParseContext ctx{std::string(filename)};
  YAML::Node root;
  try {
    root = YAML::Load(std::string(text));
  } catch (const YAML::Exception& e) {
    if (e.mark.line >= 0) {
      return absl::InvalidArgumentError(absl::StrCat(filename, ":", e.mark.line + 1, ":", e.mark.column + 1,
                                                     ": malformed YAML: ", e.msg));
    }
    return absl::InvalidArgumentError(absl::StrCat(filename, ": malformed YAML: ", e.msg));
  }
  try {
    return ParseDocument(ctx, root);
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(filename, ":", e.mark.line + 1, ":", e.mark.column + 1,
                                                   ": invalid spec: ", e.msg));
  }
}

absl::StatusOr<PipelineDef> ParsePipelineSpecFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot open the pipeline spec (does the file exist?)"));
  std::stringstream ss;
  ss << in.rdbuf();
  return ParsePipelineSpec(ss.str(), path);
}

std::string Fingerprint(const PipelineDef& def) {
  PipelineDef canonical = def;
  canonical.clear_name();
  canonical.mutable_source()->clear_location();
  for (auto& step : *canonical.mutable_steps()) {
    step.clear_location();
    for (auto& op : *step.mutable_ops()) op.clear_location();
  }
  SortArgs(*canonical.mutable_source()->mutable_args());
  for (auto& step : *canonical.mutable_steps()) {
    SortArgs(*step.mutable_args());
    for (auto& op : *step.mutable_ops()) SortArgs(*op.mutable_args());
  }
  std::string bytes;
  {
    google::protobuf::io::StringOutputStream stream(&bytes);
    google::protobuf::io::CodedOutputStream coded(&stream);
    coded.SetSerializationDeterministic(true);
    canonical.SerializeToCodedStream(&coded);
  }
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_Digest(bytes.data(), bytes.size(), digest, &len, EVP_sha256(), nullptr);
  static const char* kHex = "0123456789abcdef";
  std::string out;
  for (unsigned int i = 0; i < 16 && i < len; ++i) {
    out.push_back(kHex[digest[i] >> 4]);
    out.push_back(kHex[digest[i] & 15]);
  }
  return out;
}

namespace {

void EmitValue(YAML::Emitter& out, const Value& v) {
  switch (v.kind_case()) {
    case Value::kIntValue: out << v.int_value(); break;
    case Value::kFloatValue: out << v.float_value(); break;
    case Value::kStringValue: out << YAML::DoubleQuoted << v.string_value(); break;
    case Value::kBoolValue: out << v.bool_value(); break;
    case Value::kListValue:
      out << YAML::Flow << YAML::BeginSeq;
      for (const auto& item : v.list_value().values()) EmitValue(out, item);
      out << YAML::EndSeq;
      break;
    case Value::kMapValue:
      out << YAML::BeginMap;
      for (const auto& e : v.map_value().entries()) {
        out << YAML::Key << e.name() << YAML::Value;
        EmitValue(out, e.value());
      }
      out << YAML::EndMap;
      break;
    case Value::KIND_NOT_SET: out << YAML::Null; break;
  }
}

void EmitOrderKeys(YAML::Emitter& out, bool keep_position, const SeedSlot* slot) {
  if (keep_position) out << YAML::Key << kKeepPosition << YAML::Value << true;
  if (slot != nullptr) {
    out << YAML::Key << kSeedSlot << YAML::Value << YAML::Flow << YAML::BeginSeq << slot->stage() << slot->index()
        << YAML::EndSeq;
  }
}

void EmitArgs(YAML::Emitter& out, const ValueMap& args, bool keep_position = false, const SeedSlot* slot = nullptr) {
  out << YAML::BeginMap;
  EmitOrderKeys(out, keep_position, slot);
  for (const auto& e : args.entries()) {
    out << YAML::Key << e.name() << YAML::Value;
    if (e.value().int_value() == kAuto && e.value().has_int_value() &&
        (e.name() == "parallelism" || e.name() == "buffer" || e.name() == "cycle_length")) {
      out << "auto";
    } else {
      EmitValue(out, e.value());
    }
  }
  out << YAML::EndMap;
}

}  // namespace

std::string ToYaml(const PipelineDef& def) {
  YAML::Emitter out;
  out << YAML::BeginMap;
  out << YAML::Key << "version" << YAML::Value << def.version();
  if (!def.name().empty()) out << YAML::Key << "name" << YAML::Value << def.name();
  out << YAML::Key << "options" << YAML::Value << YAML::BeginMap;
  out << YAML::Key << "seed" << YAML::Value << def.options().seed();
  out << YAML::Key << "cpu_budget" << YAML::Value;
  if (def.options().cpu_budget() == 0) out << "auto"; else out << def.options().cpu_budget();
  out << YAML::Key << "max_element_bytes" << YAML::Value << def.options().max_element_bytes();
  out << YAML::Key << "ram_budget_bytes" << YAML::Value << def.options().ram_budget_bytes();
  out << YAML::Key << "autotune" << YAML::Value << def.options().autotune();
  out << YAML::EndMap;
  if (def.plugins_size() > 0) {
    out << YAML::Key << "plugins" << YAML::Value << YAML::BeginSeq;
    for (const auto& p : def.plugins()) out << p.path();
    out << YAML::EndSeq;
  }
  out << YAML::Key << "source" << YAML::Value << YAML::BeginMap << YAML::Key << def.source().kind() << YAML::Value;
  EmitArgs(out, def.source().args());
  out << YAML::EndMap;
  out << YAML::Key << "steps" << YAML::Value << YAML::BeginSeq;
  for (const auto& step : def.steps()) {
    out << YAML::BeginMap << YAML::Key << step.kind() << YAML::Value;
    if (step.kind() == "map") {
      out << YAML::BeginMap;
      EmitOrderKeys(out, step.keep_position(), nullptr);
      for (const auto& e : step.args().entries()) {
        out << YAML::Key << e.name() << YAML::Value;
        if (e.name() == "parallelism" && e.value().int_value() == kAuto) out << "auto"; else EmitValue(out, e.value());
      }
      out << YAML::Key << "ops" << YAML::Value << YAML::BeginSeq;
      for (const auto& op : step.ops()) {
        out << YAML::BeginMap << YAML::Key << op.op() << YAML::Value;
        EmitArgs(out, op.args(), op.keep_position(), op.has_seed_slot() ? &op.seed_slot() : nullptr);
        out << YAML::EndMap;
      }
      out << YAML::EndSeq << YAML::EndMap;
    } else {
      EmitArgs(out, step.args(), step.keep_position());
    }
    out << YAML::EndMap;
  }
  out << YAML::EndSeq;
  out << YAML::EndMap;
  return std::string(out.c_str()) + "\n";
}

}  // namespace sluice::pipeline
