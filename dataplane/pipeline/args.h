// Argument schemas for sources, transformations and element ops, and typed read access to
// validated arguments.
//
// Every configurable thing in a pipeline declares its arguments as ArgSpecs. The spec parser uses
// them to convert YAML to typed Values (with file:line errors), and ValidateArgs() checks and
// canonicalises an argument map that arrived any other way (e.g. over RPC). Args is an immutable,
// thread-safe view used by factories.
#ifndef SLUICE_DATAPLANE_PIPELINE_ARGS_H_
#define SLUICE_DATAPLANE_PIPELINE_ARGS_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "pipeline.pb.h"

namespace sluice::pipeline {

enum class ArgType {
  kInt,
  kFloat,
  kString,
  kBool,
  kIntList,
  kFloatList,
  kStringList,
  kIntOrAuto,   // an integer, or the string "auto" (stored as int -1)
  kStringMap,   // a map from names to strings (e.g. rename: {old: new})
  kStringOrList,  // a string, or a list of strings (e.g. files: a glob or a list of globs)
  kMap,         // a free-form nested map validated by the owner (e.g. parse_example features)
};

absl::string_view ArgTypeName(ArgType type);

inline constexpr int64_t kAuto = -1;

struct ArgSpec {
  std::string name;
  ArgType type = ArgType::kString;
  bool required = false;
  std::optional<Value> default_value;  // filled into canonical form when absent
  std::string doc;
  std::vector<std::string> choices;    // allowed values for kString, when non-empty
  std::optional<double> min;           // inclusive lower bound for numbers
  std::optional<double> max;           // inclusive upper bound for numbers
};

// Builders for concise schema tables.
ArgSpec Required(std::string name, ArgType type, std::string doc);
ArgSpec Optional(std::string name, ArgType type, std::string doc);
ArgSpec WithDefault(std::string name, int64_t value, std::string doc);
ArgSpec WithDefault(std::string name, double value, std::string doc);
ArgSpec WithDefault(std::string name, bool value, std::string doc);
ArgSpec WithDefault(std::string name, const char* value, std::string doc);
ArgSpec WithDefaultIntList(std::string name, std::vector<int64_t> value, std::string doc);
ArgSpec WithDefaultFloatList(std::string name, std::vector<double> value, std::string doc);
ArgSpec AutoOrInt(std::string name, int64_t default_value, std::string doc);
ArgSpec Choice(std::string name, std::vector<std::string> choices, std::string default_value,
               std::string doc);
ArgSpec Bounded(ArgSpec spec, std::optional<double> min, std::optional<double> max);

Value IntValue(int64_t v);
Value FloatValue(double v);
Value StringValue(std::string v);
Value BoolValue(bool v);

// Checks `args` against `specs`: unknown names, missing required, wrong types, bounds, choices.
// Fills defaults and sorts entries by name. `where` prefixes error messages (e.g. "steps[2].batch").
absl::Status ValidateArgs(const std::vector<ArgSpec>& specs, ValueMap& args, absl::string_view where);
// Checks one value against one spec (used by the YAML parser after conversion).
absl::Status CheckValue(const ArgSpec& spec, const Value& value, absl::string_view where);

const Value* FindArg(const ValueMap& args, absl::string_view name);
void SetArg(ValueMap& args, absl::string_view name, Value value);
void SortArgs(ValueMap& args);

// Typed read access to validated arguments. Accessors assume ValidateArgs() succeeded; reading an
// absent optional argument returns the fallback.
class Args {
 public:
  explicit Args(const ValueMap& map) : map_(&map) {}

  bool Has(absl::string_view name) const { return FindArg(*map_, name) != nullptr; }
  int64_t Int(absl::string_view name, int64_t fallback = 0) const;
  double Float(absl::string_view name, double fallback = 0) const;
  std::string String(absl::string_view name, std::string fallback = "") const;
  bool Bool(absl::string_view name, bool fallback = false) const;
  std::vector<int64_t> IntList(absl::string_view name) const;
  std::vector<double> FloatList(absl::string_view name) const;
  std::vector<std::string> StringList(absl::string_view name) const;
  // A kStringOrList argument as a list (a single string becomes a one-element list).
  std::vector<std::string> StringOrList(absl::string_view name) const;
  std::vector<std::pair<std::string, std::string>> StringMap(absl::string_view name) const;
  const Value* Raw(absl::string_view name) const { return FindArg(*map_, name); }
  const ValueMap& map() const { return *map_; }

 private:
  const ValueMap* map_;
};

std::string ValueToString(const Value& value);

}  // namespace sluice::pipeline

#endif  // SLUICE_DATAPLANE_PIPELINE_ARGS_H_
