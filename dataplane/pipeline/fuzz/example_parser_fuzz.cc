// Fuzz target: the tf.train.Example wire decoder and the parse_example op.
//
// Properties checked: decoding never crashes; bytes values view the input; a successfully decoded
// Example re-encoded with EncodeExample (packed and unpacked) decodes to the same values; the
// parse_example op either fails with a message or produces tensors of the declared types.
#include <cstdint>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "dataplane/pipeline/fuzz/fuzz_check.h"
#include "dataplane/pipeline/tfrecord/example.h"
#include "dataplane/pipeline/tfrecord/parse_example.h"

namespace {

using namespace sluice::pipeline;  // NOLINT: a fuzz target

using Decoded = std::map<std::string, FeatureValues>;

absl::Status DecodeAll(absl::string_view record, Decoded& out) {
  return ForEachFeature(record, [&](absl::string_view name, absl::string_view feature,
                                    uint64_t offset) {
    FeatureValues values;
    if (auto status = DecodeFeature(feature, offset, &values); !status.ok()) return status;
    out[std::string(name)] = std::move(values);  // the last occurrence wins
    return absl::OkStatus();
  });
}

bool SameFloats(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * 4) == 0);
}

const ParseExampleOp& Op() {
  static const ParseExampleOp* op = [] {
    std::vector<ExampleFeatureSpec> specs;
    specs.push_back({"a", DType::kString, std::nullopt, std::nullopt, /*required=*/false});
    specs.push_back({"b", DType::kInt64, std::nullopt, std::nullopt, /*required=*/false});
    specs.push_back({"c", DType::kFloat32, Shape{-1, 2}, std::nullopt, /*required=*/false});
    return new ParseExampleOp("record", std::move(specs), /*keep_record=*/false);
  }();
  return *op;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string record(reinterpret_cast<const char*>(data), size);
  Decoded decoded;
  const absl::Status status = DecodeAll(record, decoded);
  if (!status.ok()) {
    FUZZ_CHECK(std::string(status.message()).find("byte offset") != std::string::npos,
               "decode error without an offset: %s", std::string(status.message()).c_str());
  } else {
    Element element;
    for (const auto& [name, values] : decoded) {
      for (absl::string_view bytes : values.bytes) {
        FUZZ_CHECK(bytes.data() >= record.data() &&
                       bytes.data() + bytes.size() <= record.data() + record.size(),
                   "bytes value outside the record");
      }
      const auto n = static_cast<int64_t>(values.size());
      switch (values.kind) {
        case FeatureKind::kBytes:
          element.Set(name, Tensor::Strings(nullptr, values.bytes, Shape{n}));
          break;
        case FeatureKind::kInt64: {
          Tensor tensor = Tensor::Allocate(DType::kInt64, Shape{n});
          if (n > 0) std::memcpy(tensor.mutable_raw(), values.int64s.data(), n * sizeof(int64_t));
          element.Set(name, tensor);
          break;
        }
        case FeatureKind::kFloat: {
          Tensor tensor = Tensor::Allocate(DType::kFloat32, Shape{n});
          if (n > 0) std::memcpy(tensor.mutable_raw(), values.floats.data(), n * sizeof(float));
          element.Set(name, tensor);
          break;
        }
        case FeatureKind::kEmpty:
          break;  // an Example cannot say "empty feature" through EncodeExample
      }
    }
    for (bool packed : {true, false}) {
      auto encoded = EncodeExample(element, {.packed = packed});
      FUZZ_CHECK(encoded.ok(), "EncodeExample failed: %s",
                 std::string(encoded.status().message()).c_str());
      Decoded again;
      const absl::Status round_trip = DecodeAll(*encoded, again);
      FUZZ_CHECK(round_trip.ok(), "re-encoded Example does not decode: %s",
                 std::string(round_trip.message()).c_str());
      for (const auto& [name, values] : decoded) {
        if (values.kind == FeatureKind::kEmpty) continue;
        auto it = again.find(name);
        FUZZ_CHECK(it != again.end(), "feature lost in the round trip");
        const FeatureValues& other = it->second;
        // An empty list re-encodes as a feature with an empty list of the same kind.
        FUZZ_CHECK(other.kind == values.kind || (values.size() == 0 && other.size() == 0),
                   "kind changed in the round trip");
        FUZZ_CHECK(other.int64s == values.int64s, "int64 values changed");
        FUZZ_CHECK(SameFloats(other.floats, values.floats), "float values changed");
        FUZZ_CHECK(other.bytes == values.bytes, "bytes values changed");
      }
    }
  }

  Element element;
  element.Set("record", Tensor::StringScalar(record));
  const absl::Status applied = Op().Apply(element, 0);
  if (applied.ok()) {
    FUZZ_CHECK(element.Find("record") == nullptr, "record kept");
    if (const Tensor* a = element.Find("a")) FUZZ_CHECK(a->dtype() == DType::kString, "a dtype");
    if (const Tensor* b = element.Find("b")) FUZZ_CHECK(b->dtype() == DType::kInt64, "b dtype");
    if (const Tensor* c = element.Find("c")) {
      FUZZ_CHECK(c->dtype() == DType::kFloat32 && c->rank() == 2 && c->shape()[1] == 2,
                 "c dtype or shape");
    }
  } else {
    FUZZ_CHECK(!applied.message().empty(), "error without a message");
  }
  return 0;
}
