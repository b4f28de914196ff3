#include "dataplane/pipeline/tfrecord/parse_example.h"

#include <cstring>
#include <utility>

#include "absl/strings/string_view.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "dataplane/pipeline/tfrecord/example.h"

namespace sluice::pipeline {
namespace {

constexpr char kOp[] = "parse_example";

FeatureKind KindOf(DType dtype) {
  switch (dtype) {
    case DType::kString:
      return FeatureKind::kBytes;
    case DType::kInt64:
      return FeatureKind::kInt64;
    case DType::kFloat32:
      return FeatureKind::kFloat;
    default:
      return FeatureKind::kEmpty;
  }
}

const char* TypeName(DType dtype) {
  switch (dtype) {
    case DType::kString:
      return "bytes";
    case DType::kInt64:
      return "int64";
    case DType::kFloat32:
      return "float";
    default:
      return "invalid";
  }
}

absl::StatusOr<DType> ParseType(absl::string_view name, absl::string_view where) {
  if (name == "bytes" || name == "string") return DType::kString;
  if (name == "int64") return DType::kInt64;
  if (name == "float" || name == "float32") return DType::kFloat32;
  return absl::InvalidArgumentError(
      absl::StrCat(where, ": unknown type '", name, "'; use bytes, int64 or float"));
}

// The shape of `count` values: the declared shape (with a -1 dimension inferred), or a scalar for
// exactly one value and a vector otherwise.
absl::StatusOr<Shape> ResolveShape(const std::optional<Shape>& declared, int64_t count,
                                   absl::string_view feature) {
  if (!declared.has_value()) return count == 1 ? Shape{} : Shape{count};
  Shape shape = *declared;
  int64_t known = 1;
  int unknown = -1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1) {
      unknown = static_cast<int>(i);
    } else {
      known *= shape[i];
    }
  }
  if (unknown >= 0) {
    if (known == 0 || count % known != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          kOp, ": feature '", feature, "' has ", count, " values, which do not fill shape ",
          ShapeToString(shape)));
    }
    shape[unknown] = count / known;
  } else if (known != count) {
    return absl::InvalidArgumentError(absl::StrCat(kOp, ": feature '", feature, "' has ", count,
                                                   " values but shape ", ShapeToString(shape),
                                                   " needs ", known));
  }
  return shape;
}

absl::StatusOr<Shape> ParseShape(const Value& value, absl::string_view where) {
  if (value.kind_case() != Value::kListValue) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": must be a list of dimensions, e.g. [28, 28]"));
  }
  Shape shape;
  int unknown = 0;
  for (const Value& dimension : value.list_value().values()) {
    if (dimension.kind_case() != Value::kIntValue ||
        (dimension.int_value() < 0 && dimension.int_value() != -1)) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, ": dimensions must be non-negative integers or -1 (inferred), got ",
          ValueToString(dimension)));
    }
    if (dimension.int_value() == -1 && ++unknown > 1) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": at most one dimension may be -1"));
    }
    shape.push_back(dimension.int_value());
  }
  return shape;
}

// Builds the default tensor of `spec` from its YAML value (a scalar or a list).
absl::StatusOr<Tensor> ParseDefault(const ExampleFeatureSpec& spec, const Value& value,
                                    absl::string_view where) {
  std::vector<const Value*> items;
  if (value.kind_case() == Value::kListValue) {
    for (const Value& item : value.list_value().values()) items.push_back(&item);
  } else {
    items.push_back(&value);
  }
  const auto count = static_cast<int64_t>(items.size());
  // One value fills any declared shape (e.g. default: 0 with shape [3]).
  Shape shape;
  if (count == 1 && spec.shape.has_value()) {
    shape = *spec.shape;
    for (auto& dimension : shape) {
      if (dimension == -1) dimension = 1;
    }
  } else {
    auto resolved = ResolveShape(spec.shape, count, spec.name);
    if (!resolved.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": ", resolved.status().message()));
    }
    shape = *resolved;
  }
  const int64_t total = NumElements(shape);
  auto wrong = [&](const Value& item) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": ", ValueToString(item),
                                                   " is not a valid ", TypeName(spec.dtype),
                                                   " value",
                                                   spec.dtype == DType::kString ? " (quote it)" : ""));
  };
  switch (spec.dtype) {
    case DType::kString: {
      std::vector<std::string> strings;
      for (const Value* item : items) {
        if (item->kind_case() != Value::kStringValue) return wrong(*item);
        strings.push_back(item->string_value());
      }
      std::vector<std::string> filled;
      for (int64_t i = 0; i < total; ++i) filled.push_back(strings[count == 1 ? 0 : i]);
      return Tensor::StringsCopy(filled, shape);
    }
    case DType::kInt64: {
      Tensor tensor = Tensor::Allocate(DType::kInt64, shape);
      for (int64_t i = 0; i < total; ++i) {
        const Value& item = *items[count == 1 ? 0 : i];
        if (item.kind_case() != Value::kIntValue) return wrong(item);
        tensor.mutable_data<int64_t>()[i] = item.int_value();
      }
      return tensor;
    }
    case DType::kFloat32: {
      Tensor tensor = Tensor::Allocate(DType::kFloat32, shape);
      for (int64_t i = 0; i < total; ++i) {
        const Value& item = *items[count == 1 ? 0 : i];
        if (item.kind_case() == Value::kIntValue) {
          tensor.mutable_data<float>()[i] = static_cast<float>(item.int_value());
        } else if (item.kind_case() == Value::kFloatValue) {
          tensor.mutable_data<float>()[i] = static_cast<float>(item.float_value());
        } else {
          return wrong(item);
        }
      }
      return tensor;
    }
    default:
      return absl::InternalError("unreachable feature dtype");
  }
}

absl::StatusOr<ExampleFeatureSpec> ParseFeatureSpec(const std::string& name, const Value& value) {
  const std::string where = absl::StrCat("features.", name);
  ExampleFeatureSpec spec;
  spec.name = name;
  if (name.empty()) return absl::InvalidArgumentError("features: feature names must not be empty");
  if (value.kind_case() == Value::kStringValue) {
    auto dtype = ParseType(value.string_value(), where);
    if (!dtype.ok()) return dtype.status();
    spec.dtype = *dtype;
    return spec;
  }
  if (value.kind_case() != Value::kMapValue) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, ": expected a type name (bytes, int64, float) or a map {type, shape, default, "
               "required}, got ",
        ValueToString(value)));
  }
  const Value* default_value = nullptr;
  for (const NamedValue& entry : value.map_value().entries()) {
    const std::string key_where = absl::StrCat(where, ".", entry.name());
    const Value& item = entry.value();
    if (entry.name() == "type") {
      if (item.kind_case() != Value::kStringValue) {
        return absl::InvalidArgumentError(absl::StrCat(key_where, ": must be bytes, int64 or float"));
      }
      auto dtype = ParseType(item.string_value(), key_where);
      if (!dtype.ok()) return dtype.status();
      spec.dtype = *dtype;
    } else if (entry.name() == "shape") {
      auto shape = ParseShape(item, key_where);
      if (!shape.ok()) return shape.status();
      spec.shape = *shape;
    } else if (entry.name() == "default") {
      default_value = &item;
    } else if (entry.name() == "required") {
      if (item.kind_case() != Value::kBoolValue) {
        return absl::InvalidArgumentError(absl::StrCat(key_where, ": must be true or false"));
      }
      spec.required = item.bool_value();
    } else {
      return absl::InvalidArgumentError(absl::StrCat(
          where, ": unknown key '", entry.name(), "'; expected type, shape, default or required"));
    }
  }
  if (spec.dtype == DType::kInvalid) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": missing 'type' (bytes, int64 or float)"));
  }
  if (default_value != nullptr) {
    auto tensor = ParseDefault(spec, *default_value, absl::StrCat(where, ".default"));
    if (!tensor.ok()) return tensor.status();
    spec.default_value = *std::move(tensor);
  }
  return spec;
}

std::shared_ptr<const void> OwnerOf(const Tensor& record) {
  if (record.buffer().owner != nullptr) return record.buffer().owner;
  // A tensor whose bytes have no separate owner: keep a copy of the tensor itself alive.
  return std::make_shared<const Tensor>(record);
}

}  // namespace

absl::StatusOr<std::vector<ExampleFeatureSpec>> ParseExampleFeatureSpecs(const Value& features) {
  if (features.kind_case() != Value::kMapValue || features.map_value().entries().empty()) {
    return absl::InvalidArgumentError(
        "features: must be a non-empty map from feature name to its type, e.g. "
        "{image: bytes, label: {type: int64}}");
  }
  std::vector<ExampleFeatureSpec> specs;
  for (const NamedValue& entry : features.map_value().entries()) {
    for (const auto& existing : specs) {
      if (existing.name == entry.name()) {
        return absl::InvalidArgumentError(
            absl::StrCat("features.", entry.name(), ": declared twice"));
      }
    }
    auto spec = ParseFeatureSpec(entry.name(), entry.value());
    if (!spec.ok()) return spec.status();
    specs.push_back(*std::move(spec));
  }
  return specs;
}

ParseExampleOp::ParseExampleOp(std::string field, std::vector<ExampleFeatureSpec> features,
                               bool keep_record)
    : field_(std::move(field)), features_(std::move(features)), keep_record_(keep_record) {
  for (size_t i = 0; i < features_.size(); ++i) index_.emplace(features_[i].name, i);
}

absl::Status ParseExampleOp::Apply(Element& element, uint64_t /*seed*/) const {
  const Tensor* record = element.Find(field_);
  if (record == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(kOp, ": the element has no field '", field_,
                                                   "' (fields: ", element.FieldNames(), ")"));
  }
  if (record->dtype() != DType::kString || record->num_elements() != 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        kOp, ": field '", field_, "' must hold one serialized tf.train.Example (a scalar string), "
        "got ", DTypeName(record->dtype()), ShapeToString(record->shape())));
  }
  const absl::string_view bytes = record->strings()[0];

  struct Found {
    absl::string_view feature;
    uint64_t offset = 0;
    bool present = false;
  };
  absl::InlinedVector<Found, 8> found(features_.size());
  absl::Status status = ForEachFeature(
      bytes, [&](absl::string_view name, absl::string_view feature, uint64_t offset) {
        auto it = index_.find(name);
        if (it != index_.end()) found[it->second] = Found{feature, offset, true};
        return absl::OkStatus();
      });
  if (!status.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(kOp, ": field '", field_, "': ", status.message()));
  }

  std::shared_ptr<const void> owner;
  absl::InlinedVector<std::pair<const std::string*, Tensor>, 8> outputs;
  FeatureValues values;
  for (size_t i = 0; i < features_.size(); ++i) {
    const ExampleFeatureSpec& spec = features_[i];
    if (!found[i].present) {
      if (spec.default_value.has_value()) {
        outputs.emplace_back(&spec.name, *spec.default_value);
        continue;
      }
      if (!spec.required) continue;
      std::vector<std::string> present;
      (void)ForEachFeature(bytes, [&](absl::string_view name, absl::string_view, uint64_t) {
        present.emplace_back(name);
        return absl::OkStatus();
      });
      return absl::NotFoundError(absl::StrCat(
          kOp, ": required feature '", spec.name, "' is missing from field '", field_,
          "' (the record has: ", present.empty() ? "no features" : absl::StrJoin(present, ", "),
          "); give it a default or set required: false"));
    }
    status = DecodeFeature(found[i].feature, found[i].offset, &values);
    if (!status.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(kOp, ": field '", field_, "', feature '",
                                                     spec.name, "': ", status.message()));
    }
    const FeatureKind expected = KindOf(spec.dtype);
    if (values.kind != expected && values.kind != FeatureKind::kEmpty) {
      return absl::InvalidArgumentError(absl::StrCat(
          kOp, ": feature '", spec.name, "' is declared ", TypeName(spec.dtype),
          " but the record holds a ", FeatureKindName(values.kind), " (", values.size(),
          " values)"));
    }
    auto shape = ResolveShape(spec.shape, static_cast<int64_t>(values.size()), spec.name);
    if (!shape.ok()) return shape.status();
    switch (spec.dtype) {
      case DType::kString: {
        if (owner == nullptr) owner = OwnerOf(*record);
        outputs.emplace_back(&spec.name,
                             Tensor::Strings(owner, std::move(values.bytes), *std::move(shape)));
        values.bytes = {};
        break;
      }
      case DType::kInt64: {
        Tensor tensor = Tensor::Allocate(DType::kInt64, *std::move(shape));
        if (!values.int64s.empty()) {
          std::memcpy(tensor.mutable_raw(), values.int64s.data(),
                      values.int64s.size() * sizeof(int64_t));
        }
        outputs.emplace_back(&spec.name, std::move(tensor));
        break;
      }
      case DType::kFloat32: {
        Tensor tensor = Tensor::Allocate(DType::kFloat32, *std::move(shape));
        if (!values.floats.empty()) {
          std::memcpy(tensor.mutable_raw(), values.floats.data(),
                      values.floats.size() * sizeof(float));
        }
        outputs.emplace_back(&spec.name, std::move(tensor));
        break;
      }
      default:
        return absl::InternalError("unreachable feature dtype");
    }
  }
  if (!keep_record_) element.Erase(field_);
  for (auto& [name, tensor] : outputs) element.Set(*name, std::move(tensor));
  return absl::OkStatus();
}

std::string ParseExampleOp::Describe() const {
  std::vector<std::string> parts;
  for (const auto& spec : features_) {
    parts.push_back(absl::StrCat(spec.name, ":", TypeName(spec.dtype)));
  }
  return absl::StrCat(kOp, "(", field_, " -> ", absl::StrJoin(parts, ", "),
                      keep_record_ ? ", keep_record" : "", ")");
}

OpDescriptor ParseExampleDescriptor() {
  OpDescriptor descriptor;
  descriptor.name = std::string(kOp);
  descriptor.summary =
      "Decodes a serialized tf.train.Example into one tensor per declared feature (bytes -> "
      "string, int64 -> int64, float -> float32).";
  descriptor.args = {
      WithDefault("field", "record", "string field holding the serialized Example"),
      Required("features", ArgType::kMap,
               "feature name -> type (bytes|int64|float) or {type, shape, default, required}"),
      WithDefault("keep_record", false, "keep the serialized record field after parsing"),
  };
  descriptor.factory = [](const Args& args) -> absl::StatusOr<std::unique_ptr<ElementOp>> {
    const Value* features = args.Raw("features");
    if (features == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(kOp, ": missing required argument 'features'"));
    }
    auto specs = ParseExampleFeatureSpecs(*features);
    if (!specs.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(kOp, ": ", specs.status().message()));
    }
    return std::unique_ptr<ElementOp>(std::make_unique<ParseExampleOp>(
        args.String("field", "record"), *std::move(specs), args.Bool("keep_record", false)));
  };
  auto order = std::make_shared<OrderDeclaration>();
  order->reads = {FieldRef::Arg("field", "record")};
  // Removes the record (unless keep_record) and creates one field per feature.
  order->writes = {FieldRef::Arg("field", "record"), FieldRef::ArgMapKeys("features")};
  order->shape = ShapeEffect::kData;
  order->size = SizeEffect::kDepends;
  order->cost = CostDriver::kInput;
  descriptor.order = std::move(order);
  return descriptor;
}

void RegisterExampleOps(OpRegistry& registry) { (void)registry.Register(ParseExampleDescriptor()); }

}  // namespace sluice::pipeline
