#include "dataplane/client/element_decoder.h"

#include <catch2/catch.hpp>

#include "dataplane/pipeline/element_codec.h"

namespace sluice::client {
namespace {

pipeline::Element MakeElement(int64_t n) {
  pipeline::Element e;
  pipeline::Tensor t = pipeline::Tensor::Allocate(pipeline::DType::kInt32, {n});
  for (int64_t i = 0; i < n; ++i) t.mutable_data<int32_t>()[i] = static_cast<int32_t>(i % 7);
  e.Set("x", std::move(t));
  e.Set("name", pipeline::Tensor::StringScalar(std::string("hello")));
  e.set_key(42);
  return e;
}

service::ElementData Wire(const pipeline::Element& e, pipeline::Codec codec, service::Compression label) {
  std::string bytes = pipeline::EncodeElement(e);
  service::ElementData d;
  d.set_uncompressed_size(bytes.size());
  d.set_compression(label);
  d.set_data(*pipeline::Compress(bytes, codec));
  return d;
}

TEST_CASE("client_decoder: decodes every codec to the same element") {
  const pipeline::Element e = MakeElement(5000);
  const std::pair<pipeline::Codec, service::Compression> codecs[] = {
      {pipeline::Codec::kNone, service::COMPRESSION_NONE},
      {pipeline::Codec::kLz4, service::COMPRESSION_LZ4},
      {pipeline::Codec::kZstd, service::COMPRESSION_ZSTD}};
  for (const auto& [codec, label] : codecs) {
    service::ElementData d = Wire(e, codec, label);
    auto got = DecodeElementData(d, 1 << 30);
    REQUIRE(got.ok());
    CHECK(got->bytes == pipeline::EncodeElement(e).size());
    CHECK(got->element.key() == 42);
    const pipeline::Tensor* x = got->element.Find("x");
    REQUIRE(x != nullptr);
    REQUIRE(x->num_elements() == 5000);
    CHECK(x->data<int32_t>()[4999] == 4999 % 7);
    CHECK(got->element.Find("name")->strings()[0] == "hello");
    CHECK(d.data().empty());  // consumed
  }
}

TEST_CASE("client_decoder: uncompressed bytes are moved, not copied") {
  service::ElementData d = Wire(MakeElement(100), pipeline::Codec::kNone, service::COMPRESSION_NONE);
  const char* before = d.data().data();
  auto got = DecodeElementData(d, 1 << 30);
  REQUIRE(got.ok());
  const pipeline::Tensor* x = got->element.Find("x");
  // The tensor views the very buffer that arrived (a 64-byte aligned offset into it).
  const auto* owner = static_cast<const std::string*>(x->buffer().owner.get());
  CHECK(owner->data() == before);
  CHECK(reinterpret_cast<const char*>(x->raw()) >= before);
}

TEST_CASE("client_decoder: hostile input gives clear errors") {
  const pipeline::Element e = MakeElement(5000);
  SECTION("garbage bytes") {
    service::ElementData d;
    d.set_data("not an element at all");
    d.set_uncompressed_size(d.data().size());
    d.set_compression(service::COMPRESSION_NONE);
    auto got = DecodeElementData(d, 1 << 30);
    REQUIRE_FALSE(got.ok());
    CHECK(got.status().code() == absl::StatusCode::kInvalidArgument);
    CHECK_THAT(std::string(got.status().message()), Catch::Contains("bad magic"));
  }
  SECTION("uncompressed size lies (NONE)") {
    service::ElementData d = Wire(e, pipeline::Codec::kNone, service::COMPRESSION_NONE);
    d.set_uncompressed_size(d.uncompressed_size() + 1);
    auto got = DecodeElementData(d, 1 << 30);
    REQUIRE_FALSE(got.ok());
    CHECK_THAT(std::string(got.status().message()), Catch::Contains("declares uncompressed_size"));
  }
  SECTION("uncompressed size lies (lz4, too small and too large)") {
    for (int delta : {-1, 1}) {
      service::ElementData d = Wire(e, pipeline::Codec::kLz4, service::COMPRESSION_LZ4);
      d.set_uncompressed_size(d.uncompressed_size() + delta);
      auto got = DecodeElementData(d, 1 << 30);
      REQUIRE_FALSE(got.ok());
      CHECK_THAT(std::string(got.status().message()), Catch::Contains("cannot decompress"));
    }
  }
  SECTION("huge declared size is refused before allocating") {
    service::ElementData d = Wire(e, pipeline::Codec::kZstd, service::COMPRESSION_ZSTD);
    d.set_uncompressed_size(uint64_t{1} << 40);
    auto got = DecodeElementData(d, 1 << 30);
    REQUIRE_FALSE(got.ok());
    CHECK_THAT(std::string(got.status().message()), Catch::Contains("max_element_bytes"));
  }
  SECTION("corrupt compressed bytes") {
    service::ElementData d = Wire(e, pipeline::Codec::kZstd, service::COMPRESSION_ZSTD);
    std::string* data = d.mutable_data();
    for (size_t i = 4; i < data->size(); i += 3) (*data)[i] = static_cast<char>((*data)[i] ^ 0x5a);
    CHECK_FALSE(DecodeElementData(d, 1 << 30).ok());
  }
  SECTION("truncated element") {
    std::string bytes = pipeline::EncodeElement(e);
    bytes.resize(bytes.size() / 2);
    service::ElementData d;
    d.set_uncompressed_size(bytes.size());
    d.set_data(bytes);
    d.set_compression(service::COMPRESSION_NONE);
    auto got = DecodeElementData(d, 1 << 30);
    REQUIRE_FALSE(got.ok());
    CHECK_THAT(std::string(got.status().message()), Catch::Contains("runs past the end"));
  }
  SECTION("AUTO or unknown compression on the wire") {
    for (int c : {static_cast<int>(service::COMPRESSION_AUTO), 99}) {
      service::ElementData d = Wire(e, pipeline::Codec::kNone, service::COMPRESSION_NONE);
      d.set_compression(static_cast<service::Compression>(c));
      auto got = DecodeElementData(d, 1 << 30);
      REQUIRE_FALSE(got.ok());
      CHECK_THAT(std::string(got.status().message()), Catch::Contains("not a concrete codec"));
    }
  }
}

}  // namespace
}  // namespace sluice::client
