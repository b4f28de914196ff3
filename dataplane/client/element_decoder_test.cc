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

namespace sluice::client {
namespace {

// `bytes` as gRPC hands a message over: split into slices of at most `slice` bytes.
grpc::ByteBuffer Sliced(const std::string& bytes, size_t slice) {
  std::vector<grpc::Slice> slices;
  for (size_t at = 0; at < bytes.size(); at += slice) {
    slices.emplace_back(bytes.data() + at, std::min(slice, bytes.size() - at));  // copies
  }
  return grpc::ByteBuffer(slices.data(), slices.size());
}

TEST_CASE("client_parser: reads responses across slice boundaries, every codec, small and large elements") {
  service::GetElementsResponse m;
  const int64_t sizes[] = {1, 200, 3000, 20000, 100};
  for (int64_t n : sizes) *m.add_elements() = Wire(MakeElement(n), pipeline::Codec::kNone, service::COMPRESSION_NONE);
  *m.add_elements() = Wire(MakeElement(4000), pipeline::Codec::kLz4, service::COMPRESSION_LZ4);
  *m.add_elements() = Wire(MakeElement(9000), pipeline::Codec::kZstd, service::COMPRESSION_ZSTD);
  m.mutable_elements(2)->set_round(7);  // a field streams do not use: read past
  m.set_end_of_sequence(true);
  const std::string bytes = m.SerializeAsString();
  auto pool = BufferPool::Create(8, 1 << 20);
  for (size_t slice : {size_t{1}, size_t{7}, size_t{4096}, bytes.size()}) {
    INFO("slice " << slice);
    ResponseParser parser(1 << 30, slice == 7 ? nullptr : pool);
    ParsedResponse out;
    REQUIRE(parser.Parse(Sliced(bytes, slice), &out).ok());
    CHECK(out.end_of_sequence);
    REQUIRE(out.elements.size() == 7);
    const int64_t want[] = {1, 200, 3000, 20000, 100, 4000, 9000};
    for (size_t i = 0; i < 7; ++i) {
      const pipeline::Tensor* x = out.elements[i].element.Find("x");
      REQUIRE(x != nullptr);
      CHECK(x->num_elements() == want[i]);
      CHECK(x->GetAsDouble(want[i] - 1) == static_cast<double>((want[i] - 1) % 7));
      // Uncompressed payloads are 64-byte aligned; decompressed ones as malloc aligns.
      CHECK(reinterpret_cast<uintptr_t>(x->raw()) % (i < 5 ? 64 : 16) == 0);
      CHECK(out.elements[i].bytes == pipeline::EncodeElement(MakeElement(want[i])).size());
      CHECK(out.elements[i].element.Find("name")->strings()[0] == "hello");
    }
  }
}

TEST_CASE("client_parser: small elements share a chunk and outlive the parser") {
  std::vector<pipeline::Element> kept;
  {
    ResponseParser parser(1 << 30, nullptr);
    for (int round = 0; round < 3; ++round) {
      service::GetElementsResponse m;
      for (int i = 0; i < 40; ++i) *m.add_elements() = Wire(MakeElement(100 + i), pipeline::Codec::kNone, service::COMPRESSION_NONE);
      ParsedResponse out;
      REQUIRE(parser.Parse(Sliced(m.SerializeAsString(), 1000), &out).ok());
      CHECK_FALSE(out.end_of_sequence);
      REQUIRE(out.elements.size() == 40);
      for (auto& d : out.elements) kept.push_back(std::move(d.element));
    }
  }
  REQUIRE(kept.size() == 120);
  // Elements of one response share their chunk's owner.
  CHECK(kept[0].Find("x")->buffer().owner == kept[1].Find("x")->buffer().owner);
  for (size_t i = 0; i < kept.size(); ++i) {
    const int64_t n = 100 + static_cast<int64_t>(i % 40);
    REQUIRE(kept[i].Find("x")->num_elements() == n);
    CHECK(kept[i].Find("x")->GetAsDouble(n - 1) == static_cast<double>((n - 1) % 7));
  }
}

TEST_CASE("client_parser: malformed messages are errors naming what is wrong, after the elements before them") {
  service::GetElementsResponse m;
  *m.add_elements() = Wire(MakeElement(10), pipeline::Codec::kNone, service::COMPRESSION_NONE);
  const std::string good = m.SerializeAsString();
  auto parse = [](const std::string& bytes, ParsedResponse* out, uint64_t max = 1 << 30) {
    ResponseParser parser(max, nullptr);
    return parser.Parse(Sliced(bytes, 5), out);
  };
  struct Case {
    std::string bytes;
    std::string expect;
    size_t decoded_before;  // the bad element's index
  };
  service::ElementData lying = Wire(MakeElement(10), pipeline::Codec::kNone, service::COMPRESSION_NONE);
  lying.set_uncompressed_size(lying.uncompressed_size() + 1);
  service::ElementData auto_codec = Wire(MakeElement(10), pipeline::Codec::kNone, service::COMPRESSION_AUTO);
  service::ElementData garbage;
  garbage.set_data("not an element");
  garbage.set_compression(service::COMPRESSION_NONE);
  garbage.set_uncompressed_size(14);
  auto with = [&](const service::ElementData& d) {
    service::GetElementsResponse r = m;
    *r.add_elements() = d;
    return r.SerializeAsString();
  };
  const Case cases[] = {
      {good.substr(0, good.size() - 3), "truncated", 0},
      {good + "\x0a\xff", "truncated ElementData", 1},
      {good + "\x0b", "cannot skip field 1 of wire type 3", 1},
      {with(lying), "uncompressed element is", 1},
      {with(auto_codec), "not a concrete codec", 1},
      {with(garbage), "cannot decode element: malformed element", 1},
  };
  for (const Case& c : cases) {
    INFO(c.expect);
    ParsedResponse out;
    absl::Status s = parse(c.bytes, &out);
    REQUIRE_FALSE(s.ok());
    CHECK(s.code() == absl::StatusCode::kInvalidArgument);
    CHECK_THAT(std::string(s.message()), Catch::Contains(c.expect));
    CHECK(out.elements.size() == c.decoded_before);
  }
  ParsedResponse out;
  absl::Status s = parse(good, &out, 100);
  REQUIRE_FALSE(s.ok());
  CHECK_THAT(std::string(s.message()), Catch::Contains("max_element_bytes"));
  // Unknown fields of any wire type are skipped.
  ParsedResponse skipped;
  const std::string unknown = std::string("\x78\x05") + "\x81\x01" + "12345678" + "\x85\x01" + "1234" + "\x82\x01\x02" + "ab";
  REQUIRE(parse(unknown + good, &skipped).ok());
  CHECK(skipped.elements.size() == 1);
}

}  // namespace
}  // namespace sluice::client
