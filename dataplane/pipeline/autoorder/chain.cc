#include "dataplane/pipeline/autoorder/chain.h"

#include "absl/strings/str_cat.h"
#include "dataplane/pipeline/op.h"

namespace sluice::pipeline::autoorder {
namespace {

std::string FieldOf(const ValueMap& args) {
  const Value* field = FindArg(args, "field");
  return field != nullptr && field->has_string_value() ? field->string_value() : "";
}

std::string OpName(const OpDef& op) {
  std::string field = FieldOf(op.args());
  if (op.op() == "cast") {
    const Value* dtype = FindArg(op.args(), "dtype");
    return absl::StrCat("cast(", field, "->", dtype != nullptr ? dtype->string_value() : "?", ")");
  }
  return field.empty() ? op.op() : absl::StrCat(op.op(), "(", field, ")");
}

bool SameSettings(const StepDef& a, const StepDef& b) {
  return a.keep_position() == b.keep_position() && a.args().SerializeAsString() == b.args().SerializeAsString();
}

}  // namespace

absl::StatusOr<Chain> BuildChain(const PipelineDef& def) {
  Chain chain;
  for (int i = 0; i < def.steps_size(); ++i) {
    const StepDef& step = def.steps(i);
    if (step.kind() == "map") {
      for (int j = 0; j < step.ops_size(); ++j) {
        const OpDef& op = step.ops(j);
        const OpDescriptor* d = OpRegistry::Builtin().Find(op.op());
        Unit u;
        u.kind = Unit::Kind::kOp;
        u.step = i;
        u.op = j;
        u.name = OpName(op);
        u.pinned = op.keep_position() || step.keep_position();
        auto props = ResolveOrderProperties(op.op(), d != nullptr ? d->order : nullptr, d != nullptr && d->random, op.args());
        if (!props.ok()) return props.status();
        u.properties = *std::move(props);
        chain.units.push_back(std::move(u));
      }
      continue;
    }
    Unit u;
    u.step = i;
    u.pinned = step.keep_position();
    if (step.kind() == "filter") {
      u.kind = Unit::Kind::kFilter;
      u.name = absl::StrCat("filter(", FieldOf(step.args()), ")");
      auto props = ResolveOrderProperties("filter", FilterOrderDeclaration(), false, step.args());
      if (!props.ok()) return props.status();
      u.properties = *std::move(props);
    } else {
      u.kind = Unit::Kind::kStep;
      u.name = step.kind();
      u.properties.op = step.kind();
    }
    chain.units.push_back(std::move(u));
  }
  for (size_t k = 0; k < chain.units.size();) {
    if (!chain.units[k].movable()) {
      ++k;
      continue;
    }
    size_t end = k;
    while (end < chain.units.size() && chain.units[end].movable()) ++end;
    if (end - k >= 2) chain.segments.push_back(Segment{k, end});
    k = end;
  }
  return chain;
}

PipelineDef RebuildDef(const PipelineDef& def, const Chain& chain, const std::vector<size_t>& order) {
  PipelineDef out = def;
  out.clear_steps();
  const StepDef* open_map = nullptr;  // the original step of the map being filled
  StepDef* current = nullptr;
  for (size_t index : order) {
    const Unit& u = chain.units[index];
    const StepDef& step = def.steps(u.step);
    if (u.kind != Unit::Kind::kOp) {
      *out.add_steps() = step;
      open_map = nullptr;
      current = nullptr;
      continue;
    }
    if (current == nullptr || !SameSettings(*open_map, step)) {
      current = out.add_steps();
      current->set_kind("map");
      *current->mutable_args() = step.args();
      *current->mutable_location() = step.location();
      current->set_keep_position(step.keep_position());
      open_map = &step;
    }
    *current->add_ops() = step.ops(u.op);
  }
  return out;
}

std::vector<std::string> UnitNames(const Chain& chain, const std::vector<size_t>& order) {
  std::vector<std::string> names;
  for (size_t i : order) names.push_back(chain.units[i].name);
  return names;
}

}  // namespace sluice::pipeline::autoorder
