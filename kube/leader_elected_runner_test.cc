#include "kube/leader_elected_runner.h"

#include <catch2/catch.hpp>

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "kube/clock.h"
#include "kube/testing/fixture_server.h"
#include "kube/testing/lease_endpoint.h"

namespace sluice::kube {
namespace {

using nlohmann::json;
using testing::FixtureServer;
using testing::LeaseEndpoint;
using testing::LeaseHeldBy;

std::unique_ptr<Client> MakeClient(const FixtureServer& server) {
  Config config;
  config.server = server.url();
  ClientOptions options;
  options.retry.max_attempts = 1;
  auto client = Client::Create(config, options);
  REQUIRE(client.ok());
  return std::move(*client);
}

LeaderElectionConfig Election(Clock* clock) {
  LeaderElectionConfig config;
  config.lease_namespace = "fixtures";
  config.lease_name = "sluice-operator";
  config.identity = "me";
  config.clock = clock;
  config.seed = 7;
  return config;
}

json Released() {
  json lease = LeaseHeldBy("", "2026-11-22T00:00:00.000000Z");
  lease["spec"]["leaseDurationSeconds"] = 1;
  return lease;
}

TEST_CASE("LeaderElectedRunner: leads once the Lease is won, and on stop the work ends before the Lease is released") {
  FixtureServer server;
  REQUIRE(server.Start().ok());
  LeaseEndpoint endpoint(&server);
  endpoint.Set(Released());
  auto client = MakeClient(server);
  FakeClock clock;
  int user_started = 0;
  LeaderElectionConfig config = Election(&clock);
  config.on_started_leading = [&] { ++user_started; };  // the caller's own callback still runs
  LeaderElectedRunner runner(client.get(), config);
  REQUIRE(runner.Validate().ok());
  CHECK(runner.lease() == "fixtures/sluice-operator");

  absl::Notification leading;
  std::string holder_when_work_ended;
  std::stop_source stop;
  int code = -1;
  std::thread t([&] {
    code = runner.Run(stop, [&](std::stop_token token) {
      leading.Notify();
      std::mutex mu;
      std::condition_variable_any cv;
      std::unique_lock<std::mutex> lock(mu);
      cv.wait(lock, token, [] { return false; });
      holder_when_work_ended = endpoint.Get()["spec"]["holderIdentity"];  // not released yet
      return 7;
    });
  });
  REQUIRE(leading.WaitForNotificationWithTimeout(absl::Seconds(30)));
  CHECK(endpoint.Get()["spec"]["holderIdentity"] == "me");
  stop.request_stop();  // as a SIGTERM would
  t.join();
  CHECK(code == 7);
  CHECK(holder_when_work_ended == "me");
  CHECK(endpoint.Get()["spec"]["holderIdentity"] == "");  // released afterwards
  CHECK(user_started == 1);
}

TEST_CASE("LeaderElectedRunner: a standby stops campaigning at once, without running the work") {
  FixtureServer server;
  REQUIRE(server.Start().ok());
  LeaseEndpoint endpoint(&server);
  endpoint.Set(LeaseHeldBy("other", "2026-11-22T00:00:00.000000Z"));
  auto client = MakeClient(server);
  FakeClock clock;
  LeaderElectedRunner runner(client.get(), Election(&clock));
  std::stop_source stop;
  std::atomic<bool> ran_work{false};
  int code = -1;
  std::thread t([&] {
    code = runner.Run(stop, [&](std::stop_token) {
      ran_work = true;
      return 5;
    });
  });
  REQUIRE(clock.AwaitSleepBeyond(clock.Now()).has_value());  // waiting out the live holder
  stop.request_stop();
  t.join();
  CHECK(code == 0);
  CHECK(!ran_work.load());
  CHECK(endpoint.Get()["spec"]["holderIdentity"] == "other");
}

TEST_CASE("LeaderElectedRunner: work that ends on its own stops the daemon and releases the Lease") {
  FixtureServer server;
  REQUIRE(server.Start().ok());
  LeaseEndpoint endpoint(&server);
  endpoint.Set(Released());
  auto client = MakeClient(server);
  FakeClock clock;
  LeaderElectedRunner runner(client.get(), Election(&clock));
  std::stop_source stop;
  const int code = runner.Run(stop, [](std::stop_token) { return 3; });  // e.g. its controller could not start
  CHECK(code == 3);
  CHECK(stop.stop_requested());
  CHECK(endpoint.Get()["spec"]["holderIdentity"] == "");
}

TEST_CASE("LeaderElectedRunner: a lost Lease stops the work and the daemon, with exit code 1") {
  FixtureServer server;
  REQUIRE(server.Start().ok());
  LeaseEndpoint endpoint(&server);
  endpoint.Set(Released());
  auto client = MakeClient(server);
  FakeClock clock;
  LeaderElectedRunner runner(client.get(), Election(&clock));
  std::stop_source stop;
  absl::Notification leading;
  std::atomic<bool> done{false};
  int code = -1;
  std::thread t([&] {
    code = runner.Run(stop, [&](std::stop_token token) {
      leading.Notify();
      std::mutex mu;
      std::condition_variable_any cv;
      std::unique_lock<std::mutex> lock(mu);
      cv.wait(lock, token, [] { return false; });
      return 0;  // a clean stop of the work; the lost Lease still makes the exit code 1
    });
    done = true;
  });
  REQUIRE(leading.WaitForNotificationWithTimeout(absl::Seconds(30)));
  // Someone else now holds the Lease and keeps renewing it; our renewals keep failing.
  for (int i = 0; i < 40 && !done; ++i) {
    endpoint.Set(LeaseHeldBy("usurper", absl::StrCat("2026-11-22T00:00:", 10 + i, ".000000Z")));
    clock.Advance(absl::Seconds(2));
    clock.AwaitSleepBeyond(clock.Now(), absl::Milliseconds(200));
  }
  t.join();
  CHECK(code == 1);
  CHECK(stop.stop_requested());
  CHECK(endpoint.Get()["spec"]["holderIdentity"] == "usurper");  // not released over the new holder
}

TEST_CASE("LeaderElectedRunner: invalid settings are reported before campaigning") {
  FakeClock clock;
  LeaderElectionConfig config = Election(&clock);
  config.renew_deadline = absl::Seconds(60);  // longer than the lease
  CHECK(absl::IsInvalidArgument(LeaderElectedRunner(nullptr, config).Validate()));
}

}  // namespace
}  // namespace sluice::kube
