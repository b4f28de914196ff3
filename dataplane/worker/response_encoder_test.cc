#include "dataplane/worker/response_encoder.h"

#include <catch2/catch.hpp>
#include <random>

#include "dataservice.pb.h"

namespace sluice::worker {
namespace {

EncodedElementPtr Element(size_t payload, service::Compression compression, uint8_t seed) {
  pipeline::Element e;
  pipeline::Tensor t = pipeline::Tensor::Allocate(pipeline::DType::kUInt8, {static_cast<int64_t>(payload)});
  std::mt19937 rng(seed);
  // Half noise, half zeros: compressible, but not trivially.
  for (size_t i = 0; i < payload / 2; ++i) t.mutable_data<uint8_t>()[i] = static_cast<uint8_t>(rng());
  e.Set("data", t);
  e.set_key(seed);
  auto encoded = EncodeForWire(e, compression);
  REQUIRE(encoded.ok());
  return *encoded;
}

// What the message built through the generated protobuf code serialises to.
std::string ViaProtobuf(const ElementsResponse& r) {
  service::GetElementsResponse m;
  for (const auto& e : r.elements) REQUIRE(FillElementData(e, std::nullopt, m.add_elements()).ok());
  m.set_end_of_sequence(r.end_of_sequence);
  std::string out;
  REQUIRE(m.SerializeToString(&out));
  return out;
}

TEST_CASE("response_encoder: the same bytes as protobuf's serialisation, payloads as views") {
  ElementsResponse r;
  r.elements.push_back(Element(10, service::COMPRESSION_NONE, 1));         // tiny: copied
  r.elements.push_back(Element(300000, service::COMPRESSION_NONE, 2));     // large: a view
  r.elements.push_back(Element(200000, service::COMPRESSION_LZ4, 3));      // compressed buffer
  r.elements.push_back(Element(70000, service::COMPRESSION_ZSTD, 4));
  r.elements.push_back(Element(0, service::COMPRESSION_NONE, 5));          // an empty tensor
  for (bool eos : {false, true}) {
    r.end_of_sequence = eos;
    const pipeline::WireBytes wire = EncodeElementsResponse(r);
    CHECK(wire.Flatten() == ViaProtobuf(r));
    service::GetElementsResponse parsed;
    REQUIRE(parsed.ParseFromString(wire.Flatten()));
    REQUIRE(parsed.elements_size() == 5);
    CHECK(parsed.end_of_sequence() == eos);
    CHECK(parsed.elements(2).compression() == service::COMPRESSION_LZ4);
    CHECK(parsed.elements(1).uncompressed_size() == r.elements[1]->uncompressed_size);
  }
  // The large uncompressed payload went out as a view of the element's own range.
  const pipeline::WireBytes wire = EncodeElementsResponse(r);
  bool viewed = false;
  for (const auto& range : wire.ranges()) {
    for (const auto& own : r.elements[1]->bytes.ranges()) {
      viewed = viewed || (range.data == own.data && own.size >= (16 << 10));
    }
  }
  CHECK(viewed);
}

TEST_CASE("response_encoder: empty responses, varint sizes across 1- to 4-byte lengths") {
  CHECK(EncodeElementsResponse(ElementsResponse{}).size() == 0);
  ElementsResponse eos;
  eos.end_of_sequence = true;
  CHECK(EncodeElementsResponse(eos).Flatten() == ViaProtobuf(eos));
  for (size_t payload : {1u, 60u, 127u, 128u, 16000u, 16384u, 2100000u}) {
    ElementsResponse r;
    r.elements.push_back(Element(payload, service::COMPRESSION_NONE, 9));
    INFO("payload " << payload);
    CHECK(EncodeElementsResponse(r).Flatten() == ViaProtobuf(r));
    CHECK(EncodeElementsResponse(r, 1).Flatten() == ViaProtobuf(r));
  }
}

}  // namespace
}  // namespace sluice::worker

namespace sluice::worker {
namespace {

pipeline::Element Small(size_t payload, uint8_t seed) {
  pipeline::Element e;
  pipeline::Tensor t = pipeline::Tensor::Allocate(pipeline::DType::kUInt8, {static_cast<int64_t>(payload)});
  for (size_t i = 0; i < payload; ++i) t.mutable_data<uint8_t>()[i] = static_cast<uint8_t>(seed + i);
  e.Set("data", t);
  e.Set("text", pipeline::Tensor::StringsCopy({"a", std::string(seed, 'x')}, {2}));
  e.set_key(seed);
  return e;
}

TEST_CASE("WireEncoder: small elements framed in slabs go out as one range, bytes as protobuf's") {
  ElementsResponse r;
  {
    WireEncoder encoder;  // the elements outlive their encoder
    for (uint8_t i = 0; i < 40; ++i) {
      auto e = encoder.Encode(Small(1000 + i, i), i % 2 ? service::COMPRESSION_NONE : service::COMPRESSION_AUTO);
      REQUIRE(e.ok());
      CHECK(!(*e)->framed.empty());
      CHECK((*e)->codec == pipeline::Codec::kNone);
      CHECK((*e)->bytes.Flatten() == pipeline::EncodeElement(Small(1000 + i, i)));
      r.elements.push_back(*std::move(e));
    }
  }
  r.end_of_sequence = true;
  const pipeline::WireBytes wire = EncodeElementsResponse(r);
  CHECK(wire.Flatten() == ViaProtobuf(r));
  // 40 adjacent entries of one slab: one view, then the copied end_of_sequence.
  REQUIRE(wire.ranges().size() == 2);
  CHECK(wire.ranges()[0].data == r.elements[0]->framed.data());
  service::GetElementsResponse parsed;
  REQUIRE(parsed.ParseFromString(wire.Flatten()));
  REQUIRE(parsed.elements_size() == 40);
  CHECK(parsed.elements(7).uncompressed_size() == r.elements[7]->uncompressed_size);
  CHECK(parsed.elements(7).compression() == service::COMPRESSION_NONE);
}

TEST_CASE("WireEncoder: large, compressed and slab-crossing elements, mixed in one response") {
  WireEncoder encoder;
  ElementsResponse r;
  auto add = [&](const pipeline::Element& e, service::Compression c, bool want_framed) {
    auto encoded = encoder.Encode(e, c);
    REQUIRE(encoded.ok());
    CHECK((*encoded)->framed.empty() == !want_framed);
    r.elements.push_back(*std::move(encoded));
  };
  add(Small(100, 1), service::COMPRESSION_NONE, true);
  add(Small(20000, 2), service::COMPRESSION_NONE, false);  // above kMaxSlabElementBytes
  add(Small(3000, 3), service::COMPRESSION_LZ4, false);    // compressed: its own buffer
  add(Small(5000, 4), service::COMPRESSION_AUTO, false);   // AUTO samples what may compress
  add(Small(100, 5), service::COMPRESSION_NONE, true);
  // Fill the slab past its end: the entries go on in a new slab.
  for (int i = 0; i < 30; ++i) add(Small(15000, static_cast<uint8_t>(i)), service::COMPRESSION_NONE, true);
  for (size_t min_view : {size_t{1}, size_t{16} << 10, size_t{1} << 30}) {
    INFO("min_view_bytes " << min_view);
    CHECK(EncodeElementsResponse(r, min_view).Flatten() == ViaProtobuf(r));
  }
  CHECK_FALSE(encoder.Encode(Small(10, 1), static_cast<service::Compression>(42)).ok());
}

}  // namespace
TEST_CASE("response_encoder: a queued response takes the next one only within the request's bounds") {
  auto batch = [](std::vector<size_t> sizes, bool eos = false) {
    ElementsResponse r;
    for (size_t n : sizes) r.elements.push_back(Element(n, service::COMPRESSION_NONE, static_cast<uint8_t>(n)));
    r.end_of_sequence = eos;
    r.max_elements = 4;
    r.max_bytes = 1000;
    return r;
  };
  ElementsResponse queued = batch({100, 200});
  const size_t bytes = queued.bytes();
  CHECK(bytes == queued.elements[0]->size() + queued.elements[1]->size());
  ElementsResponse two = batch({100, 100});
  CHECK(queued.CanAppend(two, bytes, two.bytes()));                    // 4 elements, under 1000 bytes
  CHECK_FALSE(queued.CanAppend(batch({100, 100, 100}), bytes, 3 * 100 + 3 * 40));  // 5 elements
  ElementsResponse big = batch({700});
  CHECK_FALSE(queued.CanAppend(big, bytes, big.bytes()));              // over max_bytes
  ElementsResponse end = batch({}, true);
  CHECK_FALSE(queued.CanAppend(end, bytes, 0));                        // end_of_sequence goes alone
  CHECK_FALSE(batch({}, true).CanAppend(two, 0, two.bytes()));         // nothing joins the end
  CHECK_FALSE(ElementsResponse().CanAppend(two, 0, two.bytes()));      // an empty response is not queued
}

}  // namespace sluice::worker
