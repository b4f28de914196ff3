#include "dataplane/client/element_queue.h"

#include <catch2/catch.hpp>

#include <atomic>
#include <thread>

#include "dataplane/client/testing/fake_dispatcher.h"

namespace sluice::client {
namespace {

using testing::WaitUntil;

DecodedElement Elem(int64_t v, uint64_t bytes = 100) {
  DecodedElement d;
  d.element.Set("v", pipeline::Tensor::Scalar(v));
  d.bytes = bytes;
  return d;
}

std::vector<DecodedElement> Elems(std::initializer_list<int64_t> values, uint64_t bytes = 100) {
  std::vector<DecodedElement> out;
  for (int64_t v : values) out.push_back(Elem(v, bytes));
  return out;
}

int64_t V(const absl::StatusOr<std::optional<pipeline::Element>>& next) {
  REQUIRE(next.ok());
  REQUIRE(next->has_value());
  return *(*next)->Find("v")->AsInt64();
}

ElementQueue MakeQueue(int64_t max_bytes, int max_requests, std::function<void()> on_fail = nullptr) {
  return ElementQueue(ElementQueue::Limits{max_bytes, max_requests}, [] { return absl::Now(); }, std::move(on_fail));
}

TEST_CASE("client_element_queue: elements in push order, then the end once drained") {
  ElementQueue q = MakeQueue(1 << 20, 8);
  CancelToken stop;
  REQUIRE(q.AcquireSlot(stop));
  q.Push(Elems({1, 2}));
  REQUIRE(q.AcquireSlot(stop));
  q.Push(Elems({3}));
  CHECK(q.stats().outstanding_requests == 2);
  q.SetEnd();
  CHECK(V(q.Pop(std::nullopt)) == 1);
  CHECK(q.stats().outstanding_requests == 2);  // the first push's slot returns with its last element
  CHECK(V(q.Pop(std::nullopt)) == 2);
  CHECK(q.stats().outstanding_requests == 1);
  CHECK(V(q.Pop(std::nullopt)) == 3);
  auto end = q.Pop(std::nullopt);
  REQUIRE(end.ok());
  CHECK_FALSE(end->has_value());
  CHECK(q.stats().elements_total == 3);
  CHECK(q.stats().bytes_total == 300);
  CHECK(q.stats().outstanding_requests == 0);
}

TEST_CASE("client_element_queue: an error comes after the elements before it, sticks, and stops the producers") {
  int failures = 0;
  ElementQueue q = MakeQueue(1 << 20, 8, [&] { ++failures; });
  CancelToken stop;
  REQUIRE(q.AcquireSlot(stop));
  q.Push(Elems({7}));
  q.Fail(absl::InvalidArgumentError("worker w task 1: malformed"));
  q.Fail(absl::InternalError("a later error is ignored"));
  CHECK(failures == 1);
  CHECK(q.failed());
  CHECK_FALSE(q.AcquireSlot(stop));
  CHECK(V(q.Pop(std::nullopt)) == 7);
  for (int i = 0; i < 2; ++i) {
    auto err = q.Pop(std::nullopt);
    REQUIRE_FALSE(err.ok());
    CHECK(err.status().code() == absl::StatusCode::kInvalidArgument);
  }
  CHECK(q.last_error().code() == absl::StatusCode::kInvalidArgument);
}

TEST_CASE("client_element_queue: a reader waits for room while the byte bound is reached") {
  ElementQueue q = MakeQueue(250, 0);
  CancelToken stop;
  REQUIRE(q.AcquireSlot(stop));
  q.Push(Elems({1, 2, 3}));  // 300 bytes >= 250: full
  std::atomic<bool> got{false};
  std::thread reader([&] { got = q.AcquireSlot(stop); });
  REQUIRE(WaitUntil([&] { return q.stats().backpressure_waits == 1; }));
  CHECK_FALSE(got);
  CHECK(V(q.Pop(std::nullopt)) == 1);  // 200 bytes: room again
  reader.join();
  CHECK(got);
  CHECK(q.stats().peak_buffered_bytes == 300);
}

TEST_CASE("client_element_queue: the request bound, at least one slot per reader") {
  ElementQueue q = MakeQueue(1 << 20, 1);
  CancelToken stop;
  REQUIRE(q.AcquireSlot(stop));
  q.SetReaders(2, false);
  REQUIRE(q.AcquireSlot(stop));  // a second reader gets its slot despite the bound of 1
  std::atomic<bool> got{false};
  std::thread third([&] { got = q.AcquireSlot(stop); });
  REQUIRE(WaitUntil([&] { return q.stats().backpressure_waits == 1; }));
  q.ReleaseSlot();
  third.join();
  CHECK(got);
  CHECK(q.stats().peak_outstanding_requests == 2);
}

TEST_CASE("client_element_queue: a reader that yields to local ones stops at a quarter of the byte bound") {
  ElementQueue q = MakeQueue(1000, 0);
  CancelToken stop;
  REQUIRE(q.AcquireSlot(stop));
  q.Push(Elems({1, 2, 3, 4}, 100));  // 400 bytes: above a quarter (250), below the bound
  CHECK(q.AcquireSlot(stop, /*yields_to_local=*/true));  // no local reader active: the whole bound
  q.ReleaseSlot();
  q.SetReaders(2, /*local_reader_active=*/true);
  CHECK(q.AcquireSlot(stop, /*yields_to_local=*/false));  // a local reader is not held back
  q.ReleaseSlot();
  std::atomic<bool> got{false};
  std::thread remote([&] { got = q.AcquireSlot(stop, /*yields_to_local=*/true); });
  REQUIRE(WaitUntil([&] { return q.stats().backpressure_waits == 1; }));
  CHECK(V(q.Pop(std::nullopt)) == 1);
  CHECK_FALSE(got);  // 300 bytes: still not below a quarter
  CHECK(V(q.Pop(std::nullopt)) == 2);
  remote.join();  // 200 bytes
  CHECK(got);
}

TEST_CASE("client_element_queue: while a draining worker's reader is active the others yield to it") {
  ElementQueue q = MakeQueue(1000, 0);
  CancelToken stop;
  REQUIRE(q.AcquireSlot(stop));
  q.Push(Elems({1, 2, 3, 4}, 100));  // 400 bytes: above a quarter (250), below the bound
  // The draining reader was already waiting when its task was found draining: it must not yield to
  // itself (the flag is read at every evaluation).
  std::atomic<bool> drains{false};
  q.SetReaders(2, /*local_reader_active=*/false, /*draining_reader_active=*/true);
  std::atomic<bool> got{false};
  std::thread draining([&] { got = q.AcquireSlot(stop, false, &drains); });
  REQUIRE(WaitUntil([&] { return q.stats().backpressure_waits == 1; }));
  CHECK_FALSE(got);
  drains = true;
  q.SetReaders(2, false, true);  // what the reader set does after changing the flag
  draining.join();
  CHECK(got);
  q.ReleaseSlot();
  // Another reader yields at a quarter of the bound while the draining one is active, not after.
  std::atomic<bool> other{false};
  std::thread local([&] { other = q.AcquireSlot(stop); });
  REQUIRE(WaitUntil([&] { return q.stats().backpressure_waits == 2; }));
  CHECK_FALSE(other);
  q.SetReaders(2, false, /*draining_reader_active=*/false);
  local.join();
  CHECK(other);
}

TEST_CASE("client_element_queue: a stop wakes a waiting reader, Close wakes everyone") {
  ElementQueue q = MakeQueue(10, 0);
  CancelToken filler;
  REQUIRE(q.AcquireSlot(filler));
  q.Push(Elems({1}));  // full
  CancelToken stop;
  std::atomic<int> result{-1};
  std::thread reader([&] { result = q.AcquireSlot(stop) ? 1 : 0; });
  REQUIRE(WaitUntil([&] { return q.stats().backpressure_waits == 1; }));
  stop.Cancel();
  reader.join();
  CHECK(result == 0);

  CancelToken other;
  std::thread blocked([&] { result = q.AcquireSlot(other) ? 1 : 0; });
  REQUIRE(WaitUntil([&] { return q.stats().backpressure_waits == 2; }));
  std::atomic<bool> popped_cancelled{false};
  CHECK(V(q.Pop(std::nullopt)) == 1);
  std::thread consumer([&] {
    auto r = q.Pop(std::nullopt);  // empty, no end: blocks until Close
    popped_cancelled = !r.ok() && r.status().code() == absl::StatusCode::kCancelled;
  });
  blocked.join();  // the pop made room: the reader got its slot
  CHECK(result == 1);
  REQUIRE(WaitUntil([&] { return q.stats().waiting_consumers == 1; }));
  q.Close();
  consumer.join();
  CHECK(popped_cancelled);
  CHECK_FALSE(q.AcquireSlot(other));
}

TEST_CASE("client_element_queue: Pop with a timeout, and how long the buffer has been empty") {
  ElementQueue q = MakeQueue(1 << 20, 8);
  auto r = q.Pop(absl::Milliseconds(1));
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().code() == absl::StatusCode::kDeadlineExceeded);
  REQUIRE(q.IdleSince().has_value());
  const absl::Time before = absl::Now();
  CancelToken stop;
  REQUIRE(q.AcquireSlot(stop));
  q.Push(Elems({1}));
  CHECK_FALSE(q.IdleSince().has_value());  // something to deliver
  CHECK(V(q.Pop(std::nullopt)) == 1);
  REQUIRE(q.IdleSince().has_value());
  CHECK(*q.IdleSince() >= before);  // empty since that element was taken
}

}  // namespace
}  // namespace sluice::client
