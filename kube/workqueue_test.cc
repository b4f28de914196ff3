#include "kube/workqueue.h"

#include <catch2/catch.hpp>

#include <atomic>
#include <map>
#include <thread>

#include "absl/strings/str_cat.h"
#include "kube/clock.h"
#include "kube/controller.h"

namespace sluice::kube {
namespace {

std::unique_ptr<RateLimiter> PerItemOnly() { return std::make_unique<ItemExponentialRateLimiter>(); }

TEST_CASE("per-item exponential backoff: 5 ms * 2^n capped at 1000 s - Forget resets") {
  ItemExponentialRateLimiter limiter;
  CHECK(limiter.When("a") == absl::Milliseconds(5));
  CHECK(limiter.When("a") == absl::Milliseconds(10));
  CHECK(limiter.When("a") == absl::Milliseconds(20));
  CHECK(limiter.When("b") == absl::Milliseconds(5));
  CHECK(limiter.NumRequeues("a") == 3);
  for (int i = 0; i < 30; ++i) limiter.When("a");
  CHECK(limiter.When("a") == absl::Seconds(1000));
  for (int i = 0; i < 2000; ++i) limiter.When("a");  // no overflow
  CHECK(limiter.When("a") == absl::Seconds(1000));
  limiter.Forget("a");
  CHECK(limiter.NumRequeues("a") == 0);
  CHECK(limiter.When("a") == absl::Milliseconds(5));
}

TEST_CASE("default controller limiter is the max of per-item backoff and a 10 qps / 100 burst bucket") {
  FakeClock clock;
  auto limiter = DefaultControllerRateLimiter(&clock);
  for (int i = 0; i < 100; ++i) REQUIRE(limiter->When(absl::StrCat("k", i)) == absl::Milliseconds(5));
  CHECK(limiter->When("fresh") == absl::Milliseconds(100));  // bucket exhausted: 1/10 s
  CHECK(limiter->When("fresh2") == absl::Milliseconds(200));
  clock.Advance(absl::Seconds(60));
  // Bucket refilled; a key with many failures is dominated by its own backoff.
  for (int i = 0; i < 10; ++i) limiter->When("hot");
  CHECK(limiter->When("hot") == absl::Milliseconds(5 * 1024));
  CHECK(limiter->NumRequeues("hot") == 11);
}

TEST_CASE("queue de-duplicates and never hands one key to two workers") {
  FakeClock clock;
  WorkQueue queue(&clock, PerItemOnly());
  queue.Add("a");
  queue.Add("a");
  queue.Add("b");
  CHECK(queue.Len() == 2);
  CHECK(*queue.Get() == "a");
  queue.Add("a");  // while processing: parked as dirty, not queued
  CHECK(queue.Len() == 1);
  CHECK(*queue.Get() == "b");  // the second worker gets b, not a
  CHECK(queue.Len() == 0);
  CHECK(queue.NumProcessing() == 2);
  queue.Done("a");  // now a comes back once
  CHECK(queue.Len() == 1);
  queue.Done("b");
  CHECK(*queue.Get() == "a");
  queue.Done("a");
  CHECK(queue.Len() == 0);
}

TEST_CASE("AddAfter waits on the injected clock - the earliest time wins") {
  FakeClock clock;
  WorkQueue queue(&clock, PerItemOnly());
  queue.AddAfter("late", absl::Seconds(10));
  queue.AddAfter("soon", absl::Seconds(5));
  queue.AddAfter("late", absl::Seconds(30));  // later time does not postpone
  queue.Add("now");
  CHECK(queue.NumWaiting() == 2);
  CHECK(*queue.Get() == "now");
  clock.Advance(absl::Seconds(6));
  CHECK(*queue.Get() == "soon");
  CHECK(queue.NumWaiting() == 1);
  std::optional<std::string> got;
  std::thread worker([&] { got = queue.Get(); });  // blocks until the clock reaches 10 s
  clock.Advance(absl::Seconds(4));
  worker.join();
  CHECK(got == "late");
  CHECK(queue.NumWaiting() == 0);
}

TEST_CASE("AddAfter: many parked keys come out in ready-time order, an earlier time moves a key up") {
  FakeClock clock;
  WorkQueue queue(&clock, PerItemOnly());
  for (int i = 0; i < 100; ++i) queue.AddAfter(absl::StrCat("k", i), absl::Seconds(100 - i));  // k99 first
  queue.AddAfter("k0", absl::Seconds(1));   // earlier: k0 is now the first
  queue.AddAfter("k1", absl::Seconds(500));  // later: ignored (k1 stays at 99 s)
  CHECK(queue.NumWaiting() == 100);
  clock.Advance(absl::Seconds(1));
  CHECK(*queue.Get() == "k0");
  queue.Done("k0");
  clock.Advance(absl::Seconds(99));
  std::vector<std::string> order;
  for (int i = 0; i < 99; ++i) {
    order.push_back(*queue.Get());
    queue.Done(order.back());
  }
  CHECK(order.front() == "k99");
  CHECK(order[97] == "k2");
  CHECK(order.back() == "k1");
  CHECK(queue.NumWaiting() == 0);
  CHECK(queue.Len() == 0);
}

TEST_CASE("AddRateLimited delays by the limiter - Forget resets the key's history") {
  FakeClock clock;
  WorkQueue queue(&clock, PerItemOnly());
  queue.AddRateLimited("a");
  queue.AddRateLimited("b");
  queue.AddRateLimited("b");  // b: 5 ms then 10 ms requested; the earlier (5 ms) wins
  CHECK(queue.NumRequeues("b") == 2);
  CHECK(queue.Len() == 0);
  clock.Advance(absl::Milliseconds(5));
  CHECK(*queue.Get() == "a");
  CHECK(*queue.Get() == "b");
  queue.Forget("b");
  CHECK(queue.NumRequeues("b") == 0);
}

TEST_CASE("ShutDown drains queued keys / drops delayed ones and refuses new ones") {
  FakeClock clock;
  WorkQueue queue(&clock, PerItemOnly());
  queue.Add("a");
  queue.Add("b");
  queue.AddAfter("later", absl::Seconds(1));
  queue.ShutDown();
  queue.Add("c");
  CHECK(queue.ShuttingDown());
  CHECK(*queue.Get() == "a");
  CHECK(*queue.Get() == "b");
  CHECK_FALSE(queue.Get().has_value());
  CHECK(queue.NumWaiting() == 0);
  queue.Done("a");
  queue.Done("b");
  queue.ShutDownWithDrain();  // nothing in flight: returns
}

TEST_CASE("ShutDownWithDrain returns once in-flight keys are Done") {
  WorkQueue queue(Clock::Real(), PerItemOnly());
  queue.Add("a");
  REQUIRE(*queue.Get() == "a");
  std::atomic<bool> drained{false};
  std::thread closer([&] {
    queue.ShutDownWithDrain();
    drained = true;
  });
  queue.Done("a");
  closer.join();
  CHECK(drained);
  CHECK(queue.NumProcessing() == 0);
}

TEST_CASE("a blocked Get wakes up on shutdown") {
  WorkQueue queue;
  std::optional<std::string> got = "unset";
  std::thread worker([&] { got = queue.Get(); });
  queue.ShutDown();
  worker.join();
  CHECK_FALSE(got.has_value());
}

TEST_CASE("controller: error -> rate-limited requeue / requeue_after -> exact delay / success -> forget") {
  FakeClock clock;
  WorkQueue queue(&clock, PerItemOnly());
  std::map<std::string, int> calls;
  Controller controller(&queue, [&](const std::string& key) -> absl::StatusOr<ReconcileResult> {
    ++calls[key];
    if (key == "fail") return absl::UnavailableError("api down");
    if (key == "later") return ReconcileResult{false, absl::Seconds(30)};
    if (key == "again") return ReconcileResult{true, absl::ZeroDuration()};
    return ReconcileResult{};
  });
  queue.Add("fail");
  queue.Add("later");
  queue.Add("again");
  queue.Add("ok");
  for (int i = 0; i < 4; ++i) REQUIRE(controller.ProcessNext());
  CHECK(controller.failures() == 1);
  CHECK(queue.NumRequeues("fail") == 1);
  CHECK(queue.NumRequeues("again") == 1);
  CHECK(queue.NumRequeues("later") == 0);
  CHECK(queue.NumRequeues("ok") == 0);
  CHECK(queue.NumWaiting() == 3);  // fail (5 ms), again (5 ms), later (30 s)
  clock.Advance(absl::Milliseconds(5));
  REQUIRE(controller.ProcessNext());
  REQUIRE(controller.ProcessNext());
  CHECK(calls["fail"] == 2);
  CHECK(calls["again"] == 2);
  CHECK(queue.NumRequeues("fail") == 2);  // second failure: next delay 10 ms
  clock.Advance(absl::Seconds(30));
  while (calls["later"] < 2) REQUIRE(controller.ProcessNext());
  CHECK(calls["later"] == 2);
  queue.ShutDown();
  while (controller.ProcessNext()) {
  }
}

TEST_CASE("controller with many workers never reconciles one key concurrently") {
  WorkQueue queue(Clock::Real(), PerItemOnly());
  std::map<std::string, std::atomic<int>> in_flight;
  const std::vector<std::string> keys = {"k0", "k1", "k2", "k3", "k4"};
  for (const auto& k : keys) in_flight[k] = 0;
  std::atomic<int> violations{0};
  std::atomic<int> reconciles{0};
  Controller controller(
      &queue,
      [&](const std::string& key) -> absl::StatusOr<ReconcileResult> {
        if (in_flight[key].fetch_add(1) != 0) ++violations;
        for (int spin = 0; spin < 1000; ++spin) std::this_thread::yield();
        in_flight[key].fetch_sub(1);
        ++reconciles;
        return ReconcileResult{};
      },
      ControllerOptions{"test", 4, nullptr});
  controller.Start();
  for (int round = 0; round < 200; ++round) queue.Add(keys[round % keys.size()]);
  controller.Stop();  // drains what is queued
  CHECK(violations == 0);
  CHECK(reconciles >= static_cast<int>(keys.size()));
  CHECK(reconciles <= 200);
}

}  // namespace
}  // namespace sluice::kube
