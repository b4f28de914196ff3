#include "dataplane/pipeline/tfrecord/example.h"

#include <cstring>

#include "absl/strings/string_view.h"
#include "absl/strings/str_cat.h"

namespace sluice::pipeline {
namespace {

enum WireType : uint32_t {
  kVarint = 0,
  kFixed64 = 1,
  kLengthDelimited = 2,
  kStartGroup = 3,
  kEndGroup = 4,
  kFixed32 = 5,
};

// Sequential reader of protobuf wire data. `base` is the offset of `data` in the whole record, so
// errors report positions a user can find in the record.
class WireReader {
 public:
  WireReader(absl::string_view data, uint64_t base) : data_(data), base_(base) {}

  bool done() const { return position_ >= data_.size(); }
  uint64_t offset() const { return base_ + position_; }

  absl::Status Error(absl::string_view what, uint64_t at) const {
    return absl::InvalidArgumentError(
        absl::StrCat("malformed tf.train.Example at byte offset ", at, ": ", what));
  }

  absl::StatusOr<uint64_t> ReadVarint() {
    const uint64_t start = offset();
    uint64_t value = 0;
    for (int shift = 0; shift < 70; shift += 7) {
      if (position_ >= data_.size()) return Error("truncated varint", start);
      const auto byte = static_cast<uint8_t>(data_[position_++]);
      value |= static_cast<uint64_t>(byte & 0x7fu) << shift;
      if ((byte & 0x80u) == 0) return value;
    }
    return Error("varint longer than 10 bytes", start);
  }

  // Reads a tag; returns field number and wire type.
  absl::Status ReadTag(uint32_t* field, uint32_t* wire_type) {
    const uint64_t start = offset();
    auto tag = ReadVarint();
    if (!tag.ok()) return tag.status();
    *wire_type = static_cast<uint32_t>(*tag & 7u);
    const uint64_t number = *tag >> 3;
    if (number == 0 || number > 0x1fffffffu) {
      return Error(absl::StrCat("invalid field number ", number), start);
    }
    *field = static_cast<uint32_t>(number);
    if (*wire_type == kStartGroup || *wire_type == kEndGroup) {
      return Error(absl::StrCat("unsupported wire type ", *wire_type, " (group) for field ", number),
                   start);
    }
    if (*wire_type > kFixed32) {
      return Error(absl::StrCat("invalid wire type ", *wire_type, " for field ", number), start);
    }
    return absl::OkStatus();
  }

  // Reads a length-delimited payload; `*payload_offset` gets its absolute offset.
  absl::StatusOr<absl::string_view> ReadBytes(uint64_t* payload_offset) {
    const uint64_t start = offset();
    auto length = ReadVarint();
    if (!length.ok()) return length.status();
    if (*length > data_.size() - position_) {
      return Error(absl::StrCat("length ", *length, " runs past the end of its message (",
                                data_.size() - position_, " bytes left)"),
                   start);
    }
    if (payload_offset != nullptr) *payload_offset = offset();
    absl::string_view payload = data_.substr(position_, *length);
    position_ += *length;
    return payload;
  }

  absl::StatusOr<uint32_t> ReadFixed32() {
    if (data_.size() - position_ < 4) return Error("truncated fixed32", offset());
    uint32_t value = 0;
    for (int i = 3; i >= 0; --i) value = (value << 8) | static_cast<uint8_t>(data_[position_ + i]);
    position_ += 4;
    return value;
  }

  absl::Status Skip(uint32_t wire_type) {
    switch (wire_type) {
      case kVarint:
        return ReadVarint().status();
      case kFixed64:
        if (data_.size() - position_ < 8) return Error("truncated fixed64", offset());
        position_ += 8;
        return absl::OkStatus();
      case kLengthDelimited:
        return ReadBytes(nullptr).status();
      case kFixed32:
        return ReadFixed32().status();
      default:
        return Error(absl::StrCat("cannot skip wire type ", wire_type), offset());
    }
  }

 private:
  absl::string_view data_;
  uint64_t base_;
  size_t position_ = 0;
};

float FloatFromBits(uint32_t bits) {
  float value;
  std::memcpy(&value, &bits, sizeof(value));
  return value;
}

// Switches `values` to `kind`; a oneof that changes kind drops the earlier values, one that
// repeats the same kind merges (as protobuf's parser does).
void SwitchKind(FeatureValues* values, FeatureKind kind) {
  if (values->kind == kind) return;
  values->bytes.clear();
  values->floats.clear();
  values->int64s.clear();
  values->kind = kind;
}

absl::Status DecodeBytesList(absl::string_view list, uint64_t offset, FeatureValues* values) {
  WireReader reader(list, offset);
  while (!reader.done()) {
    uint32_t field, wire_type;
    if (auto status = reader.ReadTag(&field, &wire_type); !status.ok()) return status;
    if (field == 1 && wire_type == kLengthDelimited) {
      auto value = reader.ReadBytes(nullptr);
      if (!value.ok()) return value.status();
      values->bytes.push_back(*value);
    } else if (auto status = reader.Skip(wire_type); !status.ok()) {
      return status;
    }
  }
  return absl::OkStatus();
}

absl::Status DecodeFloatList(absl::string_view list, uint64_t offset, FeatureValues* values) {
  WireReader reader(list, offset);
  while (!reader.done()) {
    uint32_t field, wire_type;
    if (auto status = reader.ReadTag(&field, &wire_type); !status.ok()) return status;
    if (field == 1 && wire_type == kLengthDelimited) {
      uint64_t packed_offset = 0;
      auto packed = reader.ReadBytes(&packed_offset);
      if (!packed.ok()) return packed.status();
      if (packed->size() % 4 != 0) {
        return reader.Error(absl::StrCat("packed float list of ", packed->size(),
                                         " bytes is not a multiple of 4"),
                            packed_offset);
      }
      values->floats.reserve(values->floats.size() + packed->size() / 4);
      WireReader floats(*packed, packed_offset);
      while (!floats.done()) values->floats.push_back(FloatFromBits(*floats.ReadFixed32()));
    } else if (field == 1 && wire_type == kFixed32) {
      auto bits = reader.ReadFixed32();
      if (!bits.ok()) return bits.status();
      values->floats.push_back(FloatFromBits(*bits));
    } else if (auto status = reader.Skip(wire_type); !status.ok()) {
      return status;
    }
  }
  return absl::OkStatus();
}

absl::Status DecodeInt64List(absl::string_view list, uint64_t offset, FeatureValues* values) {
  WireReader reader(list, offset);
  while (!reader.done()) {
    uint32_t field, wire_type;
    if (auto status = reader.ReadTag(&field, &wire_type); !status.ok()) return status;
    if (field == 1 && wire_type == kLengthDelimited) {
      uint64_t packed_offset = 0;
      auto packed = reader.ReadBytes(&packed_offset);
      if (!packed.ok()) return packed.status();
      WireReader varints(*packed, packed_offset);
      while (!varints.done()) {
        auto value = varints.ReadVarint();
        if (!value.ok()) return value.status();
        values->int64s.push_back(static_cast<int64_t>(*value));
      }
    } else if (field == 1 && wire_type == kVarint) {
      auto value = reader.ReadVarint();
      if (!value.ok()) return value.status();
      values->int64s.push_back(static_cast<int64_t>(*value));
    } else if (auto status = reader.Skip(wire_type); !status.ok()) {
      return status;
    }
  }
  return absl::OkStatus();
}

// Wire encoding helpers.
void PutVarint(uint64_t value, std::string* out) {
  while (value >= 0x80u) {
    out->push_back(static_cast<char>((value & 0x7fu) | 0x80u));
    value >>= 7;
  }
  out->push_back(static_cast<char>(value));
}

void PutTag(uint32_t field, WireType wire_type, std::string* out) {
  PutVarint((static_cast<uint64_t>(field) << 3) | wire_type, out);
}

void PutBytesField(uint32_t field, absl::string_view bytes, std::string* out) {
  PutTag(field, kLengthDelimited, out);
  PutVarint(bytes.size(), out);
  out->append(bytes.data(), bytes.size());
}

void PutFixed32(uint32_t value, std::string* out) {
  for (int i = 0; i < 4; ++i) out->push_back(static_cast<char>((value >> (8 * i)) & 0xffu));
}

uint32_t FloatBits(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  return bits;
}

// Reads element `i` of an integer or bool tensor exactly.
int64_t IntegerAt(const Tensor& tensor, int64_t i) {
  switch (tensor.dtype()) {
    case DType::kBool:
      return tensor.data<uint8_t>()[i] != 0 ? 1 : 0;
    case DType::kUInt8:
      return tensor.data<uint8_t>()[i];
    case DType::kInt8:
      return tensor.data<int8_t>()[i];
    case DType::kUInt16:
      return tensor.data<uint16_t>()[i];
    case DType::kInt16:
      return tensor.data<int16_t>()[i];
    case DType::kInt32:
      return tensor.data<int32_t>()[i];
    case DType::kInt64:
      return tensor.data<int64_t>()[i];
    default:
      return 0;
  }
}

absl::StatusOr<std::string> EncodeFeature(const std::string& name, const Tensor& tensor,
                                          const ExampleEncodeOptions& options) {
  std::string list;
  uint32_t kind_field = 0;
  const int64_t count = tensor.num_elements();
  switch (tensor.dtype()) {
    case DType::kString:
      kind_field = 1;
      for (absl::string_view value : tensor.strings()) PutBytesField(1, value, &list);
      break;
    case DType::kFloat32:
    case DType::kFloat64: {
      kind_field = 2;
      std::string packed;
      for (int64_t i = 0; i < count; ++i) {
        const float value = tensor.dtype() == DType::kFloat32
                                ? tensor.data<float>()[i]
                                : static_cast<float>(tensor.data<double>()[i]);
        if (options.packed) {
          PutFixed32(FloatBits(value), &packed);
        } else {
          PutTag(1, kFixed32, &list);
          PutFixed32(FloatBits(value), &list);
        }
      }
      if (options.packed && count > 0) PutBytesField(1, packed, &list);
      break;
    }
    case DType::kBool:
    case DType::kUInt8:
    case DType::kInt8:
    case DType::kUInt16:
    case DType::kInt16:
    case DType::kInt32:
    case DType::kInt64: {
      kind_field = 3;
      std::string packed;
      for (int64_t i = 0; i < count; ++i) {
        const auto value = static_cast<uint64_t>(IntegerAt(tensor, i));
        if (options.packed) {
          PutVarint(value, &packed);
        } else {
          PutTag(1, kVarint, &list);
          PutVarint(value, &list);
        }
      }
      if (options.packed && count > 0) PutBytesField(1, packed, &list);
      break;
    }
    default:
      return absl::InvalidArgumentError(absl::StrCat("EncodeExample: field '", name, "' has dtype ",
                                                     DTypeName(tensor.dtype()),
                                                     ", which a tf.train.Example cannot hold"));
  }
  std::string feature;
  PutBytesField(kind_field, list, &feature);
  return feature;
}

}  // namespace

absl::string_view FeatureKindName(FeatureKind kind) {
  switch (kind) {
    case FeatureKind::kEmpty:
      return "empty feature";
    case FeatureKind::kBytes:
      return "bytes_list";
    case FeatureKind::kFloat:
      return "float_list";
    case FeatureKind::kInt64:
      return "int64_list";
  }
  return "unknown";
}

size_t FeatureValues::size() const {
  switch (kind) {
    case FeatureKind::kBytes:
      return bytes.size();
    case FeatureKind::kFloat:
      return floats.size();
    case FeatureKind::kInt64:
      return int64s.size();
    case FeatureKind::kEmpty:
      break;
  }
  return 0;
}

absl::Status ForEachFeature(
    absl::string_view example,
    const std::function<absl::Status(absl::string_view name, absl::string_view feature,
                                     uint64_t offset)>& visit) {
  WireReader reader(example, 0);
  while (!reader.done()) {
    uint32_t field, wire_type;
    if (auto status = reader.ReadTag(&field, &wire_type); !status.ok()) return status;
    if (field != 1 || wire_type != kLengthDelimited) {
      if (auto status = reader.Skip(wire_type); !status.ok()) return status;
      continue;
    }
    uint64_t features_offset = 0;
    auto features = reader.ReadBytes(&features_offset);
    if (!features.ok()) return features.status();
    WireReader entries(*features, features_offset);
    while (!entries.done()) {
      if (auto status = entries.ReadTag(&field, &wire_type); !status.ok()) return status;
      if (field != 1 || wire_type != kLengthDelimited) {
        if (auto status = entries.Skip(wire_type); !status.ok()) return status;
        continue;
      }
      uint64_t entry_offset = 0;
      auto entry = entries.ReadBytes(&entry_offset);
      if (!entry.ok()) return entry.status();
      // A map entry: key = 1, value = 2; either may be absent (empty), the last occurrence wins.
      absl::string_view name;
      absl::string_view feature;
      uint64_t feature_offset = entry_offset + entry->size();
      WireReader parts(*entry, entry_offset);
      while (!parts.done()) {
        if (auto status = parts.ReadTag(&field, &wire_type); !status.ok()) return status;
        if (field == 1 && wire_type == kLengthDelimited) {
          auto key = parts.ReadBytes(nullptr);
          if (!key.ok()) return key.status();
          name = *key;
        } else if (field == 2 && wire_type == kLengthDelimited) {
          auto value = parts.ReadBytes(&feature_offset);
          if (!value.ok()) return value.status();
          feature = *value;
        } else if (auto status = parts.Skip(wire_type); !status.ok()) {
          return status;
        }
      }
      if (auto status = visit(name, feature, feature_offset); !status.ok()) return status;
    }
  }
  return absl::OkStatus();
}

absl::Status DecodeFeature(absl::string_view feature, uint64_t offset, FeatureValues* values) {
  values->kind = FeatureKind::kEmpty;
  values->bytes.clear();
  values->floats.clear();
  values->int64s.clear();
  WireReader reader(feature, offset);
  while (!reader.done()) {
    uint32_t field, wire_type;
    if (auto status = reader.ReadTag(&field, &wire_type); !status.ok()) return status;
    if (wire_type != kLengthDelimited || field < 1 || field > 3) {
      if (auto status = reader.Skip(wire_type); !status.ok()) return status;
      continue;
    }
    uint64_t list_offset = 0;
    auto list = reader.ReadBytes(&list_offset);
    if (!list.ok()) return list.status();
    absl::Status status;
    if (field == 1) {
      SwitchKind(values, FeatureKind::kBytes);
      status = DecodeBytesList(*list, list_offset, values);
    } else if (field == 2) {
      SwitchKind(values, FeatureKind::kFloat);
      status = DecodeFloatList(*list, list_offset, values);
    } else {
      SwitchKind(values, FeatureKind::kInt64);
      status = DecodeInt64List(*list, list_offset, values);
    }
    if (!status.ok()) return status;
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> EncodeExample(const Element& element,
                                          const ExampleEncodeOptions& options) {
  std::string features;
  for (const auto& [name, tensor] : element.fields()) {
    auto feature = EncodeFeature(name, tensor, options);
    if (!feature.ok()) return feature.status();
    std::string entry;
    PutBytesField(1, name, &entry);
    PutBytesField(2, *feature, &entry);
    PutBytesField(1, entry, &features);
  }
  std::string example;
  PutBytesField(1, features, &example);
  return example;
}

}  // namespace sluice::pipeline
