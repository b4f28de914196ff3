// The dispatcher's default dataset with real processes: `sluice-dispatcher --pipeline FILE`
// registers the pipeline at start-up; a C++ client and a Python `sluice.Dataset(address,
// job_name=...)` that give no pipeline read it; --sharing makes plain OFF jobs cross-job shared;
// a bad default pipeline stops the dispatcher with an error naming its source.
#include <catch2/catch.hpp>

#include <sys/wait.h>

#include <cstdlib>
#include <map>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "e2e_dataplane/e2e_test_util.h"
#include "testing/test_util.h"

namespace sluice::e2e {
namespace {

constexpr int64_t kN = 1500;

std::unique_ptr<local::LocalDataService> StartWithDefault(const sluice::testing::TempDir& dir,
                                                          std::vector<std::string> extra_flags = {}) {
  const std::string spec = dir.File("default.yaml");
  sluice::testing::WriteFile(spec, absl::StrCat("name: the-default\nsource: {range: {stop: ", kN, ", split_size: 50}}\n"));
  auto options = TestServiceOptions();
  options.dispatcher_flags.push_back(absl::StrCat("--pipeline=", spec));
  for (auto& f : extra_flags) options.dispatcher_flags.push_back(std::move(f));
  return StartService(2, options);
}

TEST_CASE("Default pipeline: clients without a pipeline read the dispatcher's --pipeline") {
  sluice::testing::TempDir dir;
  auto service = StartWithDefault(dir);
  auto state = service->GetState();
  REQUIRE(state.ok());
  const std::string default_id = state->default_dataset_id();
  CHECK(!default_id.empty());
  CHECK(service->dispatcher().process->CountLines("default pipeline registered") == 1);

  SECTION("the C++ client") {
    client::DataServiceClientOptions o;
    o.dispatcher_address = service->dispatcher_address();
    o.sharding = service::SHARDING_DYNAMIC;
    o.job_name = "cpp";
    o.heartbeat_interval = absl::Milliseconds(100);
    auto client = MakeClient(o);
    CHECK(client->dataset_id() == default_id);
    std::vector<int64_t> values;
    for (const pipeline::Element& e : *client) values.push_back(IntField(e));
    CHECK(client->status().ok());
    INFO(service->Logs());
    CHECK(CountProblems(Counts(values), kN, 1) == "");
    // Naming the same pipeline explicitly is the same dataset.
    auto explicit_options = ClientOptions(service->dispatcher_address(),
                                          Pipeline(absl::StrCat("source: {range: {stop: ", kN, ", split_size: 50}}\n")),
                                          service::SHARDING_OFF);
    auto explicit_client = MakeClient(explicit_options);
    CHECK(explicit_client->dataset_id() == default_id);
  }
  SECTION("the Python client") {
    // Debian's interpreter with the module from the build tree, as the Python tests run it.
    const std::string script = dir.File("read_default.py");
    sluice::testing::WriteFile(script,
                               "import sys, sluice\n"
                               "ds = sluice.Dataset(sys.argv[1], job_name='py', processing_mode='distributed_epoch',\n"
                               "                    heartbeat_interval_s=0.1)\n"
                               "assert ds.pipeline is None\n"
                               "values = sorted(int(e['value']) for e in ds)\n"
                               "print('read', len(values), len(set(values)), values[0], values[-1], ds.iterator.dataset_id,\n"
                               "      flush=True)\n");
    local::ChildProcessOptions child;
    child.argv = {"/usr/bin/env", absl::StrCat("PYTHONPATH=", sluice::testing::BinaryDir(), "/python"),
                  "PYTHONDONTWRITEBYTECODE=1", "/usr/bin/python3", script, service->dispatcher_address()};
    auto python = local::ChildProcess::Start(child);
    REQUIRE(python.ok());
    auto status = (*python)->Wait(absl::Seconds(60));
    INFO((*python)->Output() << "\n" << service->Logs());
    REQUIRE(status.ok());
    CHECK(WIFEXITED(*status));
    CHECK(WEXITSTATUS(*status) == 0);
    auto line = (*python)->WaitForLine("read ", absl::Seconds(1));
    REQUIRE(line.ok());
    CHECK(absl::StrContains(*line, absl::StrCat("read ", kN, " ", kN, " 0 ", kN - 1, " ", default_id)));
  }
}

TEST_CASE("Default pipeline: --sharing makes OFF jobs cross-job shared - a client can still say no") {
  sluice::testing::TempDir dir;
  auto service = StartWithDefault(dir, {"--sharing"});
  client::DataServiceClientOptions o;
  o.dispatcher_address = service->dispatcher_address();
  o.heartbeat_interval = absl::Milliseconds(100);
  o.job_name = "shared";
  auto shared = MakeClient(o);
  o.job_name = "private";
  o.cross_job_sharing = false;
  auto unshared = MakeClient(o);
  auto state = service->GetState();
  REQUIRE(state.ok());
  std::map<std::string, bool> sharing;
  for (const auto& j : state->jobs()) sharing[j.spec().job_name()] = j.spec().cross_job_sharing();
  CHECK(sharing == std::map<std::string, bool>{{"private", false}, {"shared", true}});
  INFO(service->Logs());
  CHECK(CountProblems(Counts(ReadAll(*shared)), kN, 2) == "");
  CHECK(CountProblems(Counts(ReadAll(*unshared)), kN, 2) == "");
}

TEST_CASE("Default pipeline: a bad one stops the dispatcher with an error naming its source") {
  sluice::testing::TempDir dir;
  const std::string spec = dir.File("bad.yaml");
  sluice::testing::WriteFile(spec, "source: {range: {stop: 10}}\nsteps:\n  - no_such_step: {}\n");
  local::ChildProcessOptions child;
  child.argv = {sluice::testing::BinaryDir() + "/bin/sluice-dispatcher", "--port=0", "--metrics_port=-1",
                absl::StrCat("--pipeline=", spec)};
  auto dispatcher = local::ChildProcess::Start(child);
  REQUIRE(dispatcher.ok());
  auto status = (*dispatcher)->Wait(absl::Seconds(30));
  REQUIRE(status.ok());
  INFO((*dispatcher)->Output());
  CHECK(WIFEXITED(*status));
  CHECK(WEXITSTATUS(*status) == 1);
  CHECK(absl::StrContains((*dispatcher)->Output(), absl::StrCat("--pipeline '", spec, "'")));
  CHECK(absl::StrContains((*dispatcher)->Output(), "no_such_step"));
  CHECK((*dispatcher)->CountLines("msg=listening") == 0);

  // Without a default pipeline an empty dataset_id is refused, naming the flag.
  auto service = StartService(1, TestServiceOptions());
  client::DataServiceClientOptions o;
  o.dispatcher_address = service->dispatcher_address();
  o.create_timeout = absl::Seconds(10);
  auto refused = client::DataServiceClient::Create(o);
  REQUIRE(!refused.ok());
  CHECK(refused.status().code() == absl::StatusCode::kFailedPrecondition);
  CHECK(absl::StrContains(refused.status().message(),
                          "dataset_id is empty and this dispatcher serves no default pipeline (start it with --pipeline)"));
}

}  // namespace
}  // namespace sluice::e2e
