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

TEST_CASE("ReadRawStream counts whole elements from an in-process server, and reports bad requests") {
  RawTransferService service;
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&service);
  auto server = builder.BuildAndStart();
  REQUIRE(server != nullptr);
  const std::string address = absl::StrCat("127.0.0.1:", port);

  ReadWindow window;
  window.skip_elements = 10;
  window.warmup = absl::ZeroDuration();
  window.measure = absl::Milliseconds(20);
  auto t = ReadRawStream(address, Request(1000, 4, 4096), window);
  REQUIRE(t.ok());
  CHECK(t->elements > 0);
  CHECK(t->bytes == t->elements * 1000);
  CHECK(t->seconds >= 0.02);

  auto bad = ReadRawStream(address, Request(0, 4, 4096), window);
  REQUIRE(!bad.ok());
  CHECK(bad.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(bad.status().message().find("element_bytes") != std::string::npos);
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
}

}  // namespace
}  // namespace sluice::bench
