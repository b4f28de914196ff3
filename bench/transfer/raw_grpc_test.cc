#include "bench/transfer/raw_grpc.h"

#include <grpcpp/grpcpp.h>

#include <catch2/catch.hpp>

#include "absl/strings/str_cat.h"

namespace sluice::bench {
namespace {

raw::RawStreamRequest Request(int64_t bytes, int64_t distinct, int64_t max_response) {
  raw::RawStreamRequest r;
  r.set_element_bytes(bytes);
  r.set_distinct_elements(distinct);
  r.set_max_response_bytes(max_response);
  return r;
}

TEST_CASE("ElementsPerMessage packs up to the byte bound, at least one") {
  CHECK(ElementsPerMessage(1024, 1 << 20) == 1024);
  CHECK(ElementsPerMessage(100 * 1024, 1 << 20) == 10);
  CHECK(ElementsPerMessage(2 << 20, 1 << 20) == 1);
  CHECK(ElementsPerMessage(0, 1 << 20) == 1);
}

TEST_CASE("ValidateRawRequest names the bad field") {
  CHECK(ValidateRawRequest(Request(1024, 16, 1 << 20)).ok());
  CHECK(ValidateRawRequest(Request(0, 16, 0)).message().find("element_bytes") != std::string::npos);
  CHECK(ValidateRawRequest(Request(int64_t{65} << 20, 1, 0)).message().find("element_bytes") != std::string::npos);
  CHECK(ValidateRawRequest(Request(1024, 0, 0)).message().find("distinct_elements") != std::string::npos);
  CHECK(ValidateRawRequest(Request(1 << 20, 1024, 0)).message().find("distinct_elements") != std::string::npos);
  CHECK(ValidateRawRequest(Request(1024, 1, -1)).message().find("max_response_bytes") != std::string::npos);
}

TEST_CASE("MakeElements is deterministic, sized, and the elements differ") {
  auto a = MakeElements(100, 3);
  auto b = MakeElements(100, 3);
  REQUIRE(a.size() == 3);
  CHECK(a == b);
  CHECK(a[0].size() == 100);
  CHECK(a[0] != a[1]);
}

// An in-process RawTransfer server on a free loopback port.
struct TestServer {
  explicit TestServer(RawFault fault = RawFault::kNone) : service(fault) {
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(&service);
    server = builder.BuildAndStart();
  }
  ~TestServer() {
    if (server) server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
  }
  std::string address() const { return absl::StrCat("127.0.0.1:", port); }
  RawTransferService service;
  int port = 0;
  std::unique_ptr<grpc::Server> server;
};

ReadWindow ShortWindow() {
  ReadWindow window;
  window.skip_elements = 10;
  window.warmup = absl::ZeroDuration();
  window.measure = absl::Milliseconds(20);
  return window;
}

TEST_CASE("SerializedMessages pack every element, cycling, per_message to a message") {
  auto messages = SerializedMessages(Request(1000, 5, 2000));  // 2 per message: 3 messages
  REQUIRE(messages.size() == 3);
  const auto elements = MakeElements(1000, 5);
  std::vector<std::string> seen;
  for (const std::string& m : messages) {
    raw::RawStreamResponse r;
    REQUIRE(r.ParseFromString(m));
    REQUIRE(r.elements_size() == 2);
    for (const std::string& e : r.elements()) seen.push_back(e);
  }
  CHECK(seen == std::vector<std::string>{elements[0], elements[1], elements[2], elements[3], elements[4], elements[0]});
}

TEST_CASE("RawElementChecker refuses wrong sizes always and wrong bytes when checking contents") {
  const auto request = Request(64, 3, 0);
  const auto elements = MakeElements(64, 3);
  const RawElementChecker sizes_only(request, false);
  const RawElementChecker contents(request, true);
  CHECK(sizes_only.Check(elements[1], 0).ok());
  CHECK(contents.Check(elements[2], 0).ok());
  CHECK(sizes_only.Check(std::string(64, 'x'), 0).ok());
  auto wrong = contents.Check(std::string(64, 'x'), 7);
  CHECK(wrong.code() == absl::StatusCode::kDataLoss);
  CHECK(wrong.message().find("element 7") != std::string::npos);
  CHECK(sizes_only.Check(std::string(63, 'x'), 0).code() == absl::StatusCode::kDataLoss);
}

TEST_CASE("ReadRawStream counts whole elements from an in-process server, and reports bad requests") {
  TestServer server;
  REQUIRE(server.server != nullptr);
  auto t = ReadRawStream(server.address(), Request(1000, 4, 4096), ShortWindow(), /*check_contents=*/true);
  REQUIRE(t.ok());
  CHECK(t->elements > 0);
  CHECK(t->bytes == t->elements * 1000);
  CHECK(t->seconds >= 0.02);

  auto bad = ReadRawStream(server.address(), Request(0, 4, 4096), ShortWindow());
  REQUIRE(!bad.ok());
  CHECK(bad.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(bad.status().message().find("element_bytes") != std::string::npos);
}

TEST_CASE("The baseline delivers the bytes it claims: a server that sends wrong bytes fails the read") {
  // Large elements (one per message) and small ones (many per message) both go through the checks.
  for (int64_t bytes : {int64_t{1000}, int64_t{300 * 1024}}) {
    CAPTURE(bytes);
    {
      TestServer short_elements(RawFault::kShortElements);
      auto t = ReadRawStream(short_elements.address(), Request(bytes, 4, 1 << 20), ShortWindow());
      REQUIRE(!t.ok());
      CHECK(t.status().code() == absl::StatusCode::kDataLoss);
    }
    {
      TestServer corrupt(RawFault::kCorruptBytes);
      auto sizes_only = ReadRawStream(corrupt.address(), Request(bytes, 4, 1 << 20), ShortWindow());
      CHECK(sizes_only.ok());  // right sizes: only the content check can see it
      auto t = ReadRawStream(corrupt.address(), Request(bytes, 4, 1 << 20), ShortWindow(), /*check_contents=*/true);
      REQUIRE(!t.ok());
      CHECK(t.status().code() == absl::StatusCode::kDataLoss);
    }
    TestServer good;
    auto t = ReadRawStream(good.address(), Request(bytes, 4, 1 << 20), ShortWindow(), /*check_contents=*/true);
    REQUIRE(t.ok());
    CHECK(t->bytes == t->elements * bytes);
    CHECK(t->elements > 0);
  }
}

}  // namespace
}  // namespace sluice::bench
