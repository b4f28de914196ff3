#include "dataplane/pipeline/args.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace sluice::pipeline {

absl::string_view ArgTypeName(ArgType type) {
  switch (type) {
    case ArgType::kInt: return "integer";
    case ArgType::kFloat: return "number";
    case ArgType::kString: return "string";
    case ArgType::kBool: return "boolean";
    case ArgType::kIntList: return "list of integers";
    case ArgType::kFloatList: return "list of numbers";
    case ArgType::kStringList: return "list of strings";
    case ArgType::kIntOrAuto: return "integer or 'auto'";
    case ArgType::kStringMap: return "map of strings";
    case ArgType::kStringOrList: return "string or list of strings";
    case ArgType::kMap: return "map";
  }
  return "?";
}

Value IntValue(int64_t v) {
  Value out;
  out.set_int_value(v);
  return out;
}
Value FloatValue(double v) {
  Value out;
  out.set_float_value(v);
  return out;
}
Value StringValue(std::string v) {
  Value out;
  out.set_string_value(std::move(v));
  return out;
}
Value BoolValue(bool v) {
  Value out;
  out.set_bool_value(v);
  return out;
}

ArgSpec Required(std::string name, ArgType type, std::string doc) {
  ArgSpec s;
  s.name = std::move(name);
  s.type = type;
  s.required = true;
  s.doc = std::move(doc);
  return s;
}
ArgSpec Optional(std::string name, ArgType type, std::string doc) {
  ArgSpec s;
  s.name = std::move(name);
  s.type = type;
  s.doc = std::move(doc);
  return s;
}
ArgSpec WithDefault(std::string name, int64_t value, std::string doc) {
  ArgSpec s = Optional(std::move(name), ArgType::kInt, std::move(doc));
  s.default_value = IntValue(value);
  return s;
}
ArgSpec WithDefault(std::string name, double value, std::string doc) {
  ArgSpec s = Optional(std::move(name), ArgType::kFloat, std::move(doc));
  s.default_value = FloatValue(value);
  return s;
}
ArgSpec WithDefault(std::string name, bool value, std::string doc) {
  ArgSpec s = Optional(std::move(name), ArgType::kBool, std::move(doc));
  s.default_value = BoolValue(value);
  return s;
}
ArgSpec WithDefault(std::string name, const char* value, std::string doc) {
  ArgSpec s = Optional(std::move(name), ArgType::kString, std::move(doc));
  s.default_value = StringValue(value);
  return s;
}
ArgSpec WithDefaultIntList(std::string name, std::vector<int64_t> value, std::string doc) {
  ArgSpec s = Optional(std::move(name), ArgType::kIntList, std::move(doc));
  Value v;
  for (int64_t x : value) *v.mutable_list_value()->add_values() = IntValue(x);
  if (value.empty()) v.mutable_list_value();
  s.default_value = v;
  return s;
}
ArgSpec WithDefaultFloatList(std::string name, std::vector<double> value, std::string doc) {
  ArgSpec s = Optional(std::move(name), ArgType::kFloatList, std::move(doc));
  Value v;
  for (double x : value) *v.mutable_list_value()->add_values() = FloatValue(x);
  if (value.empty()) v.mutable_list_value();
  s.default_value = v;
  return s;
}
ArgSpec AutoOrInt(std::string name, int64_t default_value, std::string doc) {
  ArgSpec s = Optional(std::move(name), ArgType::kIntOrAuto, std::move(doc));
  s.default_value = IntValue(default_value);
  return s;
}
ArgSpec Choice(std::string name, std::vector<std::string> choices, std::string default_value, std::string doc) {
  ArgSpec s = Optional(std::move(name), ArgType::kString, std::move(doc));
  s.choices = std::move(choices);
  s.default_value = StringValue(std::move(default_value));
  return s;
}
ArgSpec Bounded(ArgSpec spec, std::optional<double> min, std::optional<double> max) {
  spec.min = min;
  spec.max = max;
  return spec;
}

const Value* FindArg(const ValueMap& args, absl::string_view name) {
  for (const auto& e : args.entries()) {
    if (e.name() == name) return &e.value();
  }
  return nullptr;
}

void SetArg(ValueMap& args, absl::string_view name, Value value) {
  for (auto& e : *args.mutable_entries()) {
    if (e.name() == name) {
      *e.mutable_value() = std::move(value);
      return;
    }
  }
  auto* e = args.add_entries();
  e->set_name(std::string(name));
  *e->mutable_value() = std::move(value);
}

namespace {

void SortMapRecursively(ValueMap& map);

void SortValue(Value& v) {
  if (v.has_map_value()) SortMapRecursively(*v.mutable_map_value());
  if (v.has_list_value()) {
    for (auto& item : *v.mutable_list_value()->mutable_values()) SortValue(item);
  }
}

void SortMapRecursively(ValueMap& map) {
  auto* entries = map.mutable_entries();
  std::sort(entries->begin(), entries->end(),
            [](const NamedValue& a, const NamedValue& b) { return a.name() < b.name(); });
  for (auto& e : *entries) SortValue(*e.mutable_value());
}

bool IsNumber(const Value& v) { return v.has_int_value() || v.has_float_value(); }
double NumberOf(const Value& v) { return v.has_int_value() ? static_cast<double>(v.int_value()) : v.float_value(); }

absl::Status TypeError(const ArgSpec& spec, const Value& value, absl::string_view where) {
  return absl::InvalidArgumentError(absl::StrCat(where, ".", spec.name, ": expected ", ArgTypeName(spec.type),
                                                 ", got ", ValueToString(value)));
}

absl::Status CheckBounds(const ArgSpec& spec, double x, absl::string_view where) {
  if (spec.min && x < *spec.min) {
    return absl::InvalidArgumentError(absl::StrCat(where, ".", spec.name, ": ", x, " is below the minimum ", *spec.min));
  }
  if (spec.max && x > *spec.max) {
    return absl::InvalidArgumentError(absl::StrCat(where, ".", spec.name, ": ", x, " is above the maximum ", *spec.max));
  }
  return absl::OkStatus();
}

}  // namespace

void SortArgs(ValueMap& args) { SortMapRecursively(args); }

absl::Status CheckValue(const ArgSpec& spec, const Value& value, absl::string_view where) {
  switch (spec.type) {
    case ArgType::kInt:
      if (!value.has_int_value()) return TypeError(spec, value, where);
      return CheckBounds(spec, static_cast<double>(value.int_value()), where);
    case ArgType::kIntOrAuto:
      if (!value.has_int_value()) return TypeError(spec, value, where);
      if (value.int_value() == kAuto) return absl::OkStatus();
      return CheckBounds(spec, static_cast<double>(value.int_value()), where);
    case ArgType::kFloat:
      if (!IsNumber(value)) return TypeError(spec, value, where);
      return CheckBounds(spec, NumberOf(value), where);
    case ArgType::kString:
      if (!value.has_string_value()) return TypeError(spec, value, where);
      if (!spec.choices.empty() &&
          std::find(spec.choices.begin(), spec.choices.end(), value.string_value()) == spec.choices.end()) {
        return absl::InvalidArgumentError(absl::StrCat(where, ".", spec.name, ": '", value.string_value(),
                                                       "' is not one of: ", absl::StrJoin(spec.choices, ", ")));
      }
      return absl::OkStatus();
    case ArgType::kBool:
      if (!value.has_bool_value()) return TypeError(spec, value, where);
      return absl::OkStatus();
    case ArgType::kIntList:
    case ArgType::kFloatList:
    case ArgType::kStringList: {
      if (!value.has_list_value()) return TypeError(spec, value, where);
      for (const auto& item : value.list_value().values()) {
        bool ok = spec.type == ArgType::kIntList     ? item.has_int_value()
                  : spec.type == ArgType::kFloatList ? IsNumber(item)
                                                     : item.has_string_value();
        if (!ok) return TypeError(spec, value, where);
        if (spec.type != ArgType::kStringList) {
          if (auto s = CheckBounds(spec, NumberOf(item), where); !s.ok()) return s;
        }
      }
      return absl::OkStatus();
    }
    case ArgType::kStringOrList:
      if (value.has_string_value()) return absl::OkStatus();
      if (!value.has_list_value() || value.list_value().values_size() == 0) return TypeError(spec, value, where);
      for (const auto& item : value.list_value().values()) {
        if (!item.has_string_value()) return TypeError(spec, value, where);
      }
      return absl::OkStatus();
    case ArgType::kStringMap:
      if (!value.has_map_value()) return TypeError(spec, value, where);
      for (const auto& e : value.map_value().entries()) {
        if (!e.value().has_string_value()) {
          return absl::InvalidArgumentError(absl::StrCat(where, ".", spec.name, ".", e.name(),
                                                         ": expected a string, got ", ValueToString(e.value())));
        }
      }
      return absl::OkStatus();
    case ArgType::kMap:
      if (!value.has_map_value()) return TypeError(spec, value, where);
      return absl::OkStatus();
  }
  return absl::OkStatus();
}

absl::Status ValidateArgs(const std::vector<ArgSpec>& specs, ValueMap& args, absl::string_view where) {
  for (const auto& e : args.entries()) {
    auto it = std::find_if(specs.begin(), specs.end(), [&](const ArgSpec& s) { return s.name == e.name(); });
    if (it == specs.end()) {
      std::vector<std::string> names;
      for (const auto& s : specs) names.push_back(s.name);
      return absl::InvalidArgumentError(absl::StrCat(where, ": unknown field '", e.name(), "'; known fields: ",
                                                     names.empty() ? "(none)" : absl::StrJoin(names, ", ")));
    }
    // Integers are accepted where numbers are expected; canonical form stores floats.
    if (auto s = CheckValue(*it, e.value(), where); !s.ok()) return s;
  }
  for (const auto& spec : specs) {
    const Value* v = FindArg(args, spec.name);
    if (v == nullptr) {
      if (spec.required) {
        return absl::InvalidArgumentError(
            absl::StrCat(where, ": missing required field '", spec.name, "' (", spec.doc, ")"));
      }
      if (spec.default_value) SetArg(args, spec.name, *spec.default_value);
    }
  }
  // Canonicalise numbers: float-typed arguments given as integers become floats.
  for (auto& e : *args.mutable_entries()) {
    auto it = std::find_if(specs.begin(), specs.end(), [&](const ArgSpec& s) { return s.name == e.name(); });
    if (it == specs.end()) continue;
    Value& v = *e.mutable_value();
    if (it->type == ArgType::kFloat && v.has_int_value()) v.set_float_value(static_cast<double>(v.int_value()));
    if (it->type == ArgType::kFloatList && v.has_list_value()) {
      for (auto& item : *v.mutable_list_value()->mutable_values()) {
        if (item.has_int_value()) item.set_float_value(static_cast<double>(item.int_value()));
      }
    }
  }
  SortArgs(args);
  return absl::OkStatus();
}

int64_t Args::Int(absl::string_view name, int64_t fallback) const {
  const Value* v = Raw(name);
  if (v == nullptr) return fallback;
  if (v->has_int_value()) return v->int_value();
  if (v->has_float_value()) return static_cast<int64_t>(v->float_value());
  return fallback;
}

double Args::Float(absl::string_view name, double fallback) const {
  const Value* v = Raw(name);
  if (v == nullptr) return fallback;
  if (v->has_float_value()) return v->float_value();
  if (v->has_int_value()) return static_cast<double>(v->int_value());
  return fallback;
}

std::string Args::String(absl::string_view name, std::string fallback) const {
  const Value* v = Raw(name);
  if (v == nullptr || !v->has_string_value()) return fallback;
  return v->string_value();
}

bool Args::Bool(absl::string_view name, bool fallback) const {
  const Value* v = Raw(name);
  if (v == nullptr || !v->has_bool_value()) return fallback;
  return v->bool_value();
}

std::vector<int64_t> Args::IntList(absl::string_view name) const {
  std::vector<int64_t> out;
  const Value* v = Raw(name);
  if (v == nullptr || !v->has_list_value()) return out;
  for (const auto& item : v->list_value().values()) {
    out.push_back(item.has_int_value() ? item.int_value() : static_cast<int64_t>(item.float_value()));
  }
  return out;
}

std::vector<double> Args::FloatList(absl::string_view name) const {
  std::vector<double> out;
  const Value* v = Raw(name);
  if (v == nullptr || !v->has_list_value()) return out;
  for (const auto& item : v->list_value().values()) {
    out.push_back(item.has_float_value() ? item.float_value() : static_cast<double>(item.int_value()));
  }
  return out;
}

std::vector<std::string> Args::StringList(absl::string_view name) const {
  std::vector<std::string> out;
  const Value* v = Raw(name);
  if (v == nullptr || !v->has_list_value()) return out;
  for (const auto& item : v->list_value().values()) out.push_back(item.string_value());
  return out;
}

std::vector<std::string> Args::StringOrList(absl::string_view name) const {
  const Value* v = Raw(name);
  if (v == nullptr) return {};
  if (v->has_string_value()) return {v->string_value()};
  return StringList(name);
}

std::vector<std::pair<std::string, std::string>> Args::StringMap(absl::string_view name) const {
  std::vector<std::pair<std::string, std::string>> out;
  const Value* v = Raw(name);
  if (v == nullptr || !v->has_map_value()) return out;
  for (const auto& e : v->map_value().entries()) out.emplace_back(e.name(), e.value().string_value());
  return out;
}

std::string ValueToString(const Value& value) {
  switch (value.kind_case()) {
    case Value::kIntValue: return absl::StrCat(value.int_value());
    case Value::kFloatValue: return absl::StrCat(value.float_value());
    case Value::kStringValue: return absl::StrCat("'", value.string_value(), "'");
    case Value::kBoolValue: return value.bool_value() ? "true" : "false";
    case Value::kListValue:
      return absl::StrCat("[", absl::StrJoin(value.list_value().values(), ", ",
                                             [](std::string* out, const Value& v) { out->append(ValueToString(v)); }),
                          "]");
    case Value::kMapValue:
      return absl::StrCat("{", absl::StrJoin(value.map_value().entries(), ", ",
                                             [](std::string* out, const NamedValue& e) {
                                               absl::StrAppend(out, e.name(), ": ", ValueToString(e.value()));
                                             }),
                          "}");
    case Value::KIND_NOT_SET: return "null";
  }
  return "?";
}

}  // namespace sluice::pipeline
