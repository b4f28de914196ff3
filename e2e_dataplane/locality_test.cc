// Locality with real processes: workers started with different --host values (as the operator
// starts them with --host=$(NODE_NAME)) and C++ clients with client_host set (as trainer pods set
// SLUICE_CLIENT_HOST from spec.nodeName). Which worker served what is read from the workers'
// sluice_worker_elements_produced_total; a job gets tasks only on the workers its clients read, so
// a worker no client reads produces nothing.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <climits>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "e2e_dataplane/e2e_test_util.h"

namespace sluice::e2e {
namespace {

std::string Hostname() {
  char name[HOST_NAME_MAX + 1] = {};
  REQUIRE(gethostname(name, sizeof(name) - 1) == 0);
  return name;
}

// A dispatcher and one worker per entry of `hosts` (started with --host=<entry>).
std::unique_ptr<local::LocalDataService> StartOnHosts(const std::vector<std::string>& hosts) {
  auto service = std::make_unique<local::LocalDataService>(TestServiceOptions());
  absl::Status started = service->StartDispatcher();
  INFO(started.ToString());
  REQUIRE(started.ok());
  for (const std::string& host : hosts) {
    auto added = service->AddWorker({absl::StrCat("--host=", host)});
    INFO(added.status().ToString());
    REQUIRE(added.ok());
  }
  absl::Status registered = service->WaitForWorkers(static_cast<int>(hosts.size()), absl::Seconds(30));
  INFO(registered.ToString() << "\n" << service->Logs());
  REQUIRE(registered.ok());
  return service;
}

std::vector<double> Produced(const local::LocalDataService& service) {
  std::vector<double> out;
  for (int w = 0; w < service.num_workers(); ++w) out.push_back(WorkerMetric(service, w, "sluice_worker_elements_produced_total"));
  return out;
}

// The worker indices that hold a task right now (GetState), by address.
std::set<int> WorkersWithTasks(local::LocalDataService& service) {
  auto state = service.GetState();
  REQUIRE(state.ok());
  std::set<int> out;
  for (const auto& w : state->workers()) {
    if (w.task_ids_size() == 0) continue;
    for (int i = 0; i < service.num_workers(); ++i) {
      if (service.worker(i).address == w.address()) out.insert(i);
    }
  }
  return out;
}

client::DataServiceClientOptions Options(const local::LocalDataService& service, int64_t n,
                                         service::ShardingPolicy sharding, service::TargetWorkers target,
                                         const std::string& client_host) {
  auto o = ClientOptions(service.dispatcher_address(), RangePipeline(n, 50), sharding);
  o.target_workers = target;
  o.client_host = client_host;
  return o;
}

TEST_CASE("Locality defaults: a worker's host is its hostname, so a client on the same machine is local") {
  // The README's by-hand setup: no --host, no client_host. Both default to gethostname().
  auto service = StartService(2, TestServiceOptions());
  auto state = service->GetState();
  REQUIRE(state.ok());
  REQUIRE(state->workers_size() == 2);
  for (const auto& w : state->workers()) CHECK(w.host() == Hostname());

  SECTION("LOCAL under dynamic sharding reads the epoch from the local workers") {
    auto o = ClientOptions(service->dispatcher_address(), RangePipeline(2000, 50), service::SHARDING_DYNAMIC);
    o.target_workers = service::TARGET_WORKERS_LOCAL;
    auto client = MakeClient(o);
    CHECK(client->client_host() == Hostname());
    const std::vector<int64_t> values = ReadAll(*client);
    INFO(service->Logs());
    CHECK(CountProblems(Counts(values), 2000, 1) == "");
  }
  SECTION("AUTO under SHARDING_OFF reads the local workers and the job ends") {
    auto client = MakeClient(ClientOptions(service->dispatcher_address(), RangePipeline(500, 50), service::SHARDING_OFF));
    const std::vector<int64_t> values = ReadAll(*client);
    INFO(service->Logs());
    CHECK(CountProblems(Counts(values), 500, 2) == "");
    CHECK(client->stats().job_finished);
  }
}

TEST_CASE("Locality ANY / LOCAL / AUTO with workers on two hosts") {
  // Workers 0 and 1 on node-a, worker 2 on node-b.
  auto service = StartOnHosts({"node-a", "node-a", "node-b"});
  constexpr int64_t kN = 600;

  SECTION("SHARDING_OFF, ANY: every worker's copy") {
    auto client = MakeClient(Options(*service, kN, service::SHARDING_OFF, service::TARGET_WORKERS_ANY, "node-a"));
    const std::vector<int64_t> values = ReadAll(*client);
    INFO(service->Logs());
    CHECK(CountProblems(Counts(values), kN, 3) == "");
    CHECK(Produced(*service) == std::vector<double>{kN, kN, kN});
  }
  SECTION("SHARDING_OFF, LOCAL: only node-a's workers ran the job") {
    auto client = MakeClient(Options(*service, kN, service::SHARDING_OFF, service::TARGET_WORKERS_LOCAL, "node-a"));
    REQUIRE(Next(*client).has_value());
    CHECK(WorkersWithTasks(*service) == std::set<int>{0, 1});
    const std::vector<int64_t> values = ReadAll(*client);
    INFO(service->Logs());
    CHECK(values.size() == 2 * kN - 1);
    CHECK(Produced(*service) == std::vector<double>{kN, kN, 0});
    CHECK(client->stats().job_finished);
  }
  SECTION("SHARDING_OFF, AUTO on a host with workers: the local ones only, and the job ends") {
    auto client = MakeClient(Options(*service, kN, service::SHARDING_OFF, service::TARGET_WORKERS_AUTO, "node-b"));
    const std::vector<int64_t> values = ReadAll(*client);
    INFO(service->Logs());
    CHECK(CountProblems(Counts(values), kN, 1) == "");
    CHECK(Produced(*service) == std::vector<double>{0, 0, kN});
  }
  SECTION("SHARDING_OFF, AUTO on a host without workers: every worker") {
    auto client = MakeClient(Options(*service, kN, service::SHARDING_OFF, service::TARGET_WORKERS_AUTO, "node-z"));
    const std::vector<int64_t> values = ReadAll(*client);
    INFO(service->Logs());
    CHECK(CountProblems(Counts(values), kN, 3) == "");
  }
  SECTION("SHARDING_DYNAMIC, AUTO: every element once, from both hosts' workers") {
    auto client = MakeClient(Options(*service, 3000, service::SHARDING_DYNAMIC, service::TARGET_WORKERS_AUTO, "node-a"));
    REQUIRE(Next(*client).has_value());
    CHECK(WorkersWithTasks(*service) == std::set<int>{0, 1, 2});
    std::vector<int64_t> values = ReadAll(*client);
    INFO(service->Logs());
    CHECK(values.size() == 2999);
    const std::vector<double> produced = Produced(*service);
    CHECK(produced[0] + produced[1] + produced[2] == 3000);
  }
}

TEST_CASE("LOCAL under dynamic sharding: each epoch completes exactly once, served by the local workers only") {
  // Workers 0, 1 on node-a; 2, 3 on node-b.
  auto service = StartOnHosts({"node-a", "node-a", "node-b", "node-b"});
  constexpr int64_t kN = 4000;

  SECTION("one client on node-a, two epochs") {
    auto o = Options(*service, kN, service::SHARDING_DYNAMIC, service::TARGET_WORKERS_LOCAL, "node-a");
    o.num_epochs = 2;
    auto client = MakeClient(o);
    REQUIRE(Next(*client).has_value());
    // The job has tasks on node-a's workers only: no split can be stranded on node-b.
    CHECK(WorkersWithTasks(*service) == std::set<int>{0, 1});
    std::vector<int64_t> values = ReadAll(*client);
    INFO(service->Logs());
    CHECK(values.size() == 2 * kN - 1);
    const std::vector<double> produced = Produced(*service);
    CHECK(produced[2] == 0);
    CHECK(produced[3] == 0);
    CHECK(produced[0] + produced[1] == 2 * kN);
    CHECK(client->stats().job_finished);
    auto state = service->GetState();
    REQUIRE(state.ok());
    REQUIRE(state->jobs_size() == 1);
    CHECK(state->jobs(0).finished());
  }
  SECTION("clients on node-a and node-b share one job: each reads its host's workers, together exactly once") {
    auto o = Options(*service, kN, service::SHARDING_DYNAMIC, service::TARGET_WORKERS_LOCAL, "node-a");
    o.job_name = "two-hosts";
    // Small buffers: the first client cannot take the whole epoch before the second one joins.
    o.compression = service::COMPRESSION_NONE;
    o.max_buffered_bytes = 4 << 10;
    o.max_outstanding_requests = 1;
    o.max_elements_per_response = 1;
    auto a = MakeClient(o);
    std::vector<int64_t> from_a, from_b;
    for (int i = 0; i < 10; ++i) {
      auto e = Next(*a);
      REQUIRE(e.has_value());
      from_a.push_back(IntField(*e));
    }
    o.client_host = "node-b";
    auto b = MakeClient(o);
    REQUIRE(b->job_id() == a->job_id());
    ReadBothToEnd(*a, *b, &from_a, &from_b);
    INFO(service->Logs());
    std::vector<int64_t> all = from_a;
    all.insert(all.end(), from_b.begin(), from_b.end());
    CHECK(CountProblems(Counts(all), kN, 1) == "");
    CHECK(!from_b.empty());
    // Every element produced was read (no task held splits nobody read).
    const std::vector<double> produced = Produced(*service);
    CHECK(produced[0] + produced[1] + produced[2] + produced[3] == kN);
    CHECK(produced[2] + produced[3] > 0);
  }
}

}  // namespace
}  // namespace sluice::e2e
