// The worker's side of same-host shared memory (shm_stream.h): what goes into the ring and what
// stays bytes, a full ring, an unwritable directory, another host, stale files.
#include "dataplane/worker/shm_stream.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>

#include <cstring>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "dataplane/rpc/shm_ring.h"
#include "dataplane/worker/worker_flags.h"
#include "testing/test_util.h"

namespace sluice::worker {
namespace {

EncodedElementPtr Element(size_t payload, uint8_t fill) {
  pipeline::Element e;
  pipeline::Tensor t = pipeline::Tensor::Allocate(pipeline::DType::kUInt8, {static_cast<int64_t>(payload)});
  std::memset(t.mutable_data<uint8_t>(), fill, payload);
  e.Set("data", t);
  auto encoded = EncodeForWire(e, service::COMPRESSION_NONE);
  REQUIRE(encoded.ok());
  return *encoded;
}

std::string Flatten(const pipeline::WireBytes& bytes) {
  std::string out;
  for (const auto& r : bytes.ranges()) out.append(r.data, r.size);
  return out;
}

service::GetElementsRequest Offer() {
  service::GetElementsRequest r;
  r.set_task_id(7);
  r.set_shm_boot_id(rpc::ShmBootId());
  return r;
}

// The response as a client's protobuf parser reads it.
service::GetElementsResponse Parse(const ElementsResponse& r) {
  service::GetElementsResponse m;
  REQUIRE(m.ParseFromString(Flatten(EncodeElementsResponse(r))));
  return m;
}

TEST_CASE("shm_stream: after the client attached, large payloads go to the ring, small ones stay bytes") {
  REQUIRE(!rpc::ShmBootId().empty());
  testing::TempDir dir;
  auto stream = ShmStream::Open(ShmConfig{dir.path().string(), 1 << 20}, Offer());
  REQUIRE(stream != nullptr);
  // The hello names the ring.
  const service::GetElementsResponse hello = Parse(stream->Hello());
  CHECK(hello.shm_ring().path() == stream->ring().path());
  CHECK(hello.elements_size() == 0);

  const EncodedElementPtr big = Element(100000, 3);
  const EncodedElementPtr small = Element(1000, 4);
  ElementsResponse r;
  r.elements = {big, small};
  stream->Divert(r);  // not attached yet: bytes
  CHECK(r.elements[0] == big);
  CHECK(stream->diverted() == 0);

  auto reader = rpc::ShmRingReader::Attach(hello.shm_ring().path(), hello.shm_ring().file_bytes(),
                                           hello.shm_ring().nonce());
  REQUIRE(reader.ok());
  r.elements = {big, small, big};
  stream->Divert(r);
  CHECK(stream->diverted() == 2);
  CHECK(r.elements[1] == small);
  CHECK(!std::filesystem::exists(hello.shm_ring().path()));  // unlinked once attached
  const service::GetElementsResponse m = Parse(r);
  REQUIRE(m.elements_size() == 3);
  const std::string want = Flatten(big->bytes);
  for (int i : {0, 2}) {
    const service::ElementData& d = m.elements(i);
    CHECK(d.data().empty());
    CHECK(d.shm_size() == want.size());
    CHECK(d.uncompressed_size() == big->uncompressed_size);
    auto view = (*reader)->View(d.shm_offset(), d.shm_size());
    REQUIRE(view.ok());
    CHECK(*view == want);
  }
  CHECK(m.elements(1).data() == Flatten(small->bytes));
  CHECK(m.elements(1).shm_size() == 0);
}

TEST_CASE("shm_stream: a full ring (a client that stopped consuming) falls back to bytes, then recovers") {
  testing::TempDir dir;
  auto stream = ShmStream::Open(ShmConfig{dir.path().string(), 1 << 20}, Offer());
  REQUIRE(stream != nullptr);
  auto reader = rpc::ShmRingReader::Attach(stream->ring().path(), stream->ring().file_bytes(), stream->ring().nonce());
  REQUIRE(reader.ok());
  const EncodedElementPtr big = Element(300000, 9);
  ElementsResponse r;
  r.elements = {big, big, big, big, big};
  stream->Divert(r);
  CHECK(stream->diverted() == 3);  // 1 MiB holds three
  CHECK(stream->fallbacks() == 2);
  const service::GetElementsResponse m = Parse(r);
  CHECK(m.elements(3).data().size() == big->size());  // sent as bytes: nothing waits for the client
  CHECK(m.elements(4).shm_size() == 0);
  // The client consumes the first two: their space is reused.
  (*reader)->Release(m.elements(1).shm_offset() + m.elements(1).shm_size());
  r.elements = {big, big, big};
  stream->Divert(r);
  CHECK(stream->diverted() == 5);   // in the first two's space
  CHECK(stream->fallbacks() == 3);  // the next would overwrite the third, not consumed yet
}

TEST_CASE("shm_stream: no ring for another host, a client that did not offer, or with shm off") {
  testing::TempDir dir;
  const ShmConfig on{dir.path().string(), 1 << 20};
  service::GetElementsRequest other_host = Offer();
  other_host.set_shm_boot_id("00000000-0000-0000-0000-000000000000");
  CHECK(ShmStream::Open(on, other_host) == nullptr);
  CHECK(ShmStream::Open(on, service::GetElementsRequest()) == nullptr);
  CHECK(ShmStream::Open(ShmConfig{"", 1 << 20}, Offer()) == nullptr);
  CHECK(ShmStream::Open(ShmConfig{dir.path().string(), 0}, Offer()) == nullptr);
  CHECK(std::filesystem::is_empty(dir.path()));
}

TEST_CASE("shm_stream: an unwritable shm directory turns shared memory off with an error naming it") {
  testing::TempDir dir;
  testing::WriteFile(dir.File("not-a-dir"), "x");
  const ShmConfig bad{dir.File("not-a-dir"), 1 << 20};
  absl::Status s = PrepareShmDir(bad);
  CHECK(!s.ok());
  CHECK(s.message().find(dir.File("not-a-dir")) != std::string::npos);
  CHECK(ShmStream::Open(bad, Offer()) == nullptr);  // the stream goes on over the socket
  CHECK(PrepareShmDir(ShmConfig{dir.path().string(), 1 << 20}).ok());
  CHECK(PrepareShmDir(ShmConfig{"", 0}).ok());  // off: nothing to check
}

TEST_CASE("shm_stream: a stream that ends removes its ring, start-up removes those of dead workers only") {
  testing::TempDir dir;
  {
    auto stream = ShmStream::Open(ShmConfig{dir.path().string(), 1 << 20}, Offer());
    REQUIRE(stream != nullptr);
    CHECK(!std::filesystem::is_empty(dir.path()));  // announced, the client never attached (killed)
  }
  CHECK(std::filesystem::is_empty(dir.path()));
  // A ring left by a worker killed before its client attached: a child process that is gone.
  const pid_t child = fork();
  if (child == 0) _exit(0);
  REQUIRE(child > 0);
  REQUIRE(waitpid(child, nullptr, 0) == child);
  auto ring_file = [&](const std::string& ns, pid_t pid) {
    return dir.File(absl::StrCat(rpc::kShmFilePrefix, ns, "-", pid, "-0123456789abcdef0123456789abcdef"));
  };
  const std::string dead = ring_file(rpc::ShmPidNamespace(), child);
  const std::string live = ring_file(rpc::ShmPidNamespace(), getpid());
  // Another container sharing the directory: its pids mean nothing here.
  const std::string foreign = ring_file("1", child);
  const std::string other = dir.File("not-sluice");
  for (const auto& f : {dead, live, foreign, other}) testing::WriteFile(f, "");
  CHECK(rpc::RemoveStaleShmRings(dir.path().string()) == 1);
  CHECK(!std::filesystem::exists(dead));
  CHECK(std::filesystem::exists(live));
  CHECK(std::filesystem::exists(foreign));
  CHECK(std::filesystem::exists(other));
}

TEST_CASE("shm_stream: --shm_dir and --shm_ring_bytes, defaults and bad values") {
  auto parsed = ParseWorkerFlags({"--dispatcher_address=127.0.0.1:1"});
  REQUIRE(parsed.ok());
  CHECK(parsed->flags.shm_dir == "/dev/shm");
  CHECK(parsed->flags.shm_ring_bytes == 32 << 20);
  parsed = ParseWorkerFlags({"--dispatcher_address=127.0.0.1:1", "--shm_dir=", "--shm_ring_bytes=0"});
  REQUIRE(parsed.ok());
  CHECK(!ShmConfig({parsed->flags.shm_dir, 0}).enabled());
  parsed = ParseWorkerFlags({"--dispatcher_address=127.0.0.1:1", "--shm_ring_bytes=4096"});
  REQUIRE(!parsed.ok());
  CHECK(parsed.status().message().find("--shm_ring_bytes") != std::string::npos);
}

}  // namespace
}  // namespace sluice::worker
