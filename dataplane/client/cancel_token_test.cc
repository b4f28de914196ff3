#include "dataplane/client/cancel_token.h"

#include <catch2/catch.hpp>

#include <atomic>
#include <thread>

namespace sluice::client {
namespace {

TEST_CASE("client_cancel_token: Cancel runs the registered callbacks once and wakes WaitFor") {
  CancelToken token;
  int calls = 0;
  const int64_t handle = token.Register([&] { ++calls; });
  int unregistered_calls = 0;
  token.Unregister(token.Register([&] { ++unregistered_calls; }));
  std::atomic<bool> woke{false};
  std::thread waiter([&] { woke = token.WaitFor(absl::InfiniteDuration()); });
  token.Cancel();
  waiter.join();  // an infinite wait returned: the cancel woke it
  CHECK(woke);
  token.Cancel();
  CHECK(calls == 1);
  CHECK(unregistered_calls == 0);
  CHECK(token.cancelled());
  token.Unregister(handle);
}

TEST_CASE("client_cancel_token: a callback registered after the cancel runs at once") {
  CancelToken token;
  token.Cancel();
  int calls = 0;
  { CancelCallback cb(&token, [&] { ++calls; }); }
  CHECK(calls == 1);
  CHECK(token.WaitFor(absl::ZeroDuration()));
  // A null token: no callback, nothing to unregister.
  CancelCallback none(nullptr, [&] { ++calls; });
  CHECK(calls == 1);
}

TEST_CASE("client_cancel_token: WaitFor without a cancel returns false after the timeout") {
  CancelToken token;
  CHECK_FALSE(token.WaitFor(absl::Milliseconds(1)));
}

}  // namespace
}  // namespace sluice::client
