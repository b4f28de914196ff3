// `sluice up` and `sluice dispatcher-state`, run as the real `sluice` binary: the autoscaled demo
// (one worker, workers added until the stall is under target, removed after the demand drop,
// nothing lost), a static local run (--no-autoscale), a served run that another consumer reads
// from, Ctrl-C mid-read and while serving, bad input; the report formatting is unit-tested too.
// Every check that the children are gone uses the pids the command prints.
#include <errno.h>
#include <signal.h>
#include <sys/wait.h>

#include <catch2/catch.hpp>

#include <filesystem>
#include <regex>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "local/child_process.h"
#include "e2e_dataplane/e2e_test_util.h"
#include "testing/test_util.h"
#include "tools/sluice/dataservice_commands.h"
#include "tools/sluice/trainer_process.h"

namespace sluice::e2e {
namespace {

using local::ChildProcess;
using local::ChildProcessOptions;

std::unique_ptr<ChildProcess> Sluice(std::vector<std::string> args, const std::string& working_dir = "") {
  ChildProcessOptions o;
  o.argv = {sluice::testing::BinaryDir() + "/bin/sluice"};
  o.argv.insert(o.argv.end(), args.begin(), args.end());
  o.working_dir = working_dir;
  auto child = ChildProcess::Start(std::move(o));
  INFO(child.status().ToString());
  REQUIRE(child.ok());
  return *std::move(child);
}

int ExitCode(ChildProcess& p, absl::Duration timeout = absl::Seconds(90)) {
  auto status = p.Wait(timeout);
  INFO(p.Output());
  REQUIRE(status.ok());
  REQUIRE(WIFEXITED(*status));
  return WEXITSTATUS(*status);
}

// The pids `sluice up` printed for its dispatcher and workers.
std::vector<pid_t> ChildPids(const std::string& output) {
  std::vector<pid_t> pids;
  static const std::regex pid_re("pid ([0-9]+)\\)");
  for (auto it = std::sregex_iterator(output.begin(), output.end(), pid_re); it != std::sregex_iterator(); ++it) {
    pids.push_back(static_cast<pid_t>(std::stol((*it)[1].str())));
  }
  return pids;
}

// sluice up reaps its children, so once it exited their pids name no process.
void CheckChildrenGone(const std::string& output, size_t expected) {
  const std::vector<pid_t> pids = ChildPids(output);
  CHECK(pids.size() == expected);
  for (pid_t pid : pids) {
    INFO("pid " << pid);
    CHECK((::kill(pid, 0) == -1 && errno == ESRCH));
  }
}

std::string WriteRangeSpec(const sluice::testing::TempDir& tmp, int64_t n) {
  const std::string path = tmp.File("range.yaml");
  sluice::testing::WriteFile(path, absl::StrCat("name: range\nsource: {range: {stop: ", n, ", split_size: 100}}\n"));
  return path;
}

// The number in "<label> N" of a summary line.
int64_t Figure(const std::string& output, const std::string& pattern) {
  std::smatch m;
  const std::regex re(pattern);
  if (!std::regex_search(output, m, re)) return -1;
  return std::stoll(m[1].str());
}

TEST_CASE("sluice up (autoscaled) adds workers until the stall is under target, removes them after the drop") {
  sluice::testing::TempDir tmp;
  // The defaults of the demo, with each phase allowed long enough for a loaded machine: the phases
  // end on the autoscaler's conditions (stall under target; no scale-down pending), not on time.
  auto up = Sluice({"up", "--phase-limit", "240", "--log-dir", tmp.File("logs")});
  CHECK(ExitCode(*up, absl::Minutes(9)) == 0);
  const std::string output = up->Output();
  INFO(output);
  REQUIRE(absl::StrContains(output, "== demand up"));
  REQUIRE(absl::StrContains(output, "== demand drop"));
  REQUIRE(absl::StrContains(output, "== summary"));
  // Workers were added (a "+ 1 -> N workers: ScaledUp" line), then removed after the drop.
  const size_t drop = output.find("== demand drop");
  const size_t up_line = output.find("+ 1 -> ");
  REQUIRE(up_line != std::string::npos);
  CHECK(up_line < drop);
  CHECK(absl::StrContains(output, "ScaledUp"));
  const size_t down_line = output.find("ScaledDown", drop);
  CHECK(down_line != std::string::npos);
  CHECK(absl::StrContains(output.substr(drop), "drained and stopped worker-"));
  CHECK(Figure(output, "([0-9]+) scale-ups") >= 1);
  CHECK(Figure(output, "([0-9]+) scale-downs") >= 1);
  CHECK(Figure(output, "workers: started with 1, peak ([0-9]+)") >= 2);
  CHECK(Figure(output, "elements lost on scale-down: ([0-9]+)") == 0);
  CHECK(Figure(output, "scale-downs on missing data: ([0-9]+)") == 0);
  // Every decision has its logfmt line, with its reason.
  const std::string log = sluice::testing::ReadFile(tmp.File("logs/autoscaler.log"));
  CHECK(absl::StrContains(log, "msg=decision"));
  CHECK(absl::StrContains(log, "reason=ScaledUp"));
  CHECK(absl::StrContains(log, "reason=ScaledDown"));
  // Every process it started (the dispatcher and each worker, printed as they started) is gone.
  const std::vector<pid_t> pids = ChildPids(output);
  CHECK(pids.size() >= 3);
  for (pid_t pid : pids) {
    INFO("pid " << pid);
    CHECK((::kill(pid, 0) == -1 && errno == ESRCH));
  }
}

TEST_CASE("sluice up --trainer: a PyTorch CNN through the Python client, the workers follow its train and eval phases") {
  sluice::testing::TempDir tmp;
  // Short phases: the train phase stalls on one worker, the eval phase reads nothing.
  auto up = Sluice({"up", "--trainer", "fashion-mnist-cnn", "--train-seconds", "20", "--eval-seconds", "30",
                    "--max-workers", "3", "--log-dir", tmp.File("logs")},
                   sluice::testing::SourceDir());
  CHECK(ExitCode(*up, absl::Minutes(5)) == 0);
  const std::string output = up->Output();
  INFO(output);
  REQUIRE(absl::StrContains(output, "== train: fashion-mnist-cnn"));
  REQUIRE(absl::StrContains(output, "== eval"));
  REQUIRE(absl::StrContains(output, "== summary"));
  const size_t eval = output.find("== eval");
  CHECK(output.find("ScaledUp") < eval);  // the trainer stalled on one worker
  CHECK(Figure(output, "workers: started with 1, peak ([0-9]+)") >= 2);
  CHECK(output.find("ScaledDown", eval) != std::string::npos);  // demand 0 in the eval phase
  CHECK(Figure(output, "elements lost on scale-down: ([0-9]+)") == 0);
  CHECK(Figure(output, "trainer: ([0-9]+) batches") > 0);
  CHECK(absl::StrContains(output, "test accuracy 0."));
  const std::string progress = sluice::testing::ReadFile(tmp.File("logs/trainer-progress.jsonl"));
  CHECK(absl::StrContains(progress, "\"phase\": \"train\""));
  CHECK(absl::StrContains(progress, "\"phase\": \"done\""));
  const std::vector<pid_t> pids = ChildPids(output);
  for (pid_t pid : pids) {
    INFO("pid " << pid);
    CHECK((::kill(pid, 0) == -1 && errno == ESRCH));
  }
}

TEST_CASE("the trainer's progress and result lines: malformed ones are refused, naming the field") {
  auto p = tools::ParseTrainerProgress(R"({"phase": "train", "elements": 12, "wait_s": 1.5, "step_s": 3, "loss": 2.1})");
  REQUIRE(p.ok());
  CHECK(p->phase == "train");
  CHECK(p->elements == 12);
  CHECK(p->wait_seconds == 1.5);
  CHECK(p->step_seconds == 3);
  auto no_loss = tools::ParseTrainerProgress(R"({"phase": "eval", "elements": 0, "wait_s": 0, "step_s": 0})");
  REQUIRE(no_loss.ok());
  CHECK(no_loss->loss == -1);
  for (const auto& [line, field] : std::vector<std::pair<std::string, std::string>>{
           {"not json", "not a JSON object"},
           {"[1, 2]", "not a JSON object"},
           {R"({"elements": 1, "wait_s": 0, "step_s": 0})", "'phase'"},
           {R"({"phase": "warmup", "elements": 1, "wait_s": 0, "step_s": 0})", "'phase' is 'warmup'"},
           {R"({"phase": "train", "wait_s": 0, "step_s": 0})", "'elements' is missing"},
           {R"({"phase": "train", "elements": "3", "wait_s": 0, "step_s": 0})", "'elements' is not a number"},
           {R"({"phase": "train", "elements": 3, "wait_s": -1, "step_s": 0})", "'wait_s' is negative"},
       }) {
    auto bad = tools::ParseTrainerProgress(line);
    INFO(line);
    REQUIRE_FALSE(bad.ok());
    CHECK(absl::StrContains(bad.status().message(), field));
  }
  auto r = tools::ParseTrainerResult(
      R"({"elements": 900, "train_seconds": 20.5, "stall": 0.2, "final_loss": 0.7, "test_accuracy": null})");
  REQUIRE(r.ok());
  CHECK(r->elements == 900);
  CHECK(r->test_accuracy == -1);
  auto bad = tools::ParseTrainerResult(R"({"elements": 900, "stall": 0.2})");
  REQUIRE_FALSE(bad.ok());
  CHECK(absl::StrContains(bad.status().message(), "'train_seconds' is missing"));
}

TEST_CASE("sluice up runs a dispatcher and workers, reads the pipeline through them and reports") {
  sluice::testing::TempDir tmp;
  auto up = Sluice({"up", "--no-autoscale", "--workers", "2", "--pipeline", WriteRangeSpec(tmp, 3000), "--quiet", "--log-dir",
                    tmp.File("logs")});
  CHECK(ExitCode(*up) == 0);
  const std::string output = up->Output();
  INFO(output);
  CHECK(absl::StrContains(output, "read 3000 elements"));
  CHECK(absl::StrContains(output, "stall ratio "));
  CHECK(absl::StrContains(output, "splits handed out 30 of 30"));
  CHECK(up->CountLines("worker 127.0.0.1:") == 2);  // one report line per worker
  CHECK(absl::StrContains(output, "workers produced 3000 elements in all"));
  CheckChildrenGone(output, 3);
  // The processes' logs are where it said.
  CHECK(std::filesystem::exists(tmp.File("logs/dispatcher.log")));
  CHECK(std::filesystem::exists(tmp.File("logs/worker-1.log")));
  CHECK(absl::StrContains(sluice::testing::ReadFile(tmp.File("logs/worker-0.log")), "msg=exiting"));
}

TEST_CASE("sluice up --keep-running serves other consumers until Ctrl-C") {
  sluice::testing::TempDir tmp;
  auto up = Sluice({"up", "--no-autoscale", "--workers", "2", "--take", "0", "--keep-running", "--pipeline", WriteRangeSpec(tmp, 10),
                    "--log-dir", tmp.File("logs")});
  auto serving = up->WaitForLine("serving", absl::Seconds(60));
  INFO(up->Output());
  REQUIRE(serving.ok());
  std::smatch m;
  REQUIRE(std::regex_search(*serving, m, std::regex("dispatcher at ([0-9.]+:[0-9]+)")));
  const std::string address = m[1].str();

  // Another consumer uses the service.
  auto client = MakeClient(ClientOptions(address, RangePipeline(500, 50), service::SHARDING_DYNAMIC));
  CHECK(CountProblems(Counts(ReadAll(*client)), 500, 1) == "");
  client.reset();
  // dispatcher-state shows the workers and the job.
  auto state = Sluice({"dispatcher-state", address});
  CHECK(ExitCode(*state) == 0);
  CHECK(absl::StrContains(state->Output(), "workers: 2"));
  CHECK(absl::StrContains(state->Output(), "jobs: 1"));
  auto json = Sluice({"dispatcher-state", "--json", address});
  CHECK(ExitCode(*json) == 0);
  CHECK(absl::StrContains(json->Output(), "\"splits_total\": \"10\""));

  up->Signal(SIGINT);
  CHECK(ExitCode(*up) == 0);
  CheckChildrenGone(up->Output(), 3);
}

TEST_CASE("sluice up: Ctrl-C while reading stops and tears everything down") {
  sluice::testing::TempDir tmp;
  // Slow steps keep the consumer reading for much longer than the test takes.
  auto up = Sluice({"up", "--no-autoscale", "--workers", "1", "--pipeline", WriteRangeSpec(tmp, 1000000), "--step-ms", "5",
                    "--log-dir", tmp.File("logs")});
  REQUIRE(up->WaitForLine("reading", absl::Seconds(60)).ok());
  up->Signal(SIGINT);
  CHECK(ExitCode(*up) == 130);
  INFO(up->Output());
  CHECK(up->CountLines("(interrupted)") == 1);
  CheckChildrenGone(up->Output(), 2);
}

TEST_CASE("sluice up reads the default example pipeline (Fashion-MNIST)") {
  if (!std::filesystem::exists("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz")) {
    WARN("Debian's dataset-fashion-mnist is not installed: skipped");
    return;
  }
  auto up = Sluice({"up", "--no-autoscale", "--take", "5", "--quiet"}, sluice::testing::SourceDir());
  CHECK(ExitCode(*up) == 0);
  INFO(up->Output());
  CHECK(absl::StrContains(up->Output(), "examples/pipelines/fashion_mnist.yaml"));
  CHECK(absl::StrContains(up->Output(), "read 5 elements"));
  CheckChildrenGone(up->Output(), 3);
}

TEST_CASE("sluice up and dispatcher-state reject bad input with clear errors") {
  sluice::testing::TempDir tmp;
  auto missing = Sluice({"up", "--pipeline", "/nonexistent/sluice-spec.yaml", "--log-dir", tmp.File("logs")});
  CHECK(ExitCode(*missing) == 1);
  CHECK(absl::StrContains(missing->Output(), "/nonexistent/sluice-spec.yaml"));
  CHECK(ChildPids(missing->Output()).empty());  // nothing was started
  auto sharding = Sluice({"up", "--sharding", "sideways", "--pipeline", WriteRangeSpec(tmp, 10)});
  CHECK(ExitCode(*sharding) == 1);
  CHECK(absl::StrContains(sharding->Output(), "--sharding"));
  auto workers = Sluice({"up", "--workers", "0"});
  CHECK(ExitCode(*workers) != 0);
  CHECK(absl::StrContains(workers->Output(), "--workers"));
  auto stall = Sluice({"up", "--target-stall", "1.5", "--log-dir", tmp.File("logs2")});
  CHECK(ExitCode(*stall) == 1);
  CHECK(absl::StrContains(stall->Output(), "--target-stall"));
  CHECK(ChildPids(stall->Output()).empty());
  auto max = Sluice({"up", "--workers", "3", "--max-workers", "2", "--log-dir", tmp.File("logs3")});
  CHECK(ExitCode(*max) == 1);
  CHECK(absl::StrContains(max->Output(), "--max-workers"));
  auto unreachable = Sluice({"dispatcher-state", "127.0.0.1:1"});
  CHECK(ExitCode(*unreachable) == 1);
  CHECK(absl::StrContains(unreachable->Output(), "GetState from 127.0.0.1:1 failed"));
}

TEST_CASE("FormatAutoscaledUpReport") {
  cli::AutoscaledUpReport r;
  r.elements = 1000;
  r.seconds = 10;
  r.decisions = 20;
  r.scale_ups = 1;
  r.scale_downs = 2;
  r.peak_workers = 4;
  r.final_workers = 1;
  r.worker_seconds = 35.5;
  r.high_stall = 0.02;
  r.decisions_to_no_stall = 2;
  const std::string text = cli::FormatAutoscaledUpReport(r, 0.1);
  CHECK(absl::StrContains(text, "read 1000 elements in 10.0 s: 100.0 elements/s\n"));
  CHECK(absl::StrContains(text, "decisions 20: 1 scale-ups, 2 scale-downs, 0 held on missing data"));
  CHECK(absl::StrContains(text, "workers: started with 1, peak 4, now 1; 35.5 worker-seconds"));
  CHECK(absl::StrContains(text, "stall (target 0.100): 0.020 at the peak's end, unknown after the drop"));
  CHECK(absl::StrContains(text, "decisions from the stall's onset to a stall under target: 2"));
  CHECK(absl::StrContains(text, "elements lost on scale-down: 0"));
  r.decisions_to_no_stall = -1;
  CHECK(absl::StrContains(cli::FormatAutoscaledUpReport(r, 0.1), "not reached"));
}

TEST_CASE("FormatUpReport and FormatDispatcherState") {
  cli::UpReport r;
  r.elements = 200;
  r.bytes = 4'000'000;
  r.seconds = 2;
  r.wait_seconds = 0.5;
  r.step_seconds = 2;
  r.finished = true;
  r.splits_served = 10;
  r.splits_total = 10;
  r.worker_elements = {{"127.0.0.1:1", 120}, {"127.0.0.1:2", 80}};
  const std::string text = cli::FormatUpReport(r);
  CHECK(absl::StrContains(text, "read 200 elements (4.0 MB) in 2.00 s: 100.0 elements/s, 2.0 MB/s\n"));
  CHECK(absl::StrContains(text, "stall ratio 0.250"));
  CHECK(absl::StrContains(text, "splits handed out 10 of 10"));
  CHECK(absl::StrContains(text, "127.0.0.1:1           produced 120 elements"));
  CHECK(absl::StrContains(text, "workers produced 200 elements in all"));
  r.interrupted = true;
  CHECK(absl::StrContains(cli::FormatUpReport(r), "(interrupted)"));

  service::GetStateResponse state;
  auto* w = state.add_workers();
  w->set_address("127.0.0.1:7");
  w->set_host("127.0.0.1");
  w->set_placement(service::PLACEMENT_LOCAL);
  w->add_task_ids(3);
  auto* j = state.add_jobs();
  j->set_job_id(4);
  j->mutable_spec()->set_job_name("train");
  j->mutable_spec()->set_sharding(service::SHARDING_DYNAMIC);
  j->set_splits_served(5);
  j->set_splits_total(9);
  j->mutable_metrics()->set_wait_seconds_total(1);
  j->mutable_metrics()->set_step_seconds_total(4);
  const std::string table = cli::FormatDispatcherState(state);
  CHECK(absl::StrContains(table, "workers: 1"));
  CHECK(absl::StrContains(table, "127.0.0.1:7"));
  CHECK(absl::StrContains(table, "local"));
  CHECK(absl::StrContains(table, "train"));
  CHECK(absl::StrContains(table, "dynamic"));
  CHECK(absl::StrContains(table, "5/9"));
  CHECK(absl::StrContains(table, "0.250"));
}

}  // namespace
}  // namespace sluice::e2e
