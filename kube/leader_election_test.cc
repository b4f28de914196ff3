#include "kube/leader_election.h"

#include <catch2/catch.hpp>

#include <thread>

#include "absl/strings/str_cat.h"
#include "kube/errors.h"
#include "kube/event_recorder.h"
#include "kube/testing/fixture_server.h"
#include "kube/testing/lease_endpoint.h"

namespace sluice::kube {
namespace {

using nlohmann::json;
using testing::FixtureExchange;
using testing::FixtureServer;
using testing::LeaseEndpoint;
using testing::LeaseHeldBy;
using testing::RecordedRequest;
using testing::Reply;

const std::string kLeasePath = resources::Leases().ObjectPath("fixtures", "sluice-operator");

std::unique_ptr<Client> MakeClient(const FixtureServer& server) {
  Config config;
  config.server = server.url();
  ClientOptions options;
  options.retry.max_attempts = 1;
  auto client = Client::Create(config, options);
  REQUIRE(client.ok());
  return std::move(*client);
}

LeaderElectionConfig Election(const std::string& identity, Clock* clock) {
  LeaderElectionConfig config;
  config.lease_namespace = "fixtures";
  config.lease_name = "sluice-operator";
  config.identity = identity;
  config.clock = clock;
  config.seed = 7;
  return config;
}

json RecordedLease() { return FixtureExchange("leases", 0)["response"]["body"]; }

TEST_CASE("configuration is validated") {
  FakeClock clock;
  LeaderElectionConfig config = Election("me", &clock);
  CHECK(LeaderElector(nullptr, config).Validate().ok());
  config.renew_deadline = absl::Seconds(20);
  CHECK(LeaderElector(nullptr, config).Validate().code() == absl::StatusCode::kInvalidArgument);
  config = Election("", &clock);
  CHECK_FALSE(LeaderElector(nullptr, config).Validate().ok());
}

TEST_CASE("malformed Lease answers are errors - not exceptions") {
  FixtureServer server;
  REQUIRE(server.Start().ok());
  server.Expect("GET", kLeasePath, Reply::Json(200, json::array({1, 2})));
  json no_spec = RecordedLease();
  no_spec["spec"] = "garbage";
  server.Expect("GET", kLeasePath, Reply::Json(200, no_spec));
  server.Expect("PUT", kLeasePath, Reply::Json(200, json("not an object")));
  auto client = MakeClient(server);
  FakeClock clock;
  LeaderElector elector(client.get(), Election("me", &clock));
  CHECK(elector.TryAcquireOrRenew().status().code() == absl::StatusCode::kDataLoss);
  auto taken = elector.TryAcquireOrRenew();  // a spec that is not an object counts as no holder
  REQUIRE(taken.ok());
  CHECK(*taken);
  CHECK(elector.Release().ok());  // not leading (Run was not called): nothing to release
}

TEST_CASE("a missing lease is created with us as holder") {
  FixtureServer server;
  REQUIRE(server.Start().ok());
  server.Expect("GET", kLeasePath, Reply::Status(404, "NotFound", "leases.coordination.k8s.io \"sluice-operator\" not found"));
  server.ExpectExchange(FixtureExchange("leases", 0));
  auto client = MakeClient(server);
  absl::Time start;
  std::string err;
  REQUIRE(absl::ParseTime(absl::RFC3339_full, "2026-11-22T00:00:00Z", &start, &err));
  FakeClock clock(start);
  LeaderElector elector(client.get(), Election("operator-0", &clock));
  auto acquired = elector.TryAcquireOrRenew();
  REQUIRE(acquired.ok());
  CHECK(*acquired);
  CHECK(elector.Leader() == "operator-0");
  json sent = server.Requests()[1].JsonBody();
  json recorded = FixtureExchange("leases", 0)["request"]["body"];
  CHECK(sent == recorded);
}

TEST_CASE("renewal is a resourceVersion-guarded PUT keeping acquireTime") {
  FixtureServer server;
  REQUIRE(server.Start().ok());
  server.Expect("GET", kLeasePath, Reply::Json(200, RecordedLease()));
  server.ExpectExchange(FixtureExchange("leases", 1));
  auto client = MakeClient(server);
  FakeClock clock;
  LeaderElector elector(client.get(), Election("operator-0", &clock));
  auto renewed = elector.TryAcquireOrRenew();
  REQUIRE(renewed.ok());
  CHECK(*renewed);
  json sent = server.Requests()[1].JsonBody();
  CHECK(sent["metadata"]["resourceVersion"] == "436");
  CHECK(sent["spec"]["holderIdentity"] == "operator-0");
  CHECK(sent["spec"]["acquireTime"] == "2026-11-22T00:00:00.000000Z");
  CHECK(sent["spec"]["leaseTransitions"] == 0);
  CHECK(sent["spec"]["renewTime"] == FormatMicroTime(clock.Now()));
}

TEST_CASE("a stale lease is taken over only after leaseDuration on our clock - 409 is a lost race") {
  FixtureServer server;
  REQUIRE(server.Start().ok());
  server.Expect("GET", kLeasePath, Reply::Json(200, RecordedLease()));
  server.Expect("GET", kLeasePath, Reply::Json(200, RecordedLease()));
  server.ExpectExchange(FixtureExchange("leases", 2));  // the recorded 409
  auto client = MakeClient(server);
  FakeClock clock;
  const absl::Time t0 = clock.Now();
  std::vector<LeaderElectionAttempt> attempts;
  LeaderElectionConfig config = Election("operator-1", &clock);
  config.on_attempt = [&](const LeaderElectionAttempt& a) { attempts.push_back(a); };
  LeaderElector elector(client.get(), config);
  auto first = elector.TryAcquireOrRenew();
  REQUIRE(first.ok());
  CHECK_FALSE(*first);  // held by operator-0, just observed
  CHECK(elector.Leader() == "operator-0");
  CHECK(server.RequestCount() == 1);
  clock.Advance(absl::Seconds(16));
  auto second = elector.TryAcquireOrRenew();
  REQUIRE(second.ok());
  CHECK_FALSE(*second);  // PUT lost with 409: not an error, just not leader
  auto requests = server.Requests();
  REQUIRE(requests.size() == 3);
  CHECK(requests[2].method == "PUT");
  json sent = requests[2].JsonBody();
  CHECK(sent["metadata"]["resourceVersion"] == "436");
  CHECK(sent["spec"]["holderIdentity"] == "operator-1");
  CHECK(sent["spec"]["leaseTransitions"] == 1);
  CHECK(sent["spec"]["acquireTime"] == FormatMicroTime(clock.Now()));
  // Both attempts were reported with what they saw: the record first seen at t0 expires for us at
  // t0 + 15 s; the first attempt was before that (held), the second after it (tried, lost the race).
  REQUIRE(attempts.size() == 2);
  CHECK(attempts[0].outcome == LeaderElectionAttempt::Outcome::kHeldByOther);
  CHECK(attempts[0].holder == "operator-0");
  CHECK(attempts[0].at == t0);
  CHECK(attempts[0].observed_change == t0);
  CHECK(attempts[0].expires == t0 + absl::Seconds(15));
  CHECK(attempts[1].outcome == LeaderElectionAttempt::Outcome::kLostRace);
  CHECK(attempts[1].at == t0 + absl::Seconds(16));
  CHECK(attempts[1].observed_change == t0);  // the record did not change in between
  CHECK(attempts[1].expires <= attempts[1].at);
  CHECK(std::string(OutcomeName(attempts[1].outcome)) == "lost-race");
}

struct Flags {
  absl::Mutex mu;
  int started = 0;
  int stopped = 0;
  std::vector<std::string> leaders;
};

TEST_CASE("Run: waits out a live holder / backs off after a 409 / takes over / renews / releases on stop") {
  FixtureServer server;
  REQUIRE(server.Start().ok());
  LeaseEndpoint endpoint(&server);
  endpoint.Set(LeaseHeldBy("other", "2026-11-22T00:00:00.000000Z"));
  auto client = MakeClient(server);
  FakeClock clock;
  Flags flags;
  LeaderElectionConfig config = Election("me", &clock);
  config.on_started_leading = [&] {
    absl::MutexLock lock(&flags.mu);
    ++flags.started;
  };
  config.on_stopped_leading = [&] {
    absl::MutexLock lock(&flags.mu);
    ++flags.stopped;
  };
  config.on_new_leader = [&](const std::string& id) {
    absl::MutexLock lock(&flags.mu);
    flags.leaders.push_back(id);
  };
  std::vector<std::string> outcomes;
  config.on_attempt = [&](const LeaderElectionAttempt& a) {
    absl::MutexLock lock(&flags.mu);
    outcomes.push_back(absl::StrCat(OutcomeName(a.outcome), ":", a.holder));
  };
  LeaderElector elector(client.get(), config);
  absl::Status run_status;
  std::stop_source stop;
  std::thread runner([&] { run_status = elector.Run(stop.get_token()); });

  auto wake = clock.AwaitSleepBeyond(clock.Now());  // acquire retry after seeing a live holder
  REQUIRE(wake.has_value());
  double wait = absl::ToDoubleSeconds(*wake - clock.Now());
  CHECK(wait >= 2.0);
  CHECK(wait <= 2.0 * 2.2);
  CHECK(server.RequestCount() == 1);

  endpoint.FailNextPut();            // another candidate will win the race for the stale lease
  clock.Advance(absl::Seconds(16));  // the holder stopped renewing: stale on our clock
  wake = clock.AwaitSleepBeyond(clock.Now());
  REQUIRE(wake.has_value());
  auto requests = server.Requests();
  REQUIRE(requests.size() == 3);
  CHECK(requests[1].method == "GET");
  CHECK(requests[2].method == "PUT");  // 409: backing off before the next GET
  wait = absl::ToDoubleSeconds(*wake - clock.Now());
  CHECK(wait >= 2.0);
  CHECK(wait <= 4.4);
  CHECK_FALSE(elector.IsLeader());

  clock.Advance(*wake - clock.Now());
  wake = clock.AwaitSleepBeyond(clock.Now());  // leading: waiting retry_period to renew
  REQUIRE(wake.has_value());
  CHECK(*wake - clock.Now() == absl::Seconds(2));
  CHECK(elector.IsLeader());
  CHECK(endpoint.Get()["spec"]["holderIdentity"] == "me");
  CHECK(endpoint.Get()["spec"]["leaseTransitions"] == 1);
  {
    absl::MutexLock lock(&flags.mu);
    CHECK(flags.started == 1);
  }
  size_t before_renew = server.RequestCount();
  clock.Advance(absl::Seconds(2));
  wake = clock.AwaitSleepBeyond(clock.Now());
  REQUIRE(wake.has_value());
  CHECK(server.RequestCount() == before_renew + 2);  // GET + PUT
  CHECK(endpoint.Get()["spec"]["renewTime"] == FormatMicroTime(clock.Now()));

  stop.request_stop();
  runner.join();
  CHECK(run_status.ok());
  json released = endpoint.Get();
  CHECK(released["spec"]["holderIdentity"] == "");
  CHECK(released["spec"]["leaseDurationSeconds"] == 1);
  CHECK_FALSE(elector.IsLeader());
  absl::MutexLock lock(&flags.mu);
  CHECK(flags.stopped == 1);
  CHECK(flags.leaders == std::vector<std::string>{"other", "me"});
  // Every attempt was reported: waited, lost the race, took over (from "other"), renewed.
  CHECK(outcomes == std::vector<std::string>{"held:other", "lost-race:other", "acquired:other", "renewed:me"});
}

TEST_CASE("Run: a released lease is acquired at once - failing renewals past renewDeadline lose leadership") {
  FixtureServer server;
  REQUIRE(server.Start().ok());
  LeaseEndpoint endpoint(&server);
  json released = LeaseHeldBy("", "2026-11-22T00:00:00.000000Z");
  released["spec"]["leaseDurationSeconds"] = 1;
  endpoint.Set(released);
  auto client = MakeClient(server);
  FakeClock clock;
  int stopped = 0;
  LeaderElectionConfig config = Election("me", &clock);
  config.on_stopped_leading = [&] { ++stopped; };
  LeaderElector elector(client.get(), config);
  absl::Status run_status;
  std::atomic<bool> done{false};
  std::thread runner([&] {
    run_status = elector.Run({});
    done = true;
  });
  auto wake = clock.AwaitSleepBeyond(clock.Now());
  REQUIRE(wake.has_value());
  CHECK(elector.IsLeader());
  CHECK(server.RequestCount() == 2);  // GET, PUT: no waiting for an empty holder
  // Someone else now holds the lease and keeps renewing it; our renewals keep failing.
  for (int i = 0; i < 20 && !done; ++i) {
    endpoint.Set(LeaseHeldBy("usurper", absl::StrCat("2026-11-22T00:00:", 10 + i, ".000000Z")));
    clock.Advance(absl::Seconds(2));
    clock.AwaitSleepBeyond(clock.Now(), absl::Milliseconds(200));
  }
  runner.join();
  CHECK(IsConflict(run_status));
  CHECK(std::string(run_status.message()).find("lost lease fixtures/sluice-operator") != std::string::npos);
  CHECK(stopped == 1);
  CHECK(endpoint.Get()["spec"]["holderIdentity"] == "usurper");  // not released over the new holder
  CHECK(server.Requests().back().method == "GET");
}

}  // namespace
}  // namespace sluice::kube
