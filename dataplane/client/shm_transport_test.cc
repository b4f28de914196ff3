// Same-host shared memory on the client's side: the ring (dataplane/rpc/shm_ring.h) and the
// parser reading elements out of it (element_decoder.h), including a worker that dies and a worker
// that sends offsets outside the ring.
#include <catch2/catch.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>

#include "dataplane/client/element_decoder.h"
#include "dataplane/client/task_readers.h"
#include "dataplane/client/testing/fake_dispatcher.h"
#include "dataplane/client/testing/fake_service_rpc.h"
#include "dataplane/pipeline/element_codec.h"
#include "dataplane/rpc/shm_ring.h"
#include "testing/test_util.h"

namespace sluice::client {
namespace {

pipeline::Element MakeElement(int64_t n) {
  pipeline::Element e;
  pipeline::Tensor t = pipeline::Tensor::Allocate(pipeline::DType::kInt32, {n});
  for (int64_t i = 0; i < n; ++i) t.mutable_data<int32_t>()[i] = static_cast<int32_t>(i % 7);
  e.Set("x", std::move(t));
  e.set_key(42);
  return e;
}

// `bytes` as gRPC hands a message over: split into slices of at most `slice` bytes.
grpc::ByteBuffer Sliced(const std::string& bytes, size_t slice) {
  std::vector<grpc::Slice> slices;
  for (size_t at = 0; at < bytes.size(); at += slice) {
    slices.emplace_back(bytes.data() + at, std::min(slice, bytes.size() - at));  // copies
  }
  return grpc::ByteBuffer(slices.data(), slices.size());
}

// ---------------------------------------------------------------- same-host shared memory

namespace shm_test {

// A response whose elements are in `ring` at `positions` (shm_offset/shm_size set, no data).
std::string ShmResponse(const std::vector<std::pair<uint64_t, uint64_t>>& slots) {
  service::GetElementsResponse m;
  for (const auto& [position, size] : slots) {
    service::ElementData* d = m.add_elements();
    d->set_uncompressed_size(size);
    d->set_compression(service::COMPRESSION_NONE);
    d->set_shm_offset(position);
    d->set_shm_size(size);
  }
  return m.SerializeAsString();
}

// A writer and an attached reader of one ring in a temporary directory.
struct Ring {
  Ring(uint64_t bytes = 1 << 20) {
    auto w = rpc::ShmRingWriter::Create(dir.path().string(), bytes);
    REQUIRE(w.ok());
    writer = *std::move(w);
    auto r = rpc::ShmRingReader::Attach(writer->path(), writer->file_bytes(), writer->nonce());
    REQUIRE(r.ok());
    reader = *std::move(r);
    REQUIRE(writer->Attached());
  }
  // Writes `bytes` into the ring; returns its position.
  uint64_t Put(const std::string& bytes) {
    auto slot = writer->Allocate(bytes.size());
    REQUIRE(slot.has_value());
    std::memcpy(slot->data, bytes.data(), bytes.size());
    return slot->position;
  }
  sluice::testing::TempDir dir;
  std::unique_ptr<rpc::ShmRingWriter> writer;
  std::shared_ptr<rpc::ShmRingReader> reader;
};

}  // namespace shm_test

TEST_CASE("client_parser: elements in a shared-memory ring are views, released to the worker when dropped") {
  shm_test::Ring ring;
  // Attaching unlinked the file: neither side's death can leave it behind.
  CHECK(ring.writer->unlinked());
  CHECK(!std::filesystem::exists(ring.writer->path()));
  const pipeline::Element e = MakeElement(20000);  // 80 KB
  const std::string bytes = pipeline::EncodeElement(e);
  const uint64_t a = ring.Put(bytes);
  const uint64_t b = ring.Put(bytes);
  const uint64_t c = ring.Put(bytes);
  CHECK(ring.writer->consumed() == 0);
  ResponseParser parser(1 << 30, nullptr);
  parser.set_shm(ring.reader.get());
  const int64_t received_before = rpc::ShmElementsReceived();
  const int64_t held_before = rpc::ShmElementsHeld();
  ParsedResponse out;
  const absl::Status parsed = parser.Parse(
      Sliced(shm_test::ShmResponse({{a, bytes.size()}, {b, bytes.size()}, {c, bytes.size()}}), 100), &out);
  INFO(parsed.ToString());
  REQUIRE(parsed.ok());
  REQUIRE(out.elements.size() == 3);
  CHECK(rpc::ShmElementsReceived() - received_before == 3);
  CHECK(rpc::ShmElementsHeld() - held_before == 3);
  auto in_ring = [&](const DecodedElement& d) {
    const char* p = reinterpret_cast<const char*>(d.element.Find("x")->raw());
    const auto view = ring.reader->View(0, ring.reader->data_bytes());
    return p >= view->data() && p < view->data() + view->size();
  };
  for (const DecodedElement& d : out.elements) {
    CHECK(d.element.key() == 42);
    CHECK(d.element.Find("x")->data<int32_t>()[19999] == 19999 % 7);
    CHECK(in_ring(d));  // no copy: the tensor points into the ring
    CHECK(rpc::IsShmRingView(d.element.Find("x")->buffer().owner));
  }
  CHECK(ring.reader->held_slots() == 3);
  CHECK(ring.reader->held_span() == c + bytes.size() - a);
  // Held elements keep their slots: nothing is released yet.
  CHECK(ring.writer->consumed() == 0);
  // Out of order: dropping the middle one frees nothing (the first still holds the ring's start);
  // then the first: everything up to the third, which is still held.
  pipeline::Tensor keep_c = *out.elements[2].element.Find("x");  // a copy of a tensor holds the slot too
  out.elements[1] = DecodedElement();
  CHECK(ring.writer->consumed() == 0);
  out.elements[0] = DecodedElement();
  CHECK(ring.writer->consumed() == c);
  out.elements.clear();
  CHECK(ring.writer->consumed() == c);
  CHECK(keep_c.data<int32_t>()[19999] == 19999 % 7);
  keep_c = pipeline::Tensor();
  CHECK(ring.writer->consumed() == ring.writer->allocated());  // the worker may reuse everything
  CHECK(ring.reader->held_slots() == 0);
  CHECK(!rpc::IsShmRingView(MakeElement(3).Find("x")->buffer().owner));
}

TEST_CASE("client_parser: a fork() child dropping its copy of a held element does not free the parent's slot") {
  shm_test::Ring ring;
  const std::string bytes = pipeline::EncodeElement(MakeElement(20000));
  const uint64_t at = ring.Put(bytes);
  ResponseParser parser(1 << 30, nullptr);
  parser.set_shm(ring.reader.get());
  ParsedResponse out;
  REQUIRE(parser.Parse(Sliced(shm_test::ShmResponse({{at, bytes.size()}}), 4096), &out).ok());
  REQUIRE(out.elements.size() == 1);
  const pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    out.elements.clear();  // the child's copy of the element goes
    _exit(ring.writer->consumed() == 0 ? 0 : 1);
  }
  int status = 0;
  REQUIRE(waitpid(child, &status, 0) == child);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  CHECK(ring.writer->consumed() == 0);  // still held by this process
  out.elements.clear();
  CHECK(ring.writer->consumed() == ring.writer->allocated());
}

TEST_CASE("client_parser: past the view limit elements are copied out of the ring and released at once") {
  shm_test::Ring ring;
  const std::string bytes = pipeline::EncodeElement(MakeElement(20000));
  ResponseParser parser(1 << 30, nullptr);
  parser.set_shm(ring.reader.get());
  // Room for two held elements' span.
  parser.set_shm_view_limit(2 * bytes.size() + 64);
  const uint64_t a = ring.Put(bytes), b = ring.Put(bytes), c = ring.Put(bytes);
  ParsedResponse out;
  REQUIRE(parser.Parse(Sliced(shm_test::ShmResponse({{a, bytes.size()}, {b, bytes.size()}, {c, bytes.size()}}), 4096),
                       &out)
              .ok());
  REQUIRE(out.elements.size() == 3);
  CHECK(rpc::IsShmRingView(out.elements[0].element.Find("x")->buffer().owner));
  CHECK(rpc::IsShmRingView(out.elements[1].element.Find("x")->buffer().owner));
  CHECK(!rpc::IsShmRingView(out.elements[2].element.Find("x")->buffer().owner));  // a copy
  CHECK(ring.writer->consumed() == 0);  // the copied one is released, but the first is still held
  out.elements.resize(1);
  CHECK(ring.writer->consumed() == 0);
  out.elements.clear();
  CHECK(ring.writer->consumed() == ring.writer->allocated());
  // The copy outlives its slot being overwritten; with nothing held, the next element is a view again.
  const uint64_t d = ring.Put(bytes);
  REQUIRE(parser.Parse(Sliced(shm_test::ShmResponse({{d, bytes.size()}}), 4096), &out).ok());
  REQUIRE(out.elements.size() == 1);
  CHECK(rpc::IsShmRingView(out.elements[0].element.Find("x")->buffer().owner));
}

TEST_CASE("client_parser: a compressed element in the ring is decompressed out of it and released") {
  shm_test::Ring ring;
  const std::string raw = pipeline::EncodeElement(MakeElement(20000));
  auto packed = pipeline::Compress(raw, pipeline::Codec::kLz4);
  REQUIRE(packed.ok());
  const uint64_t at = ring.Put(*packed);
  service::GetElementsResponse m;
  service::ElementData* d = m.add_elements();
  d->set_uncompressed_size(raw.size());
  d->set_compression(service::COMPRESSION_LZ4);
  d->set_shm_offset(at);
  d->set_shm_size(packed->size());
  ResponseParser parser(1 << 30, nullptr);
  parser.set_shm(ring.reader.get());
  ParsedResponse out;
  REQUIRE(parser.Parse(Sliced(m.SerializeAsString(), 4096), &out).ok());
  REQUIRE(out.elements.size() == 1);
  CHECK(!rpc::IsShmRingView(out.elements[0].element.Find("x")->buffer().owner));
  CHECK(out.elements[0].element.Find("x")->data<int32_t>()[19999] == 19999 % 7);
  CHECK(ring.writer->consumed() == ring.writer->allocated());
  // Corrupt compressed bytes: an error, and the slot is released all the same.
  const uint64_t bad_at = ring.Put(std::string(packed->size(), 'z'));
  d->set_shm_offset(bad_at);
  out.elements.clear();
  CHECK(absl::IsInvalidArgument(parser.Parse(Sliced(m.SerializeAsString(), 4096), &out)));
  CHECK(ring.writer->consumed() == ring.writer->allocated());
}

TEST_CASE("client_parser: a worker killed mid-stream leaves the client's mapping readable") {
  shm_test::Ring ring;
  const std::string bytes = pipeline::EncodeElement(MakeElement(10000));
  const uint64_t at = ring.Put(bytes);
  ring.writer.reset();  // the worker's process ends: its mapping is gone, the file was unlinked at attach
  ParsedResponse out;
  {
    ResponseParser parser(1 << 30, nullptr);
    parser.set_shm(ring.reader.get());
    const absl::Status parsed = parser.Parse(Sliced(shm_test::ShmResponse({{at, bytes.size()}}), 1 << 20), &out);
    INFO(parsed.ToString());
    REQUIRE(parsed.ok());
  }
  REQUIRE(out.elements.size() == 1);
  CHECK(out.elements[0].element.Find("x")->data<int32_t>()[9999] == 9999 % 7);
  // The stream ends too (its reader drops the ring): the view keeps the mapping.
  std::weak_ptr<rpc::ShmRingReader> weak = ring.reader;
  ring.reader.reset();
  CHECK(!weak.expired());
  CHECK(out.elements[0].element.Find("x")->data<int32_t>()[9999] == 9999 % 7);
  out.elements.clear();
  CHECK(weak.expired());  // the last view gone: unmapped
}

TEST_CASE("client_parser: malformed shared-memory offsets are errors naming the field, never reads outside") {
  shm_test::Ring ring(1 << 20);
  const uint64_t size = ring.reader->data_bytes();
  ResponseParser parser(1 << 30, nullptr);
  auto parse = [&](const std::string& message) {
    ParsedResponse out;
    return parser.Parse(Sliced(message, 4096), &out);
  };
  SECTION("without a ring") {
    ResponseParser no_ring(1 << 30, nullptr);
    ParsedResponse out;
    absl::Status s = no_ring.Parse(Sliced(shm_test::ShmResponse({{0, 100}}), 4096), &out);
    CHECK(absl::IsInvalidArgument(s));
    CHECK(s.message().find("no shared-memory ring") != std::string::npos);
  }
  parser.set_shm(ring.reader.get());
  const std::pair<uint64_t, uint64_t> bad[] = {
      {size - 10, 100},                    // runs past the end of the ring
      {0, size + 1},                       // larger than the ring
      {~uint64_t{0}, 4096},                // a huge position (offset near the end)
      {size * 3 - 1, 2},                   // wraps
  };
  for (const auto& [position, length] : bad) {
    INFO("position " << position << " size " << length);
    absl::Status s = parse(shm_test::ShmResponse({{position, length}}));
    CHECK(absl::IsInvalidArgument(s));
    CHECK(s.message().find("ElementData.shm_offset") != std::string::npos);
  }
  // Both data and shm_size, and a size above max_element_bytes.
  service::GetElementsResponse both;
  both.add_elements()->set_data("abc");
  both.mutable_elements(0)->set_shm_size(3);
  CHECK(parse(both.SerializeAsString()).message().find("both data and shm_size") != std::string::npos);
  ResponseParser small(1000, nullptr);
  small.set_shm(ring.reader.get());
  ParsedResponse out;
  CHECK(small.Parse(Sliced(shm_test::ShmResponse({{0, 5000}}), 4096), &out).message().find("ElementData.shm_size 5000") !=
        std::string::npos);
}

TEST_CASE("client_parser: the stream's shm_ring announcement is handed back") {
  service::GetElementsResponse hello;
  hello.mutable_shm_ring()->set_path("/dev/shm/sluice-shm-1-ab");
  hello.mutable_shm_ring()->set_file_bytes(8192);
  ResponseParser parser(1 << 30, nullptr);
  ParsedResponse out;
  REQUIRE(parser.Parse(Sliced(hello.SerializeAsString(), 7), &out).ok());
  service::ShmRing ring;
  REQUIRE(ring.ParseFromString(out.shm_ring));
  CHECK(ring.path() == "/dev/shm/sluice-shm-1-ab");
  CHECK(out.elements.empty());
}

TEST_CASE("shm ring: attaching needs the very file the worker announced") {
  sluice::testing::TempDir dir;
  auto w = rpc::ShmRingWriter::Create(dir.path().string(), 1 << 20);
  REQUIRE(w.ok());
  const std::string wrong_nonce(16, 'x');
  auto r = rpc::ShmRingReader::Attach((*w)->path(), (*w)->file_bytes(), wrong_nonce);
  CHECK(absl::IsFailedPrecondition(r.status()));
  CHECK(!(*w)->Attached());  // a reader of the wrong ring does not attach the right one
  CHECK(rpc::ShmRingReader::Attach((*w)->path(), (*w)->file_bytes() + 4096, (*w)->nonce()).status().message().find(
            "ShmRing.file_bytes") != std::string::npos);
  // Another mount namespace (here: a name that does not exist) cannot attach.
  CHECK(absl::IsNotFound(
      rpc::ShmRingReader::Attach(dir.File("sluice-shm-1-00"), (*w)->file_bytes(), (*w)->nonce()).status()));
  CHECK(absl::IsInvalidArgument(rpc::ShmRingReader::Attach("/etc/passwd", (*w)->file_bytes(), (*w)->nonce()).status()));
  // Not attached: nothing is allocated (the worker keeps sending bytes), and the file stays sparse
  // until the writer goes, which removes it.
  CHECK(!(*w)->Allocate(100).has_value());
  const std::string path = (*w)->path();
  CHECK(std::filesystem::exists(path));
  w->reset();
  CHECK(!std::filesystem::exists(path));
}

TEST_CASE("shm ring: the worker's streaming copy into the ring copies every byte, at any alignment") {
  std::string src(80000, '\0');
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<char>((i * 131 + 7) % 251);
  std::vector<char> dst(src.size() + 64);
  for (size_t size : {size_t{0}, size_t{1}, size_t{100}, size_t{4095}, size_t{4096}, size_t{4097}, size_t{70001}}) {
    for (size_t dst_at : {0, 1, 8, 15, 16, 33}) {
      for (size_t src_at : {0, 3, 16}) {
        INFO("size " << size << " dst offset " << dst_at << " src offset " << src_at);
        std::fill(dst.begin(), dst.end(), 'q');
        rpc::CopyIntoShmRing(dst.data() + dst_at, src.data() + src_at, size);
        rpc::ShmRingStoreFence();
        CHECK(std::memcmp(dst.data() + dst_at, src.data() + src_at, size) == 0);
        CHECK(std::count(dst.begin(), dst.begin() + dst_at, 'q') == static_cast<long>(dst_at));  // nothing before
        CHECK(dst[dst_at + size] == 'q');                                                         // nor after
      }
    }
  }
}

TEST_CASE("shm ring: allocation never wraps a slot, and stops at what the reader has not released") {
  shm_test::Ring ring(1 << 20);
  const uint64_t n = ring.writer->data_bytes();
  auto a = ring.writer->Allocate(n / 2);
  auto b = ring.writer->Allocate(n / 4);
  REQUIRE(a.has_value());
  REQUIRE(b.has_value());
  CHECK(!ring.writer->Allocate(n / 2).has_value());  // only a quarter is free: the ring is full
  ring.reader->Release(a->position + n / 2);
  // Half a ring free at the start, a quarter at the end: the slot skips the end rather than wrap.
  auto c = ring.writer->Allocate(n / 2);
  REQUIRE(c.has_value());
  CHECK(c->position == n);
  CHECK(c->position % n == 0);
  CHECK(!ring.writer->Allocate(64).has_value());
  ring.reader->Release(c->position + n / 2);
  CHECK(ring.writer->Allocate(n / 2).has_value());  // exactly to the end
  CHECK(!ring.writer->Allocate(n + 1).has_value());
  // A client cannot claim more than was allocated.
  ring.reader->Release(~uint64_t{0} - 5);
  CHECK(ring.writer->consumed() == ring.writer->allocated());
}

// ---------------------------------------------------------------- through TaskReaderSet

struct ReaderFixture {
  ReaderFixture()
      : queue(ElementQueue::Limits{1 << 20, 64}, [] { return absl::Now(); }, [this] { readers->StopAll(); }) {
    TaskReaderSet::Options o;
    o.job_client_id = 7;
    o.target_workers = service::TARGET_WORKERS_ANY;
    o.client_host = "trainer";
    o.initial_backoff = absl::Milliseconds(1);
    o.max_backoff = absl::Milliseconds(4);
    readers = std::make_unique<TaskReaderSet>(o, &workers, &queue, BufferPool::Create(8, 1 << 20));
  }
  ~ReaderFixture() {
    readers->StopAll();
    readers->JoinAll();
  }
  std::pair<std::vector<int64_t>, absl::Status> Drain() {
    std::vector<int64_t> out;
    while (true) {
      auto next = queue.Pop(absl::Seconds(30));
      if (!next.ok()) return {out, next.status()};
      if (!next->has_value()) return {out, absl::OkStatus()};
      out.push_back(*(*next)->Find("v")->AsInt64());
    }
  }
  testing::FakeWorkerRpc workers;
  ElementQueue queue;
  std::unique_ptr<TaskReaderSet> readers;
};

service::GetElementsResponse Hello(const std::string& path, uint64_t file_bytes, const std::string& nonce) {
  service::GetElementsResponse hello;
  hello.mutable_shm_ring()->set_path(path);
  hello.mutable_shm_ring()->set_file_bytes(file_bytes);
  hello.mutable_shm_ring()->set_nonce(nonce);
  return hello;
}

TEST_CASE("client_task_readers: a stream's ring is attached, its elements read out of it and released") {
  sluice::testing::TempDir dir;
  auto writer = rpc::ShmRingWriter::Create(dir.path().string(), 1 << 20);
  REQUIRE(writer.ok());
  ReaderFixture f;
  f.readers->Update({testing::MakeTask(1, "w1:1")}, false);
  f.workers.Send(1, Hello((*writer)->path(), (*writer)->file_bytes(), (*writer)->nonce()));
  REQUIRE(testing::WaitUntil([&] { return (*writer)->Attached(); }));
  service::GetElementsResponse resp = testing::ValuesResponse({5, 6});  // 6 stays bytes
  const std::string bytes = resp.elements(0).data();
  auto slot = (*writer)->Allocate(bytes.size());
  REQUIRE(slot.has_value());
  std::memcpy(slot->data, bytes.data(), bytes.size());
  resp.mutable_elements(0)->clear_data();
  resp.mutable_elements(0)->set_shm_offset(slot->position);
  resp.mutable_elements(0)->set_shm_size(bytes.size());
  resp.set_end_of_sequence(true);
  f.workers.Send(1, resp);
  f.readers->Update({testing::MakeTask(1, "w1:1")}, true);
  auto [values, status] = f.Drain();
  CHECK(status.ok());
  CHECK(values == std::vector<int64_t>{5, 6});
  CHECK((*writer)->consumed() == (*writer)->allocated());
}

TEST_CASE("client_task_readers: a ring that cannot be attached is not progress - a failing worker is not retried forever") {
  ReaderFixture f;
  f.readers->Update({testing::MakeTask(1, "w1:1")}, false);
  // Another container's /dev/shm: the announced file does not exist here. Then INTERNAL, every time.
  for (int i = 0; i < 10; ++i) {
    f.workers.Send(1, Hello("/nonexistent-dir/sluice-shm-1-2-00", 4096 + 4096, std::string(16, 'n')));
    f.workers.Close(1, absl::InternalError("transport hiccup"));
  }
  auto [values, status] = f.Drain();
  CHECK(values.empty());
  CHECK(status.code() == absl::StatusCode::kInternal);
  CHECK(f.workers.streams_opened(1) < 10);
}

}  // namespace
}  // namespace sluice::client
