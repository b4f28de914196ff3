// ElementBuffer bounds and hand-out, the wire encoding of elements, and cancellation tokens.
#include "dataplane/worker/element_buffer.h"

#include <catch2/catch.hpp>

#include <thread>

#include "dataplane/worker/worker_test_util.h"

namespace sluice::worker {
namespace {

EncodedElementPtr Bytes(size_t n, char fill = 'x') {
  auto e = std::make_shared<EncodedElement>();
  e->bytes = pipeline::WireBytes::FromString(std::string(n, fill));
  e->uncompressed_size = n;
  return e;
}

pipeline::Element IntElement(int64_t v) {
  pipeline::Element e;
  e.Set("value", pipeline::Tensor::Scalar(v));
  return e;
}

pipeline::Element BigElement(size_t n) {
  pipeline::Element e;
  e.Set("data", pipeline::Tensor::Allocate(pipeline::DType::kUInt8, {static_cast<int64_t>(n)}));  // zeros
  e.Set("value", pipeline::Tensor::Scalar(int64_t{7}));
  return e;
}

TEST_CASE("worker_buffer: a full buffer (by elements) makes the producer wait") {
  ElementBuffer buffer(4, 1 << 20);
  for (int i = 0; i < 4; ++i) REQUIRE(buffer.Push(Bytes(10), nullptr));
  CancelToken token;
  bool pushed = true;
  std::thread producer([&] { pushed = buffer.Push(Bytes(10), &token); });
  token.Cancel();  // Push returns false only if it had to wait for room
  producer.join();
  CHECK_FALSE(pushed);
  CHECK(buffer.size() == 4);
  auto batch = buffer.Pop(1, 1 << 20, nullptr);
  REQUIRE(batch.ok());
  CHECK(buffer.Push(Bytes(10), nullptr));
  CHECK(buffer.size() == 4);
}

TEST_CASE("worker_buffer: a producer that waited resumes once about half the buffer was read") {
  // By elements: 8 at most.
  CHECK_FALSE(ProducerMayResume(7, 70, 10, 8, 1 << 20));
  CHECK_FALSE(ProducerMayResume(5, 50, 10, 8, 1 << 20));
  CHECK(ProducerMayResume(4, 40, 10, 8, 1 << 20));
  // By bytes: 1000 at most.
  CHECK_FALSE(ProducerMayResume(2, 600, 100, 100, 1000));
  CHECK(ProducerMayResume(2, 500, 100, 100, 1000));
  CHECK_FALSE(ProducerMayResume(1, 400, 700, 100, 1000));  // half empty, but no room for it
  CHECK(ProducerMayResume(0, 0, 5000, 100, 1000));         // empty: anything goes in

  // And a waiting producer does go on once half was read.
  ElementBuffer buffer(8, 1 << 20);
  for (int i = 0; i < 8; ++i) REQUIRE(buffer.Push(Bytes(10), nullptr));
  std::thread producer([&] { CHECK(buffer.Push(Bytes(10), nullptr)); });
  for (int i = 0; i < 4; ++i) REQUIRE(buffer.Pop(1, 1 << 20, nullptr).ok());
  producer.join();
  CHECK(buffer.size() == 5);
}

TEST_CASE("worker_buffer: min_bytes lets small elements past the element bound, bytes still bound") {
  // 4 elements at most, or 1000 bytes of elements averaging under 250 bytes.
  ElementBuffer buffer(4, 1 << 20, 1000);
  CHECK(buffer.element_bound() == 4);  // nothing pushed yet
  for (int i = 0; i < 10; ++i) REQUIRE(buffer.Push(Bytes(100), nullptr));
  CHECK(buffer.element_bound() == 10);
  CancelToken token;
  bool pushed = true;
  std::thread producer([&] { pushed = buffer.Push(Bytes(100), &token); });
  token.Cancel();  // the 11th had to wait: full at 10
  producer.join();
  CHECK_FALSE(pushed);
  CHECK(buffer.size() == 10);

  // Large elements: the element bound stays.
  ElementBuffer large(4, 1 << 20, 1000);
  for (int i = 0; i < 4; ++i) REQUIRE(large.Push(Bytes(500), nullptr));
  CHECK(large.element_bound() == 4);
  // Compressed elements count by their uncompressed size: a reader may ask for them decompressed.
  ElementBuffer compressed(4, 1 << 20, 1000);
  for (int i = 0; i < 4; ++i) {
    auto e = std::make_shared<EncodedElement>(*Bytes(10));
    e->codec = pipeline::Codec::kLz4;
    e->uncompressed_size = 5000;
    REQUIRE(compressed.Push(e, nullptr));
  }
  CHECK(compressed.element_bound() == 4);
  // Off (0), as before.
  ElementBuffer off(4, 1 << 20, 0);
  for (int i = 0; i < 4; ++i) REQUIRE(off.Push(Bytes(1), nullptr));
  CHECK(off.element_bound() == 4);
  // max_bytes still bounds: 10 elements of 100 bytes allowed by count, 350 bytes by bytes.
  ElementBuffer bytes(4, 350, 1000);
  for (int i = 0; i < 3; ++i) REQUIRE(bytes.Push(Bytes(100), nullptr));
  CancelToken bytes_token;
  std::thread bytes_producer([&] { pushed = bytes.Push(Bytes(100), &bytes_token); });
  bytes_token.Cancel();
  bytes_producer.join();
  CHECK_FALSE(pushed);
  // Tiny elements: at most kMaxElementBound.
  ElementBuffer tiny(4, 1 << 30, size_t{1} << 30);
  REQUIRE(tiny.Push(Bytes(1), nullptr));
  CHECK(tiny.element_bound() == ElementBuffer::kMaxElementBound);
}

TEST_CASE("worker_buffer: bytes bound the buffer, but one oversized element always fits") {
  ElementBuffer buffer(100, 1000);
  REQUIRE(buffer.Push(Bytes(5000), nullptr));  // empty buffer: admitted
  CHECK(buffer.bytes() == 5000);
  CancelToken token;
  bool pushed = true;
  std::thread producer([&] { pushed = buffer.Push(Bytes(10), &token); });
  token.Cancel();
  producer.join();
  CHECK_FALSE(pushed);
  REQUIRE(buffer.Pop(10, 1 << 20, nullptr).ok());
  CHECK(buffer.Push(Bytes(600), nullptr));
  CancelToken token2;
  std::thread producer2([&] { pushed = buffer.Push(Bytes(600), &token2); });
  token2.Cancel();
  producer2.join();
  CHECK_FALSE(pushed);  // 600 + 600 > 1000
}

TEST_CASE("worker_buffer: Pop packs up to max_elements and max_bytes, at least one") {
  ElementBuffer buffer(100, 1 << 20);
  for (int i = 0; i < 10; ++i) REQUIRE(buffer.Push(Bytes(100, static_cast<char>('a' + i)), nullptr));
  auto four = buffer.Pop(4, 1 << 20, nullptr);
  REQUIRE(four.ok());
  CHECK(four->elements.size() == 4);
  CHECK(four->elements[0]->bytes.ranges()[0].data[0] == 'a');
  auto by_bytes = buffer.Pop(100, 250, nullptr);
  REQUIRE(by_bytes.ok());
  CHECK(by_bytes->elements.size() == 2);
  auto tiny = buffer.Pop(100, 1, nullptr);
  REQUIRE(tiny.ok());
  CHECK(tiny->elements.size() == 1);
  CHECK(tiny->elements[0]->bytes.ranges()[0].data[0] == 'g');
  CHECK(buffer.size() == 3);
}

TEST_CASE("worker_buffer: end of sequence after the last element, errors after the buffered ones") {
  ElementBuffer ok_buffer(10, 1 << 20);
  REQUIRE(ok_buffer.Push(Bytes(1), nullptr));
  ok_buffer.Close(absl::OkStatus());
  CHECK_FALSE(ok_buffer.drained());
  auto first = ok_buffer.Pop(10, 1 << 20, nullptr);
  REQUIRE(first.ok());
  CHECK(first->elements.size() == 1);
  CHECK_FALSE(first->end_of_sequence);
  auto end = ok_buffer.Pop(10, 1 << 20, nullptr);
  REQUIRE(end.ok());
  CHECK(end->end_of_sequence);
  CHECK(ok_buffer.drained());

  ElementBuffer failed(10, 1 << 20);
  REQUIRE(failed.Push(Bytes(1), nullptr));
  failed.Close(absl::DataLossError("file.tfrecord: bad crc at offset 12"));
  CHECK(failed.Pop(10, 1 << 20, nullptr).ok());
  auto error = failed.Pop(10, 1 << 20, nullptr);
  REQUIRE_FALSE(error.ok());
  CHECK(absl::IsDataLoss(error.status()));
  CHECK_FALSE(failed.Push(Bytes(1), nullptr));  // closed

  ElementBuffer aborted(10, 1 << 20);
  REQUIRE(aborted.Push(Bytes(1), nullptr));
  aborted.Abort(absl::NotFoundError("deleted"));
  CHECK(absl::IsNotFound(aborted.Pop(10, 1 << 20, nullptr).status()));
}

TEST_CASE("worker_buffer: a waiting reader is woken by cancellation and by close") {
  ElementBuffer buffer(10, 1 << 20);
  CancelToken token;
  absl::Status status;
  std::thread reader([&] { status = buffer.Pop(1, 1 << 20, &token).status(); });
  token.Cancel();
  reader.join();
  CHECK(absl::IsCancelled(status));
  bool end = false;
  std::thread reader2([&] {
    auto b = buffer.Pop(1, 1 << 20, nullptr);
    end = b.ok() && b->end_of_sequence;
  });
  buffer.Close(absl::OkStatus());
  reader2.join();
  CHECK(end);
}

TEST_CASE("worker_encoding: AUTO leaves small elements uncompressed and compresses big compressible ones") {
  auto small = EncodeForWire(IntElement(3), service::COMPRESSION_AUTO);
  REQUIRE(small.ok());
  CHECK((*small)->codec == pipeline::Codec::kNone);
  CHECK((*small)->size() == (*small)->uncompressed_size);
  auto big = EncodeForWire(BigElement(64 << 10), service::COMPRESSION_AUTO);
  REQUIRE(big.ok());
  CHECK((*big)->codec == pipeline::Codec::kLz4);
  CHECK((*big)->size() < (*big)->uncompressed_size / 4);
  auto zstd = EncodeForWire(BigElement(64 << 10), service::COMPRESSION_ZSTD);
  REQUIRE(zstd.ok());
  CHECK((*zstd)->codec == pipeline::Codec::kZstd);
  auto none = EncodeForWire(BigElement(64 << 10), service::COMPRESSION_NONE);
  REQUIRE(none.ok());
  CHECK((*none)->codec == pipeline::Codec::kNone);
  auto bad = EncodeForWire(IntElement(1), static_cast<service::Compression>(77));
  REQUIRE_FALSE(bad.ok());
  CHECK_THAT(std::string(bad.status().message()), Catch::Contains("compression: unknown value 77"));
}

TEST_CASE("worker_encoding: Recode keeps an element in its codec or transcodes it - FillElementData copies") {
  auto encoded = EncodeForWire(BigElement(64 << 10), service::COMPRESSION_LZ4);
  REQUIRE(encoded.ok());
  EncodedElementPtr shared = *encoded;
  auto same = Recode(shared, std::nullopt);
  REQUIRE(same.ok());
  CHECK(*same == shared);  // AUTO: any codec will do
  auto also_same = Recode(shared, pipeline::Codec::kLz4);
  REQUIRE(also_same.ok());
  CHECK(*also_same == shared);

  service::ElementData copied;
  REQUIRE(FillElementData(shared, std::nullopt, &copied).ok());
  CHECK(shared->size() == copied.data().size());  // the shared element keeps its bytes
  CHECK(copied.compression() == service::COMPRESSION_LZ4);
  CHECK(testing::DecodeInt(copied) == 7);

  for (auto [wanted, compression] : std::vector<std::pair<pipeline::Codec, service::Compression>>{
           {pipeline::Codec::kNone, service::COMPRESSION_NONE},
           {pipeline::Codec::kZstd, service::COMPRESSION_ZSTD},
           {pipeline::Codec::kLz4, service::COMPRESSION_LZ4}}) {
    auto recoded = Recode(shared, wanted);
    REQUIRE(recoded.ok());
    CHECK((*recoded)->codec == wanted);
    CHECK((*recoded)->uncompressed_size == shared->uncompressed_size);
    service::ElementData data;
    REQUIRE(FillElementData(shared, wanted, &data).ok());
    CHECK(data.compression() == compression);
    CHECK(testing::DecodeInt(data) == 7);
  }
}

TEST_CASE("worker_encoding: uncompressed elements view the tensors' memory") {
  pipeline::Element e = BigElement(64 << 10);
  auto none = EncodeForWire(e, service::COMPRESSION_NONE);
  REQUIRE(none.ok());
  const pipeline::Tensor* payload = nullptr;
  for (const auto& [name, t] : e.fields()) {
    if (t.nbytes() >= (16 << 10)) payload = &t;
  }
  REQUIRE(payload != nullptr);
  bool viewed = false;
  for (const auto& r : (*none)->bytes.ranges()) {
    viewed = viewed || r.data == reinterpret_cast<const char*>(payload->raw());
  }
  CHECK(viewed);
  CHECK((*none)->bytes.Flatten() == pipeline::EncodeElement(e));
}

TEST_CASE("worker_cancel_token runs callbacks once and not after Unregister") {
  CancelToken token;
  int calls = 0;
  int64_t handle = token.Register([&] { ++calls; });
  int64_t removed = token.Register([&] { calls += 100; });
  token.Unregister(removed);
  CHECK_FALSE(token.cancelled());
  token.Cancel();
  token.Cancel();
  CHECK(calls == 1);
  token.Unregister(handle);
  token.Register([&] { calls += 10; });  // already cancelled: runs at once
  CHECK(calls == 11);
  CHECK(token.WaitFor(absl::Hours(1)));
}

}  // namespace
}  // namespace sluice::worker
