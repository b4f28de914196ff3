#include "absl/strings/string_view.h"
#include "dataplane/pipeline/tfrecord/example.h"

#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "dataplane/pipeline/op.h"
#include "dataplane/pipeline/tfrecord/parse_example.h"
#include "dataplane/pipeline/tfrecord/tfrecord_test_util.h"

namespace sluice::pipeline {
namespace {

using ::sluice::pipeline::testing::FromHex;

// Produced by `protoc --encode=Example` from a hand-written copy of the Example schema and
//   features { feature { key: "label" value { int64_list { value: [7, -1, 300] } } }
//              feature { key: "image" value { bytes_list { value: ["ab", ""] } } }
//              feature { key: "score" value { float_list { value: [0.5, -2] } } } }
constexpr absl::string_view kReferenceExampleHex =
    "0a460a1a0a056c6162656c12111a0f0a0d07ffffffffffffffffff01ac020a110a05696d61676512080a060a02"
    "61620a000a150a0573636f7265120c120a0a080000003f000000c0";

Value MapOf(std::vector<std::pair<std::string, Value>> entries) {
  Value value;
  value.mutable_map_value();  // an empty map is still a map
  for (auto& [name, item] : entries) {
    NamedValue* entry = value.mutable_map_value()->add_entries();
    entry->set_name(name);
    *entry->mutable_value() = item;
  }
  return value;
}

Value ListOf(std::vector<Value> items) {
  Value value;
  for (auto& item : items) *value.mutable_list_value()->add_values() = item;
  return value;
}

Element ReferenceElement() {
  Element element;
  Tensor label = Tensor::Allocate(DType::kInt64, {3});
  label.mutable_data<int64_t>()[0] = 7;
  label.mutable_data<int64_t>()[1] = -1;
  label.mutable_data<int64_t>()[2] = 300;
  element.Set("label", label);
  element.Set("image", Tensor::StringsCopy({"ab", ""}, {2}));
  Tensor score = Tensor::Allocate(DType::kFloat32, {2});
  score.mutable_data<float>()[0] = 0.5f;
  score.mutable_data<float>()[1] = -2.0f;
  element.Set("score", score);
  return element;
}

// Builds parse_example through the registry from a `features` map and optional extra args.
absl::StatusOr<std::unique_ptr<ElementOp>> MakeOp(Value features,
                                                  std::vector<std::pair<std::string, Value>> extra = {}) {
  static OpRegistry* registry = [] {
    auto* r = new OpRegistry();
    RegisterExampleOps(*r);
    return r;
  }();
  const OpDescriptor* descriptor = registry->Find("parse_example");
  if (descriptor == nullptr) return absl::NotFoundError("parse_example not registered");
  ValueMap map;
  SetArg(map, "features", features);
  for (auto& [name, value] : extra) SetArg(map, name, value);
  if (auto status = ValidateArgs(descriptor->args, map, "map.ops[0]"); !status.ok()) return status;
  return descriptor->factory(Args(map));
}

Element RecordElement(std::string bytes) {
  Element element;
  element.Set("record", Tensor::StringScalar(std::move(bytes)));
  return element;
}

std::vector<int64_t> Int64s(const Tensor& tensor) {
  return std::vector<int64_t>(tensor.data<int64_t>(), tensor.data<int64_t>() + tensor.num_elements());
}

std::vector<float> Floats(const Tensor& tensor) {
  return std::vector<float>(tensor.data<float>(), tensor.data<float>() + tensor.num_elements());
}

std::vector<std::string> Strings(const Tensor& tensor) {
  std::vector<std::string> out;
  for (auto view : tensor.strings()) out.emplace_back(view);
  return out;
}

TEST_CASE("EncodeExample matches protoc's encoding byte for byte", "[example]") {
  auto encoded = EncodeExample(ReferenceElement());
  REQUIRE(encoded.ok());
  CHECK(absl::BytesToHexString(*encoded) == kReferenceExampleHex);
}

TEST_CASE("the reference Example decodes all three kinds", "[example]") {
  const std::string bytes = FromHex(kReferenceExampleHex);
  std::vector<std::string> names;
  FeatureValues label, image, score;
  auto status = ForEachFeature(bytes, [&](absl::string_view name, absl::string_view feature,
                                          uint64_t offset) {
    names.emplace_back(name);
    FeatureValues* target = name == "label" ? &label : name == "image" ? &image : &score;
    return DecodeFeature(feature, offset, target);
  });
  REQUIRE(status.ok());
  CHECK(names == std::vector<std::string>{"label", "image", "score"});
  CHECK(label.kind == FeatureKind::kInt64);
  CHECK(label.int64s == std::vector<int64_t>{7, -1, 300});
  CHECK(image.kind == FeatureKind::kBytes);
  REQUIRE(image.bytes.size() == 2);
  CHECK(image.bytes[0] == "ab");
  CHECK(image.bytes[1].empty());
  // Zero-copy: the bytes value points into the record.
  CHECK(image.bytes[0].data() >= bytes.data());
  CHECK(image.bytes[0].data() < bytes.data() + bytes.size());
  CHECK(score.kind == FeatureKind::kFloat);
  CHECK(score.floats == std::vector<float>{0.5f, -2.0f});
}

TEST_CASE("parse_example produces typed tensors from packed and unpacked lists", "[example]") {
  for (bool packed : {true, false}) {
    INFO("packed " << packed);
    auto encoded = EncodeExample(ReferenceElement(), {.packed = packed});
    REQUIRE(encoded.ok());
    if (!packed) CHECK(*encoded != FromHex(kReferenceExampleHex));
    auto op = MakeOp(MapOf({{"label", StringValue("int64")},
                            {"image", StringValue("bytes")},
                            {"score", MapOf({{"type", StringValue("float")}})}}));
    REQUIRE(op.ok());
    Element element = RecordElement(*encoded);
    const Tensor record = *element.Find("record");
    REQUIRE((*op)->Apply(element, 0).ok());
    CHECK(element.Find("record") == nullptr);  // keep_record defaults to false
    const Tensor* label = element.Find("label");
    REQUIRE(label != nullptr);
    CHECK(label->dtype() == DType::kInt64);
    CHECK(label->shape() == Shape{3});
    CHECK(Int64s(*label) == std::vector<int64_t>{7, -1, 300});
    const Tensor* image = element.Find("image");
    REQUIRE(image != nullptr);
    CHECK(image->dtype() == DType::kString);
    CHECK(Strings(*image) == std::vector<std::string>{"ab", ""});
    // The bytes tensor views the record's memory and shares its owner.
    CHECK(image->buffer().owner == record.buffer().owner);
    CHECK(image->strings()[0].data() >= record.strings()[0].data());
    CHECK(image->strings()[0].data() < record.strings()[0].data() + record.strings()[0].size());
    const Tensor* score = element.Find("score");
    REQUIRE(score != nullptr);
    CHECK(score->dtype() == DType::kFloat32);
    CHECK(Floats(*score) == std::vector<float>{0.5f, -2.0f});
  }
}

TEST_CASE("parse_example shapes: scalar, declared and inferred", "[example]") {
  Element source;
  source.Set("one", Tensor::Scalar(42));
  Tensor grid = Tensor::Allocate(DType::kFloat32, {6});
  for (int i = 0; i < 6; ++i) grid.mutable_data<float>()[i] = static_cast<float>(i);
  source.Set("grid", grid);
  auto encoded = EncodeExample(source);
  REQUIRE(encoded.ok());

  auto op = MakeOp(MapOf({{"one", StringValue("int64")},
                          {"grid", MapOf({{"type", StringValue("float")},
                                          {"shape", ListOf({IntValue(-1), IntValue(3)})}})}}),
                   {{"keep_record", BoolValue(true)}});
  REQUIRE(op.ok());
  Element element = RecordElement(*encoded);
  REQUIRE((*op)->Apply(element, 0).ok());
  CHECK(element.Find("record") != nullptr);
  CHECK(element.Find("one")->shape() == Shape{});
  CHECK(*element.Find("one")->AsInt64() == 42);
  CHECK(element.Find("grid")->shape() == Shape{2, 3});
  CHECK(Floats(*element.Find("grid")) == std::vector<float>{0, 1, 2, 3, 4, 5});

  auto wrong = MakeOp(MapOf({{"grid", MapOf({{"type", StringValue("float")},
                                             {"shape", ListOf({IntValue(4)})}})}}));
  REQUIRE(wrong.ok());
  Element again = RecordElement(*encoded);
  auto status = (*wrong)->Apply(again, 0);
  CHECK(status.code() == absl::StatusCode::kInvalidArgument);
  CHECK_THAT(std::string(status.message()),
             Catch::Contains("feature 'grid' has 6 values but shape [4] needs 4"));
}

TEST_CASE("parse_example missing features: required, optional and defaults", "[example]") {
  Element source;
  source.Set("present", Tensor::Scalar(1));
  const std::string encoded = *EncodeExample(source);

  auto required = MakeOp(MapOf({{"label", StringValue("int64")}}));
  REQUIRE(required.ok());
  Element element = RecordElement(encoded);
  auto status = (*required)->Apply(element, 0);
  CHECK(status.code() == absl::StatusCode::kNotFound);
  CHECK_THAT(std::string(status.message()),
             Catch::Contains("required feature 'label' is missing") &&
                 Catch::Contains("the record has: present"));

  auto optional = MakeOp(MapOf({{"label", MapOf({{"type", StringValue("int64")},
                                                 {"required", BoolValue(false)}})},
                                {"present", StringValue("int64")}}));
  REQUIRE(optional.ok());
  element = RecordElement(encoded);
  REQUIRE((*optional)->Apply(element, 0).ok());
  CHECK(element.Find("label") == nullptr);
  CHECK(element.Find("present") != nullptr);

  auto defaults = MakeOp(MapOf(
      {{"label", MapOf({{"type", StringValue("int64")}, {"default", IntValue(-1)}})},
       {"weights", MapOf({{"type", StringValue("float")},
                          {"shape", ListOf({IntValue(3)})},
                          {"default", FloatValue(0.25)}})},
       {"name", MapOf({{"type", StringValue("bytes")},
                       {"default", ListOf({StringValue("a"), StringValue("b")})}})}}));
  REQUIRE(defaults.ok());
  element = RecordElement(encoded);
  REQUIRE((*defaults)->Apply(element, 0).ok());
  CHECK(Int64s(*element.Find("label")) == std::vector<int64_t>{-1});
  CHECK(element.Find("label")->shape() == Shape{});
  CHECK(Floats(*element.Find("weights")) == std::vector<float>{0.25f, 0.25f, 0.25f});
  CHECK(Strings(*element.Find("name")) == std::vector<std::string>{"a", "b"});
}

TEST_CASE("parse_example type mismatch names the feature and the kind found", "[example]") {
  Element source;
  source.Set("label", Tensor::StringScalar(std::string("cat")));
  auto op = MakeOp(MapOf({{"label", StringValue("int64")}}));
  REQUIRE(op.ok());
  Element element = RecordElement(*EncodeExample(source));
  auto status = (*op)->Apply(element, 0);
  CHECK(status.code() == absl::StatusCode::kInvalidArgument);
  CHECK_THAT(std::string(status.message()),
             Catch::Contains("feature 'label' is declared int64 but the record holds a bytes_list"));
}

TEST_CASE("parse_example input field errors", "[example]") {
  auto op = MakeOp(MapOf({{"x", StringValue("int64")}}), {{"field", StringValue("serialized")}});
  REQUIRE(op.ok());
  Element no_field = RecordElement("");
  auto status = (*op)->Apply(no_field, 0);
  CHECK_THAT(std::string(status.message()), Catch::Contains("no field 'serialized'"));
  Element numeric;
  numeric.Set("serialized", Tensor::Scalar(3));
  status = (*op)->Apply(numeric, 0);
  CHECK_THAT(std::string(status.message()), Catch::Contains("must hold one serialized"));
}

TEST_CASE("malformed Examples give errors with byte offsets", "[example]") {
  auto op = MakeOp(MapOf({{"label", MapOf({{"type", StringValue("int64")},
                                           {"required", BoolValue(false)}})}}));
  REQUIRE(op.ok());
  struct Case {
    std::string name;
    std::string bytes;
    std::string expected;
  };
  const std::string good = *EncodeExample(ReferenceElement());
  const std::vector<Case> cases = {
      {"truncated varint", FromHex("0a"), "byte offset 1: truncated varint"},
      {"length past end", FromHex("0a05aa"), "byte offset 1: length 5 runs past the end"},
      {"field number zero", FromHex("0000"), "byte offset 0: invalid field number 0"},
      {"group wire type", FromHex("0b"), "byte offset 0: unsupported wire type 3"},
      {"invalid wire type", FromHex("0f"), "byte offset 0: invalid wire type 7"},
      {"overlong varint", FromHex("08ffffffffffffffffffff01"), "varint longer than 10 bytes"},
      {"cut in the middle", good.substr(0, 30), "runs past the end"},
  };
  for (const Case& c : cases) {
    INFO(c.name);
    Element element = RecordElement(c.bytes);
    auto status = (*op)->Apply(element, 0);
    CHECK(status.code() == absl::StatusCode::kInvalidArgument);
    CHECK_THAT(std::string(status.message()),
               Catch::Contains("malformed tf.train.Example at byte offset") &&
                   Catch::Contains(c.expected));
  }

  // A packed float list whose length is not a multiple of 4, inside a feature named "label":
  // Example{features{feature{key:"label" value{float_list{value: <3 bytes>}}}}}.
  const std::string feature = FromHex("1205") + FromHex("0a03010203");
  const std::string entry = FromHex("0a05") + "label" + FromHex("12") +
                            std::string(1, static_cast<char>(feature.size())) + feature;
  const std::string features = FromHex("0a") + std::string(1, static_cast<char>(entry.size())) + entry;
  const std::string example = FromHex("0a") + std::string(1, static_cast<char>(features.size())) + features;
  auto floats = MakeOp(MapOf({{"label", StringValue("float")}}));
  REQUIRE(floats.ok());
  Element element = RecordElement(example);
  auto status = (*floats)->Apply(element, 0);
  CHECK_THAT(std::string(status.message()),
             Catch::Contains("feature 'label'") &&
                 Catch::Contains("packed float list of 3 bytes is not a multiple of 4"));
}

TEST_CASE("unknown fields and merged lists follow protobuf semantics", "[example]") {
  // Example with an unknown varint field 2 before features, and one feature "v" whose Int64List
  // arrives in two pieces (packed then unpacked) plus an unknown fixed64 field.
  const std::string list = FromHex("0a020102") + FromHex("0803") + FromHex("11") + std::string(8, 'z');
  const std::string feature = FromHex("1a") + std::string(1, static_cast<char>(list.size())) + list;
  const std::string entry = FromHex("0a0176") + FromHex("12") +
                            std::string(1, static_cast<char>(feature.size())) + feature;
  const std::string features = FromHex("0a") + std::string(1, static_cast<char>(entry.size())) + entry;
  const std::string example = FromHex("1001") + FromHex("0a") +
                              std::string(1, static_cast<char>(features.size())) + features;
  auto op = MakeOp(MapOf({{"v", StringValue("int64")}}));
  REQUIRE(op.ok());
  Element element = RecordElement(example);
  REQUIRE((*op)->Apply(element, 0).ok());
  CHECK(Int64s(*element.Find("v")) == std::vector<int64_t>{1, 2, 3});

  // The same key twice: the last one wins.
  Element first;
  first.Set("k", Tensor::Scalar(1));
  Element second;
  second.Set("k", Tensor::Scalar(2));
  const std::string twice = *EncodeExample(first) + *EncodeExample(second);  // concatenation merges
  element = RecordElement(twice);
  REQUIRE((*MakeOp(MapOf({{"k", StringValue("int64")}})))->Apply(element, 0).ok());
  CHECK(Int64s(*element.Find("k")) == std::vector<int64_t>{2});
}

TEST_CASE("feature spec errors name the feature and key", "[example]") {
  struct Case {
    Value features;
    std::string expected;
  };
  const std::vector<Case> cases = {
      {MapOf({{"a", StringValue("int32")}}), "features.a: unknown type 'int32'"},
      {MapOf({{"a", MapOf({{"typ", StringValue("int64")}})}}), "features.a: unknown key 'typ'"},
      {MapOf({{"a", MapOf({{"required", BoolValue(true)}})}}), "features.a: missing 'type'"},
      {MapOf({{"a", MapOf({{"type", StringValue("int64")}, {"shape", IntValue(3)}})}}),
       "features.a.shape: must be a list"},
      {MapOf({{"a", MapOf({{"type", StringValue("int64")},
                           {"shape", ListOf({IntValue(-1), IntValue(-1)})}})}}),
       "at most one dimension may be -1"},
      {MapOf({{"a", MapOf({{"type", StringValue("int64")}, {"default", StringValue("x")}})}}),
       "features.a.default: 'x' is not a valid int64 value"},
      {MapOf({{"a", MapOf({{"type", StringValue("float")},
                           {"shape", ListOf({IntValue(2)})},
                           {"default", ListOf({FloatValue(1), FloatValue(2), FloatValue(3)})}})}}),
       "features.a.default"},
      {MapOf({{"a", IntValue(3)}}), "features.a: expected a type name"},
      {MapOf({}), "features: must be a non-empty map"},
  };
  for (const Case& c : cases) {
    INFO(c.expected);
    auto op = MakeOp(c.features);
    REQUIRE(!op.ok());
    CHECK(op.status().code() == absl::StatusCode::kInvalidArgument);
    CHECK_THAT(std::string(op.status().message()), Catch::Contains(c.expected));
  }
}

TEST_CASE("EncodeExample covers integer widths and rejects invalid tensors", "[example]") {
  Element element;
  Tensor bytes = Tensor::Allocate(DType::kUInt8, {2});
  bytes.mutable_data<uint8_t>()[0] = 200;
  bytes.mutable_data<uint8_t>()[1] = 3;
  element.Set("u8", bytes);
  Tensor flags = Tensor::Allocate(DType::kBool, {2});
  flags.mutable_data<uint8_t>()[1] = 1;
  element.Set("flags", flags);
  Tensor wide = Tensor::Allocate(DType::kInt64, {1});
  wide.mutable_data<int64_t>()[0] = INT64_MIN;
  element.Set("wide", wide);
  auto encoded = EncodeExample(element);
  REQUIRE(encoded.ok());
  auto op = MakeOp(MapOf({{"u8", StringValue("int64")},
                          {"flags", StringValue("int64")},
                          {"wide", StringValue("int64")}}));
  REQUIRE(op.ok());
  Element parsed = RecordElement(*encoded);
  REQUIRE((*op)->Apply(parsed, 0).ok());
  CHECK(Int64s(*parsed.Find("u8")) == std::vector<int64_t>{200, 3});
  CHECK(Int64s(*parsed.Find("flags")) == std::vector<int64_t>{0, 1});
  CHECK(Int64s(*parsed.Find("wide")) == std::vector<int64_t>{INT64_MIN});

  Element invalid;
  invalid.Set("nothing", Tensor());
  CHECK(EncodeExample(invalid).status().code() == absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace sluice::pipeline
