// What AutoOrder may rely on when it reorders a pipeline's ops (docs/autoorder.md): every built-in
// op, the `filter` step and (through the plugin ABI's optional extension) plugin ops declare which
// fields they read and write, their effect on shape, dtype and byte size, what their CPU cost scales
// with, and which other ops they commute with on the same field, exactly or within a tolerance.
//
// A declaration (OrderDeclaration) is static and names fields symbolically ("the field named by
// argument `field`"); OrderProperties is one op instance's declaration resolved against its
// arguments. Commute() decides whether two resolved instances may swap. An op without a
// declaration is a barrier: nothing moves across it.
//
// Everything here is immutable after construction and thread-compatible; declarations of built-in
// ops are built once at registration.
#ifndef SLUICE_DATAPLANE_PIPELINE_OP_PROPERTIES_H_
#define SLUICE_DATAPLANE_PIPELINE_OP_PROPERTIES_H_

#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "dataplane/pipeline/args.h"
#include "dataplane/pipeline/tensor.h"
#include "pipeline.pb.h"

namespace sluice::pipeline {

// A field an op reads or writes, as declared.
struct FieldRef {
  enum class Kind {
    kName,          // the field `name`
    kArg,           // the field named by string argument `name` (absent: argument `fallback_arg`, else `fallback`)
    kArgList,       // every field named in string-list argument `name`
    kArgMapKeys,    // the keys of map argument `name` (rename's old names, parse_example's features)
    kArgMapValues,  // the string values of map argument `name` (rename's new names)
    kAll,           // every field of the element
  };
  Kind kind = Kind::kName;
  std::string name;
  std::string fallback;
  std::string fallback_arg;

  static FieldRef Named(std::string field) { return {Kind::kName, std::move(field), "", ""}; }
  static FieldRef Arg(std::string arg, std::string fallback = "") { return {Kind::kArg, std::move(arg), std::move(fallback), ""}; }
  static FieldRef ArgOr(std::string arg, std::string fallback_arg) { return {Kind::kArg, std::move(arg), "", std::move(fallback_arg)}; }
  static FieldRef ArgList(std::string arg) { return {Kind::kArgList, std::move(arg), "", ""}; }
  static FieldRef ArgMapKeys(std::string arg) { return {Kind::kArgMapKeys, std::move(arg), "", ""}; }
  static FieldRef ArgMapValues(std::string arg) { return {Kind::kArgMapValues, std::move(arg), "", ""}; }
  static FieldRef All() { return {Kind::kAll, "", "", ""}; }
  std::string ToString() const;  // for docs: "`field` (default image)", "*"
};

// How the number of values of the written field changes.
enum class ShapeEffect {
  kSame,    // same number of values (maybe another layout)
  kFixed,   // set by the arguments, not by the input's size (crops, resizes, pad)
  kScaled,  // a multiple of the input's (one_hot: x depth)
  kData,    // depends on the data (decode, tokenize, parse_example)
};
// What happens to the element's byte size, as a practitioner would say it.
enum class SizeEffect { kSame, kSmaller, kLarger, kDepends };
// What the op's CPU cost grows with, for the cost model.
enum class CostDriver {
  kInput,     // bytes of the fields it reads and writes, at its input
  kOutput,    // bytes of the fields it writes, at its output
  kConstant,  // neither (a filter's test, a decode of the same bytes)
};

absl::string_view ShapeEffectName(ShapeEffect e);
absl::string_view SizeEffectName(SizeEffect e);
absl::string_view CostDriverName(CostDriver c);

// The dtype of the written field afterwards.
struct DTypeEffect {
  enum class Kind { kSame, kFixed, kArg };
  Kind kind = Kind::kSame;
  DType fixed = DType::kUInt8;
  std::string arg;         // kArg: the argument naming the dtype
  std::string arg_default; // kArg: the dtype when the argument is absent
  static DTypeEffect Same() { return {}; }
  static DTypeEffect Fixed(DType d) { return {Kind::kFixed, d, "", ""}; }
  static DTypeEffect FromArg(std::string arg, std::string fallback) { return {Kind::kArg, DType::kUInt8, std::move(arg), std::move(fallback)}; }
  std::string ToString() const;
};

// Swapping two ops that touch the same field: exact (bit-identical output) or approximate (every
// output value within `tolerance`, in the output's units).
struct Commutation {
  bool exact = true;
  double tolerance = 0;
};

// "This op commutes with op `other` on the same field". `check` refines the declaration for the two
// instances' arguments (this op's first): it returns the commutation, or nullopt when it does not
// hold for them. Without `check` the rule always holds, as `exact` / `tolerance` say.
struct CommuteRule {
  std::string other;
  bool exact = true;
  double tolerance = 0;
  std::string condition;  // for docs: when it holds / how the tolerance is set ("" always)
  std::function<std::optional<Commutation>(const Args& self, const Args& other)> check;
};

struct OrderDeclaration {
  std::vector<FieldRef> reads;    // fields whose values it reads
  std::vector<FieldRef> writes;   // fields it replaces, creates or removes
  ShapeEffect shape = ShapeEffect::kSame;
  DTypeEffect dtype;
  SizeEffect size = SizeEffect::kSame;
  CostDriver cost = CostDriver::kInput;
  bool may_drop = false;          // may drop elements (a filter); never adds any
  std::vector<CommuteRule> commutes;
  // Plugin ops take their arguments in one `config` map: FieldRef and DTypeEffect arguments are
  // looked up there.
  bool args_in_config = false;
  std::string note;               // one line for docs
};

// One op (or filter step) instance's declaration resolved against its arguments.
struct OrderProperties {
  std::string op;                     // op name, or "filter"
  std::shared_ptr<const OrderDeclaration> declaration;  // null: a barrier (undeclared)
  std::shared_ptr<const ValueMap> args;                 // the instance's arguments
  std::set<std::string> reads, writes;
  bool reads_all = false, writes_all = false;
  bool random = false;
  bool barrier() const { return declaration == nullptr; }
  std::optional<DType> output_dtype;  // of the written fields; nullopt: unchanged
};

// Resolves `declaration` (null: a barrier) for an instance of `op` with arguments `args`.
// Errors: a dtype argument that names no dtype.
absl::StatusOr<OrderProperties> ResolveOrderProperties(const std::string& op,
                                                       std::shared_ptr<const OrderDeclaration> declaration,
                                                       bool random, const ValueMap& args);

// Whether `first` followed by `second` may become `second` followed by `first`, and how exactly.
// Barriers never commute. Instances touching disjoint fields (neither writes what the other reads
// or writes) commute exactly. Otherwise a CommuteRule of either for the other must hold; when both
// declare one, the weaker wins.
std::optional<Commutation> Commute(const OrderProperties& first, const OrderProperties& second);

// The declaration of the `filter` step.
std::shared_ptr<const OrderDeclaration> FilterOrderDeclaration();

// Parses and checks a plugin op's declaration (sluice_plugin.h: sluice_op_v1::order_properties_json).
// Malformed or contradictory declarations are refused with an error naming the plugin and the op.
absl::StatusOr<OrderDeclaration> ParsePluginOrderDeclaration(absl::string_view json, absl::string_view plugin,
                                                             absl::string_view op);

// Helpers for built-in declarations.
// A declaration touching one field named by argument `arg` (default `fallback`): reads and writes it.
std::shared_ptr<OrderDeclaration> OneFieldDeclaration(const std::string& arg, const std::string& fallback,
                                                      ShapeEffect shape, DTypeEffect dtype, SizeEffect size,
                                                      CostDriver cost);
// Argument accessors for CommuteRule checks.
double ArgFloat(const Args& args, absl::string_view name, double fallback);
std::string ArgString(const Args& args, absl::string_view name, const std::string& fallback);
std::vector<double> ArgFloats(const Args& args, absl::string_view name, std::vector<double> fallback);

// The version of the plugin declaration format this Sluice reads.
inline constexpr int kPluginOrderPropertiesVersion = 1;

}  // namespace sluice::pipeline

#endif  // SLUICE_DATAPLANE_PIPELINE_OP_PROPERTIES_H_
