// The real sluice-dispatcher binary with workers and a client: its YAML --config (file values
// apply, command-line flags win, a bad file stops it), and a restart after kill -9 from a
// compacted journal (the newest snapshot plus the updates after it) in the middle of a job.
#include <sys/wait.h>

#include <catch2/catch.hpp>

#include <filesystem>
#include <iostream>
#include <optional>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "e2e_dataplane/e2e_test_util.h"
#include "testing/test_util.h"

namespace sluice::e2e {
namespace {

constexpr int64_t kElements = 6000;
constexpr int64_t kSplitSize = 50;
constexpr int64_t kPadLength = 512;  // 4 KiB elements: a client that stops reading stalls the workers

client::DataServiceClientOptions PausableClient(const local::LocalDataService& service) {
  auto o = ClientOptions(service.dispatcher_address(), PaddedRangePipeline(kElements, kSplitSize, kPadLength),
                         service::SHARDING_DYNAMIC);
  o.compression = service::COMPRESSION_NONE;
  o.max_buffered_bytes = 32 << 10;
  o.max_elements_per_response = 16;
  return o;
}

int64_t IntOf(const std::string& line, const std::string& key) {
  auto text = local::LogfmtField(line, key);
  INFO(line);
  REQUIRE(text.has_value());
  int64_t value = 0;
  REQUIRE(absl::SimpleAtoi(*text, &value));
  return value;
}

std::vector<std::string> LinesWith(const local::ChildProcess& process, const std::string& text) {
  std::vector<std::string> out;
  std::istringstream lines(process.Output());
  std::string line;
  while (std::getline(lines, line)) {
    if (line.find(text) != std::string::npos) out.push_back(line);
  }
  return out;
}

TEST_CASE("sluice-dispatcher --config file.yaml: the file's values apply, command-line flags win") {
  sluice::testing::TempDir tmp;
  const std::string journal_dir = tmp.File("journal-from-file");
  const std::string config = tmp.File("dispatcher.yaml");
  sluice::testing::WriteFile(config, absl::StrCat("# flag names as keys\n",
                                                  "journal_dir: ", journal_dir, "\n",
                                                  "snapshot_every: 10\n",
                                                  "dataservice: from-file\n",
                                                  "worker_timeout_ms: 600000\n"));
  // LocalDataService passes --worker_timeout_ms=2000 (and ports, heartbeats) on the command line.
  auto options = TestServiceOptions(/*worker_timeout_ms=*/2000);
  options.dispatcher_flags.push_back("--config=" + config);
  options.dispatcher_flags.push_back("--dataservice=from-flags");
  auto service = StartService(1, options);
  INFO(service->Logs());

  // From the file: the journal directory (and its snapshot interval, below).
  auto replayed = service->dispatcher().process->WaitForLine("msg=\"journal replayed\"", absl::Seconds(10));
  REQUIRE(replayed.ok());
  CHECK(local::LogfmtField(*replayed, "dir") == journal_dir);
  CHECK(std::filesystem::exists(journal_dir));
  // From the command line, over the file: the metrics label ...
  auto listening = service->dispatcher().process->WaitForLine("msg=listening", absl::Seconds(10));
  REQUIRE(listening.ok());
  CHECK(local::LogfmtField(*listening, "dataservice") == "from-flags");
  auto samples = service->ScrapeDispatcher();
  REQUIRE(samples.ok());
  CHECK(local::CountSamples(*samples, "sluice_dispatcher_jobs", {{"dataservice", "from-flags"}}) == 1);
  CHECK(local::CountSamples(*samples, "sluice_dispatcher_jobs", {{"dataservice", "from-file"}}) == 0);

  // A job journals more than 10 updates: snapshots are written into the file's journal directory.
  auto client = MakeClient(ClientOptions(service->dispatcher_address(), RangePipeline(2000, 20), service::SHARDING_DYNAMIC));
  const std::vector<int64_t> values = ReadAll(*client);
  CHECK(CountProblems(Counts(values), 2000, 1) == "");
  CHECK(PollUntil([&] {
    auto s = service->ScrapeDispatcher();
    return s.ok() && local::SumSamples(*s, "sluice_dispatcher_snapshots_total") >= 1;
  }));
  bool snapshot_on_disk = false;
  for (const auto& entry : std::filesystem::directory_iterator(journal_dir)) {
    snapshot_on_disk |= absl::EndsWith(entry.path().filename().string(), ".snap");
  }
  CHECK(snapshot_on_disk);

  // ... and the worker timeout: a killed worker is removed after the command line's 2 s, not the
  // file's 10 minutes.
  service->KillWorker(0);
  CHECK(PollUntil([&] {
    auto state = service->GetState();
    return state.ok() && state->workers_size() == 0;
  }, absl::Seconds(60)));
  auto after = service->ScrapeDispatcher();
  REQUIRE(after.ok());
  CHECK(local::SumSamples(*after, "sluice_dispatcher_worker_removals_total", {{"reason", "heartbeat timeout"}}) == 1);
}

TEST_CASE("sluice-dispatcher --config with an unknown key or a missing file does not start") {
  sluice::testing::TempDir tmp;
  const std::string config = tmp.File("bad.yaml");
  sluice::testing::WriteFile(config, "port: 0\nno_such_flag: 3\n");
  const std::string binary = sluice::testing::BinaryDir() + "/bin/sluice-dispatcher";
  struct Case {
    std::string config;
    std::string error;
  };
  for (const Case& c : {Case{config, absl::StrCat(config, ":2: unknown key 'no_such_flag'")},
                        Case{tmp.File("missing.yaml"), absl::StrCat("cannot read '", tmp.File("missing.yaml"), "'")}}) {
    INFO(c.config);
    local::ChildProcessOptions child;
    child.argv = {binary, "--config=" + c.config, "--listen_host=127.0.0.1", "--metrics_port=-1"};
    auto process = local::ChildProcess::Start(child);
    REQUIRE(process.ok());
    auto status = (*process)->Wait(absl::Seconds(30));
    REQUIRE(status.ok());
    INFO((*process)->Output());
    CHECK(WIFEXITED(*status));
    CHECK(WEXITSTATUS(*status) != 0);
    CHECK((*process)->CountLines(c.error) == 1);
    CHECK((*process)->CountLines("msg=listening") == 0);
  }
}

TEST_CASE("kill -9 of a dispatcher with snapshots mid-job: it restarts from the newest snapshot and the job continues exactly once") {
  sluice::testing::TempDir tmp;
  auto options = TestServiceOptions();
  options.journal_dir = tmp.File("journal");
  // A snapshot after every 20 updates (checked at each 20 ms tick): the epoch's split starts,
  // leases and ends journal hundreds.
  options.dispatcher_flags.push_back("--snapshot_every=20");
  options.dispatcher_flags.push_back("--tick_interval_ms=20");
  auto service = StartService(2, options);
  const auto client_options = PausableClient(*service);
  auto client = MakeClient(client_options);
  std::vector<int64_t> values = ReadSome(*client, 1500);
  REQUIRE(values.size() == 1500);
  // Paused: the job cannot end before the restart.
  REQUIRE(PollUntil([&] { return client->stats().buffered_bytes >= client_options.max_buffered_bytes; }));
  local::ChildProcess& first = *service->dispatcher().process;
  INFO(service->Logs());
  REQUIRE(PollUntil([&] { return first.CountLines("msg=\"journal snapshot written\"") >= 1; }));
  auto before = service->GetState();
  REQUIRE(before.ok());
  REQUIRE(before->jobs_size() == 1);
  const int64_t job_id = before->jobs(0).job_id();
  CHECK_FALSE(before->jobs(0).finished());

  // The newest snapshot the first process reported before it was killed (it may write another one
  // between this look and the kill; the restart must use that one or a newer one).
  const std::vector<std::string> written = LinesWith(first, "msg=\"journal snapshot written\"");
  REQUIRE_FALSE(written.empty());
  const int64_t newest_reported = IntOf(written.back(), "sequence");
  service->KillDispatcher();
  REQUIRE(service->StartDispatcher().ok());
  auto replayed = service->dispatcher().process->WaitForLine("msg=\"journal replayed\"", absl::Seconds(10));
  REQUIRE(replayed.ok());
  INFO(*replayed << "\n" << service->Logs());

  // The replay read a snapshot (named by its last sequence) and only the updates after it.
  const std::optional<std::string> snapshot = local::LogfmtField(*replayed, "snapshot");
  REQUIRE(snapshot.has_value());
  const std::string snapshot_name = std::filesystem::path(*snapshot).filename().string();
  REQUIRE(absl::StartsWith(snapshot_name, "snapshot-"));
  REQUIRE(absl::EndsWith(snapshot_name, ".snap"));
  int64_t snapshot_sequence = 0;
  REQUIRE(absl::SimpleAtoi(snapshot_name.substr(9, snapshot_name.size() - 9 - 5), &snapshot_sequence));
  const int64_t updates = IntOf(*replayed, "updates");
  const int64_t last_sequence = IntOf(*replayed, "last_sequence");
  std::cout << "restart from a snapshot: snapshot at sequence " << snapshot_sequence << ", " << updates
            << " updates replayed after it, last sequence " << last_sequence << std::endl;
  CHECK(snapshot_sequence >= newest_reported);
  CHECK(updates == last_sequence - snapshot_sequence);
  CHECK(updates < last_sequence);

  // Same job, unfinished; the client and workers carry on with it: every element exactly once.
  // (The first calls over a channel to the killed process may fail: ask until it answers.)
  absl::StatusOr<service::GetStateResponse> after;
  CHECK(PollUntil([&] { return (after = service->GetState()).ok(); }));
  INFO(after.status().ToString());
  REQUIRE(after.ok());
  REQUIRE(after->jobs_size() == 1);
  CHECK(after->jobs(0).job_id() == job_id);
  CHECK_FALSE(after->jobs(0).finished());
  std::vector<int64_t> rest = ReadAll(*client, "value", absl::Seconds(90));
  values.insert(values.end(), rest.begin(), rest.end());
  CHECK(values.size() == static_cast<size_t>(kElements));
  CHECK(CountProblems(Counts(values), kElements, 1) == "");
  CHECK(client->stats().job_finished);
}

}  // namespace
}  // namespace sluice::e2e
