#include "dataplane/pipeline/op_properties.h"

#include <cmath>
#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace sluice::pipeline {
namespace {

const ValueMap& EmptyMap() {
  static const ValueMap* empty = new ValueMap();
  return *empty;
}

// The map the declaration's argument names refer to: the op's arguments, or a plugin op's config.
const ValueMap& ArgumentMap(const OrderDeclaration& d, const ValueMap& args) {
  if (!d.args_in_config) return args;
  const Value* config = FindArg(args, "config");
  return config != nullptr && config->has_map_value() ? config->map_value() : EmptyMap();
}

void AddFields(const FieldRef& ref, const ValueMap& args, std::set<std::string>* out, bool* all) {
  const Value* v = ref.kind == FieldRef::Kind::kName || ref.kind == FieldRef::Kind::kAll ? nullptr : FindArg(args, ref.name);
  switch (ref.kind) {
    case FieldRef::Kind::kName: out->insert(ref.name); return;
    case FieldRef::Kind::kAll: *all = true; return;
    case FieldRef::Kind::kArg:
      if (v != nullptr && v->has_string_value()) {
        out->insert(v->string_value());
      } else if (!ref.fallback_arg.empty()) {
        const Value* f = FindArg(args, ref.fallback_arg);
        if (f != nullptr && f->has_string_value()) out->insert(f->string_value());
        else *all = true;  // cannot tell: assume the worst
      } else if (!ref.fallback.empty()) {
        out->insert(ref.fallback);
      } else {
        *all = true;
      }
      return;
    case FieldRef::Kind::kArgList:
      if (v != nullptr && v->has_list_value()) {
        for (const auto& item : v->list_value().values()) {
          if (item.has_string_value()) out->insert(item.string_value()); else *all = true;
        }
      } else if (v != nullptr && v->has_string_value()) {
        out->insert(v->string_value());
      }
      return;
    case FieldRef::Kind::kArgMapKeys:
    case FieldRef::Kind::kArgMapValues:
      if (v != nullptr && v->has_map_value()) {
        for (const auto& e : v->map_value().entries()) {
          if (ref.kind == FieldRef::Kind::kArgMapKeys) out->insert(e.name());
          else if (e.value().has_string_value()) out->insert(e.value().string_value());
          else *all = true;
        }
      }
      return;
  }
}

bool Intersects(const std::set<std::string>& a, bool a_all, const std::set<std::string>& b, bool b_all) {
  if ((a_all && (b_all || !b.empty())) || (b_all && !a.empty())) return true;
  for (const auto& x : a) {
    if (b.count(x) != 0) return true;
  }
  return false;
}

// The rule `self` declares for `other`, evaluated for the two instances; nullopt when none applies.
// `declared` is set when a rule for `other` exists at all.
std::optional<Commutation> RuleFor(const OrderProperties& self, const OrderProperties& other, bool* declared) {
  for (const CommuteRule& rule : self.declaration->commutes) {
    if (rule.other != other.op) continue;
    *declared = true;
    if (!rule.check) return Commutation{rule.exact, rule.exact ? 0.0 : rule.tolerance};
    return rule.check(Args(*self.args), Args(*other.args));
  }
  return std::nullopt;
}

}  // namespace

std::string FieldRef::ToString() const {
  switch (kind) {
    case Kind::kName: return absl::StrCat("`", name, "`");
    case Kind::kAll: return "every field";
    case Kind::kArg:
      if (!fallback_arg.empty()) return absl::StrCat("arg `", name, "` (default: arg `", fallback_arg, "`)");
      if (!fallback.empty()) return absl::StrCat("arg `", name, "` (", fallback, ")");
      return absl::StrCat("arg `", name, "`");
    case Kind::kArgList: return absl::StrCat("fields in `", name, "`");
    case Kind::kArgMapKeys: return absl::StrCat("keys of `", name, "`");
    case Kind::kArgMapValues: return absl::StrCat("values of `", name, "`");
  }
  return "?";
}

std::string DTypeEffect::ToString() const {
  switch (kind) {
    case Kind::kSame: return "same";
    case Kind::kFixed: return std::string(DTypeName(fixed));
    case Kind::kArg: return absl::StrCat("arg `", arg, "` (", arg_default, ")");
  }
  return "?";
}

absl::string_view ShapeEffectName(ShapeEffect e) {
  switch (e) {
    case ShapeEffect::kSame: return "same";
    case ShapeEffect::kFixed: return "fixed by args";
    case ShapeEffect::kScaled: return "scaled";
    case ShapeEffect::kData: return "data-dependent";
  }
  return "?";
}

absl::string_view SizeEffectName(SizeEffect e) {
  switch (e) {
    case SizeEffect::kSame: return "same";
    case SizeEffect::kSmaller: return "smaller";
    case SizeEffect::kLarger: return "larger";
    case SizeEffect::kDepends: return "depends";
  }
  return "?";
}

absl::string_view CostDriverName(CostDriver c) {
  switch (c) {
    case CostDriver::kInput: return "input bytes";
    case CostDriver::kOutput: return "output bytes";
    case CostDriver::kConstant: return "constant";
  }
  return "?";
}

absl::StatusOr<OrderProperties> ResolveOrderProperties(const std::string& op,
                                                       std::shared_ptr<const OrderDeclaration> declaration,
                                                       bool random, const ValueMap& args) {
  OrderProperties p;
  p.op = op;
  p.random = random;
  p.args = std::make_shared<const ValueMap>(args);
  p.declaration = std::move(declaration);
  if (p.declaration == nullptr) return p;
  const OrderDeclaration& d = *p.declaration;
  const ValueMap& a = ArgumentMap(d, *p.args);
  for (const FieldRef& r : d.reads) AddFields(r, a, &p.reads, &p.reads_all);
  for (const FieldRef& w : d.writes) AddFields(w, a, &p.writes, &p.writes_all);
  switch (d.dtype.kind) {
    case DTypeEffect::Kind::kSame: break;
    case DTypeEffect::Kind::kFixed: p.output_dtype = d.dtype.fixed; break;
    case DTypeEffect::Kind::kArg: {
      const Value* v = FindArg(a, d.dtype.arg);
      std::string name = v != nullptr && v->has_string_value() ? v->string_value() : d.dtype.arg_default;
      auto dtype = ParseDType(name);
      if (!dtype.ok()) return absl::InvalidArgumentError(absl::StrCat(op, ".", d.dtype.arg, ": ", dtype.status().message()));
      p.output_dtype = *dtype;
      break;
    }
  }
  return p;
}

std::optional<Commutation> Commute(const OrderProperties& first, const OrderProperties& second) {
  if (first.barrier() || second.barrier()) return std::nullopt;
  const bool conflict = Intersects(first.writes, first.writes_all, second.reads, second.reads_all) ||
                        Intersects(first.writes, first.writes_all, second.writes, second.writes_all) ||
                        Intersects(second.writes, second.writes_all, first.reads, first.reads_all);
  if (!conflict) return Commutation{true, 0};
  bool declared_a = false, declared_b = false;
  std::optional<Commutation> a = RuleFor(first, second, &declared_a);
  std::optional<Commutation> b = RuleFor(second, first, &declared_b);
  if (!a && !b) return std::nullopt;
  // A rule that exists but does not hold for these arguments vetoes.
  if ((declared_a && !a) || (declared_b && !b)) return std::nullopt;
  if (a && b) return Commutation{a->exact && b->exact, std::max(a->tolerance, b->tolerance)};
  return a ? a : b;
}

std::shared_ptr<OrderDeclaration> OneFieldDeclaration(const std::string& arg, const std::string& fallback,
                                                      ShapeEffect shape, DTypeEffect dtype, SizeEffect size,
                                                      CostDriver cost) {
  auto d = std::make_shared<OrderDeclaration>();
  d->reads = {FieldRef::Arg(arg, fallback)};
  d->writes = {FieldRef::Arg(arg, fallback)};
  d->shape = shape;
  d->dtype = std::move(dtype);
  d->size = size;
  d->cost = cost;
  return d;
}

double ArgFloat(const Args& args, absl::string_view name, double fallback) {
  const Value* v = args.Raw(name);
  if (v == nullptr) return fallback;
  if (v->has_float_value()) return v->float_value();
  if (v->has_int_value()) return static_cast<double>(v->int_value());
  return fallback;
}

std::string ArgString(const Args& args, absl::string_view name, const std::string& fallback) {
  const Value* v = args.Raw(name);
  return v != nullptr && v->has_string_value() ? v->string_value() : fallback;
}

std::vector<double> ArgFloats(const Args& args, absl::string_view name, std::vector<double> fallback) {
  const Value* v = args.Raw(name);
  if (v == nullptr || !v->has_list_value()) return fallback;
  std::vector<double> out;
  for (const auto& item : v->list_value().values()) {
    out.push_back(item.has_float_value() ? item.float_value() : static_cast<double>(item.int_value()));
  }
  return out;
}

std::shared_ptr<const OrderDeclaration> FilterOrderDeclaration() {
  static const auto* declaration = new std::shared_ptr<const OrderDeclaration>([] {
    auto d = std::make_shared<OrderDeclaration>();
    d->reads = {FieldRef::Arg("field")};
    d->shape = ShapeEffect::kSame;
    d->size = SizeEffect::kSame;
    d->cost = CostDriver::kConstant;
    d->may_drop = true;
    d->note = "drops elements: moves up past every op that does not write its field";
    return d;
  }());
  return *declaration;
}

// ------------------------------------------------------------------------------------------------
// Plugin declarations (JSON), see sluice_plugin.h and docs/autoorder.md#plugins.

namespace {

using nlohmann::json;

class PluginDeclarationParser {
 public:
  PluginDeclarationParser(absl::string_view plugin, absl::string_view op) : plugin_(plugin), op_(op) {}

  absl::Status Error(absl::string_view problem) const {
    return absl::InvalidArgumentError(absl::StrCat("plugin '", plugin_, "' op '", op_, "': order_properties_json: ",
                                                   problem, " (see docs/autoorder.md#plugins)"));
  }

  absl::StatusOr<OrderDeclaration> Parse(absl::string_view text) {
    json root;
    try {
      root = json::parse(text.begin(), text.end());
    } catch (const json::exception& e) {
      return Error(absl::StrCat("not valid JSON: ", e.what()));
    }
    if (!root.is_object()) return Error("expected a JSON object");
    static const std::set<std::string> kKeys = {"version", "reads", "writes", "shape", "dtype", "size", "cost", "commutes"};
    for (const auto& [key, value] : root.items()) {
      if (kKeys.count(key) == 0) {
        return Error(absl::StrCat("unknown key '", key, "'; known keys: ", absl::StrJoin(kKeys, ", ")));
      }
    }
    if (!root.contains("version") || !root["version"].is_number_integer()) return Error("'version' (an integer) is missing");
    if (root["version"].get<int64_t>() != kPluginOrderPropertiesVersion) {
      return Error(absl::StrCat("unsupported version ", root["version"].get<int64_t>(), "; this Sluice reads version ",
                                kPluginOrderPropertiesVersion));
    }
    OrderDeclaration d;
    d.args_in_config = true;
    if (auto s = Fields(root, "reads", &d.reads); !s.ok()) return s;
    if (auto s = Fields(root, "writes", &d.writes); !s.ok()) return s;
    if (d.reads.empty() && d.writes.empty()) return Error("declares neither 'reads' nor 'writes'");
    std::string shape = "same", size = "same", cost = "input", dtype = "same";
    if (auto s = Choice(root, "shape", {"same", "fixed", "scaled", "data"}, &shape); !s.ok()) return s;
    if (auto s = Choice(root, "size", {"same", "smaller", "larger", "depends"}, &size); !s.ok()) return s;
    if (auto s = Choice(root, "cost", {"input", "output", "constant"}, &cost); !s.ok()) return s;
    if (root.contains("dtype")) {
      if (!root["dtype"].is_string()) return Error("'dtype' must be \"same\" or a dtype name");
      dtype = root["dtype"].get<std::string>();
    }
    d.shape = shape == "same" ? ShapeEffect::kSame : shape == "fixed" ? ShapeEffect::kFixed
              : shape == "scaled" ? ShapeEffect::kScaled : ShapeEffect::kData;
    d.size = size == "same" ? SizeEffect::kSame : size == "smaller" ? SizeEffect::kSmaller
             : size == "larger" ? SizeEffect::kLarger : SizeEffect::kDepends;
    d.cost = cost == "input" ? CostDriver::kInput : cost == "output" ? CostDriver::kOutput : CostDriver::kConstant;
    if (dtype != "same") {
      auto parsed = ParseDType(dtype);
      if (!parsed.ok()) return Error(absl::StrCat("'dtype': ", parsed.status().message()));
      d.dtype = DTypeEffect::Fixed(*parsed);
    }
    // Contradictions.
    if (d.writes.empty() && (d.shape != ShapeEffect::kSame || d.dtype.kind != DTypeEffect::Kind::kSame ||
                             d.size != SizeEffect::kSame)) {
      return Error("declares an effect on shape, dtype or size but writes no field");
    }
    if (d.shape == ShapeEffect::kSame && d.dtype.kind == DTypeEffect::Kind::kSame && d.size != SizeEffect::kSame) {
      return Error(absl::StrCat("'size' is \"", size, "\" but shape and dtype stay the same, which keeps the byte size"));
    }
    if (d.size == SizeEffect::kSame && d.shape == ShapeEffect::kScaled) {
      return Error("'size' is \"same\" but 'shape' is \"scaled\"");
    }
    if (root.contains("commutes")) {
      if (auto s = Commutes(root["commutes"], &d); !s.ok()) return s;
    }
    return d;
  }

 private:
  absl::Status Choice(const json& root, const char* key, const std::set<std::string>& choices, std::string* out) const {
    if (!root.contains(key)) return absl::OkStatus();
    const json& v = root[key];
    if (!v.is_string() || choices.count(v.get<std::string>()) == 0) {
      return Error(absl::StrCat("'", key, "' must be one of ", absl::StrJoin(choices, ", ")));
    }
    *out = v.get<std::string>();
    return absl::OkStatus();
  }

  absl::Status Fields(const json& root, const char* key, std::vector<FieldRef>* out) const {
    if (!root.contains(key)) return absl::OkStatus();
    const json& list = root[key];
    if (!list.is_array()) return Error(absl::StrCat("'", key, "' must be a list of field names or {\"arg\": ...} objects"));
    for (size_t i = 0; i < list.size(); ++i) {
      const json& item = list[i];
      const std::string where = absl::StrCat("'", key, "'[", i, "]");
      if (item.is_string()) {
        std::string name = item.get<std::string>();
        if (name.empty()) return Error(absl::StrCat(where, " is an empty field name"));
        out->push_back(name == "*" ? FieldRef::All() : FieldRef::Named(name));
        continue;
      }
      if (!item.is_object() || !item.contains("arg") || !item["arg"].is_string() || item["arg"].get<std::string>().empty()) {
        return Error(absl::StrCat(where, " must be a field name or {\"arg\": NAME, \"default\": FIELD}"));
      }
      for (const auto& [k, v] : item.items()) {
        if (k != "arg" && k != "default") return Error(absl::StrCat(where, ": unknown key '", k, "' (known: arg, default)"));
      }
      std::string fallback;
      if (item.contains("default")) {
        if (!item["default"].is_string()) return Error(absl::StrCat(where, ".default must be a field name"));
        fallback = item["default"].get<std::string>();
      }
      out->push_back(FieldRef::Arg(item["arg"].get<std::string>(), fallback));
    }
    return absl::OkStatus();
  }

  absl::Status Commutes(const json& list, OrderDeclaration* d) const {
    if (!list.is_array()) return Error("'commutes' must be a list of {\"op\": NAME, \"exact\": BOOL[, \"tolerance\": X]}");
    std::set<std::string> seen;
    for (size_t i = 0; i < list.size(); ++i) {
      const json& item = list[i];
      const std::string where = absl::StrCat("'commutes'[", i, "]");
      if (!item.is_object()) return Error(absl::StrCat(where, " must be an object"));
      for (const auto& [k, v] : item.items()) {
        if (k != "op" && k != "exact" && k != "tolerance") {
          return Error(absl::StrCat(where, ": unknown key '", k, "' (known: op, exact, tolerance)"));
        }
      }
      if (!item.contains("op") || !item["op"].is_string() || item["op"].get<std::string>().empty()) {
        return Error(absl::StrCat(where, ".op (the other op's name) is missing"));
      }
      if (!item.contains("exact") || !item["exact"].is_boolean()) {
        return Error(absl::StrCat(where, ".exact (true or false) is missing"));
      }
      CommuteRule rule;
      rule.other = item["op"].get<std::string>();
      rule.exact = item["exact"].get<bool>();
      if (!seen.insert(rule.other).second) {
        return Error(absl::StrCat(where, ": op '", rule.other, "' is declared twice"));
      }
      if (item.contains("tolerance")) {
        if (!item["tolerance"].is_number()) return Error(absl::StrCat(where, ".tolerance must be a number"));
        rule.tolerance = item["tolerance"].get<double>();
        if (!std::isfinite(rule.tolerance) || rule.tolerance < 0) {
          return Error(absl::StrCat(where, ".tolerance must be a finite number >= 0"));
        }
        if (rule.exact && rule.tolerance > 0) {
          return Error(absl::StrCat(where, ": exact commutation with a tolerance > 0 is contradictory"));
        }
      } else if (!rule.exact) {
        return Error(absl::StrCat(where, ": an approximate commutation needs a tolerance (the largest output difference)"));
      }
      d->commutes.push_back(std::move(rule));
    }
    return absl::OkStatus();
  }

  std::string plugin_;
  std::string op_;
};

}  // namespace

absl::StatusOr<OrderDeclaration> ParsePluginOrderDeclaration(absl::string_view text, absl::string_view plugin,
                                                             absl::string_view op) {
  return PluginDeclarationParser(plugin, op).Parse(text);
}

}  // namespace sluice::pipeline
