#include "dataplane/pipeline/element_codec.h"

#include <catch2/catch.hpp>
#include <cstring>
#include <random>

namespace sluice::pipeline {
namespace {

Element Sample() {
  Element e;
  e.set_key(1234);
  Tensor img = Tensor::Allocate(DType::kFloat32, {3, 4, 5});
  for (int i = 0; i < 60; ++i) img.mutable_data<float>()[i] = static_cast<float>(i) * 0.5f;
  e.Set("image", img);
  e.Set("label", Tensor::Scalar(7));
  e.Set("text", Tensor::StringsCopy({"alpha", "", "gamma"}, {3}));
  return e;
}

TEST_CASE("elements round-trip through the codec without copying on decode") {
  auto bytes = std::make_shared<const std::string>(EncodeElement(Sample()));
  auto e = DecodeElement(bytes);
  REQUIRE(e.ok());
  CHECK(e->key() == 1234);
  const Tensor* img = e->Find("image");
  REQUIRE(img != nullptr);
  CHECK(img->shape() == Shape{3, 4, 5});
  CHECK(img->GetAsDouble(59) == 29.5);
  CHECK(reinterpret_cast<uintptr_t>(img->raw()) >= reinterpret_cast<uintptr_t>(bytes->data()));
  CHECK(reinterpret_cast<uintptr_t>(img->raw()) < reinterpret_cast<uintptr_t>(bytes->data() + bytes->size()));
  CHECK(*e->Find("label")->AsInt64() == 7);
  auto strings = e->Find("text")->strings();
  REQUIRE(strings.size() == 3);
  CHECK(strings[0] == "alpha");
  CHECK(strings[1].empty());
  CHECK(strings[2] == "gamma");
}

TEST_CASE("malformed elements are rejected with an offset, never read out of bounds") {
  std::string good = EncodeElement(Sample());
  auto decode = [](std::string s) { return DecodeElement(std::make_shared<const std::string>(std::move(s))); };
  CHECK_FALSE(decode("").ok());
  CHECK_THAT(std::string(decode("XXXXXXXXXXXXXXXX").status().message()), Catch::Contains("bad magic"));
  // Every cut that loses a byte of the last payload (the 10 bytes of "text", then padding).
  for (size_t cut = 0; cut < good.size() - 64 + 10; cut += 7) {
    auto r = decode(good.substr(0, cut));
    CHECK_FALSE(r.ok());
  }
  std::mt19937 rng(1);
  int rejected = 0;
  for (int i = 0; i < 2000; ++i) {
    std::string s = good;
    for (int k = 0; k < 3; ++k) s[rng() % 120] = static_cast<char>(rng());
    auto r = decode(s);  // must not crash; usually rejected
    if (!r.ok()) {
      ++rejected;
      CHECK_THAT(std::string(r.status().message()), Catch::Contains("byte offset"));
    }
  }
  CHECK(rejected > 0);
}

TEST_CASE("compression round-trips and AUTO skips incompressible or tiny data") {
  std::string zeros(100000, '\0');
  std::string noise(100000, '\0');
  std::mt19937 rng(2);
  for (auto& c : noise) c = static_cast<char>(rng());
  CHECK(ChooseCodec(zeros) == Codec::kLz4);
  CHECK(ChooseCodec(noise) == Codec::kNone);
  CHECK(ChooseCodec("tiny") == Codec::kNone);
  for (Codec c : {Codec::kNone, Codec::kLz4, Codec::kZstd}) {
    auto packed = Compress(zeros, c);
    REQUIRE(packed.ok());
    if (c != Codec::kNone) CHECK(packed->size() < zeros.size() / 10);
    auto unpacked = Decompress(*packed, c, zeros.size());
    REQUIRE(unpacked.ok());
    CHECK(*unpacked == zeros);
    CHECK_FALSE(Decompress(*packed, c, zeros.size() + 1).ok());
  }
  CHECK_FALSE(Decompress("garbage", Codec::kLz4, 1000).ok());
  CHECK_FALSE(Decompress("garbage", Codec::kZstd, 1000).ok());
  CHECK_FALSE(Decompress("x", Codec::kNone, uint64_t{1} << 40).ok());
}

TEST_CASE("EncodeElementTo writes EncodeElement's bytes into a caller's buffer") {
  Element big = Sample();
  big.Set("zero", Tensor::Allocate(DType::kInt32, {0}));
  big.Set("odd", Tensor::Allocate(DType::kUInt8, {65}));
  for (const Element& e : {Element(), Sample(), big}) {
    const std::string want = EncodeElement(e);
    REQUIRE(EncodedElementSize(e) == want.size());
    std::string out(want.size() + 1, '\x7f');  // a sentinel after the end
    EncodeElementTo(e, out.data());
    CHECK(out.substr(0, want.size()) == want);
    CHECK(out.back() == '\x7f');
  }
}

TEST_CASE("EncodeElementWire gives EncodeElement's bytes, viewing large payloads without copying") {
  Element e = Sample();
  Tensor big = Tensor::Allocate(DType::kUInt8, {100000});
  for (int i = 0; i < 100000; ++i) big.mutable_data<uint8_t>()[i] = static_cast<uint8_t>(i * 7);
  e.Set("big", big);
  const WireBytes wire = EncodeElementWire(e);
  CHECK(wire.size() == EncodeElement(e).size());
  CHECK(wire.Flatten() == EncodeElement(e));
  // The big payload is one range pointing into the tensor; everything else was gathered into
  // owned buffers around it (header + small fields before, padding after).
  int views = 0;
  for (const auto& r : wire.ranges()) {
    if (r.data == reinterpret_cast<const char*>(big.raw())) {
      ++views;
      CHECK(r.size == 100000);
      CHECK(r.owner == big.buffer().owner);
    }
  }
  CHECK(views == 1);
  CHECK(wire.ranges().size() == 3);
  // Below the threshold everything is copied into one buffer.
  const WireBytes copied = EncodeElementWire(e, 1 << 20);
  CHECK(copied.ranges().size() == 1);
  CHECK(copied.Flatten() == EncodeElement(e));
  // The encoding decodes to the same element.
  auto decoded = DecodeElement(std::make_shared<const std::string>(wire.Flatten()));
  REQUIRE(decoded.ok());
  REQUIRE(decoded->Find("big") != nullptr);
  CHECK(std::memcmp(decoded->Find("big")->raw(), big.raw(), 100000) == 0);
}

TEST_CASE("WireBytes: builder gathers copies, keeps views alive, and flattening moves a sole buffer") {
  auto owner = std::make_shared<std::string>(20000, 'v');
  WireBytes::Builder b;
  b.AppendCopy("ab");
  b.AppendCopy("cd");
  b.AppendView(owner->data(), owner->size(), owner);
  b.AppendZeros(3);
  b.AppendView(owner->data(), 5, owner, /*min_view_bytes=*/16);  // small: copied
  WireBytes w = std::move(b).Finish();
  REQUIRE(w.ranges().size() == 3);
  CHECK(std::string(w.ranges()[0].data, w.ranges()[0].size) == "abcd");
  CHECK(w.ranges()[1].data == owner->data());
  CHECK(w.size() == 4 + 20000 + 3 + 5);
  std::weak_ptr<std::string> watch = owner;
  owner.reset();
  CHECK_FALSE(watch.expired());  // the view keeps it
  const std::string flat = w.Flatten();
  CHECK(flat.substr(0, 4) == "abcd");
  CHECK(flat.substr(20004, 3) == std::string(3, '\0'));
  CHECK(flat.substr(20007) == "vvvvv");
  w = WireBytes();
  CHECK(watch.expired());

  WireBytes one = WireBytes::FromString(std::string(5000, 'x'));
  const char* where = one.ranges()[0].data;
  WireBytes shared = one;  // a copy shares the buffer: flattening must copy
  std::string copy = std::move(one).Flatten();
  CHECK(copy.data() != where);
  std::string moved = std::move(shared).Flatten();
  CHECK(moved.data() == where);
  CHECK(moved == std::string(5000, 'x'));
  CHECK(WireBytes::FromString("").empty());
}

TEST_CASE("ChooseCodec on ranges samples the bulk of the data") {
  Element zeros;
  zeros.Set("x", Tensor::Allocate(DType::kUInt8, {100000}));
  CHECK(ChooseCodec(EncodeElementWire(zeros)) == Codec::kLz4);
  Element noise;
  Tensor t = Tensor::Allocate(DType::kUInt8, {100000});
  std::mt19937 rng(3);
  for (int i = 0; i < 100000; ++i) t.mutable_data<uint8_t>()[i] = static_cast<uint8_t>(rng());
  noise.Set("x", t);
  CHECK(ChooseCodec(EncodeElementWire(noise)) == Codec::kNone);
  CHECK(ChooseCodec(EncodeElementWire(Sample())) == Codec::kNone);  // tiny
  CHECK(ChooseCodec(WireBytes()) == Codec::kNone);
}

}  // namespace
}  // namespace sluice::pipeline
