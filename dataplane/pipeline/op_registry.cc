#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "dataplane/pipeline/op.h"

namespace sluice::pipeline {

OpRegistry& OpRegistry::Builtin() {
  static OpRegistry* registry = [] {
    auto* r = new OpRegistry();
    RegisterTensorOps(*r);
    RegisterImageOps(*r);
    RegisterTextOps(*r);
    RegisterExampleOps(*r);
    return r;
  }();
  return *registry;
}

absl::Status OpRegistry::Register(OpDescriptor descriptor) {
  absl::MutexLock lock(&mu_);
  if (descriptor.name.empty()) return absl::InvalidArgumentError("op descriptor without a name");
  if (ops_.count(descriptor.name) != 0) {
    return absl::AlreadyExistsError(absl::StrCat("op '", descriptor.name, "' is already registered"));
  }
  std::string name = descriptor.name;
  ops_.emplace(std::move(name), std::move(descriptor));
  return absl::OkStatus();
}

const OpDescriptor* OpRegistry::Find(absl::string_view name) const {
  absl::ReaderMutexLock lock(&mu_);
  auto it = ops_.find(name);
  return it == ops_.end() ? nullptr : &it->second;
}

std::vector<std::string> OpRegistry::Names() const {
  absl::ReaderMutexLock lock(&mu_);
  std::vector<std::string> names;
  for (const auto& [name, d] : ops_) names.push_back(name);
  return names;
}

absl::Status OpRegistry::UnknownOpError(absl::string_view name, absl::string_view where) const {
  return absl::InvalidArgumentError(
      absl::StrCat(where, ": unknown op '", name, "'; known ops: ", absl::StrJoin(Names(), ", ")));
}

absl::StatusOr<Tensor*> GetMutableField(Element& element, absl::string_view field, absl::string_view op) {
  if (Tensor* t = element.FindMutable(field)) return t;
  return absl::InvalidArgumentError(
      absl::StrCat(op, ": element has no field '", field, "'; fields: ", element.FieldNames()));
}

absl::StatusOr<const Tensor*> GetField(const Element& element, absl::string_view field, absl::string_view op) {
  if (const Tensor* t = element.Find(field)) return t;
  return absl::InvalidArgumentError(
      absl::StrCat(op, ": element has no field '", field, "'; fields: ", element.FieldNames()));
}

}  // namespace sluice::pipeline
