// Coordinated reads with real processes when a round is not ready in time: one of two consumers
// stops taking elements (a stalled trainer), so the worker serving the next rounds cannot complete
// the round it bound for both; after --round_timeout_ms the other consumer's rounds are skipped.
// Both consumers must skip the same rounds, and the rounds they receive must still come from the
// worker the round-robin rule names, in that worker's order.
#include <catch2/catch.hpp>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <set>
#include <sstream>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "e2e_dataplane/e2e_test_util.h"
#include "testing/test_util.h"

namespace sluice::e2e {
namespace {

using client::DataServiceClient;

// The rounds a worker's log says it skipped ("round skipped" is logged at debug level, once per
// round: by the first consumer whose wait reached the round's deadline).
std::set<int64_t> SkippedRounds(const local::ChildProcess& worker) {
  std::set<int64_t> rounds;
  std::istringstream lines(worker.Output());
  std::string line;
  while (std::getline(lines, line)) {
    if (line.find("msg=\"round skipped\"") == std::string::npos) continue;
    int64_t round = -1;
    auto field = local::LogfmtField(line, "round");
    REQUIRE(field.has_value());
    REQUIRE(absl::SimpleAtoi(*field, &round));
    rounds.insert(round);
  }
  return rounds;
}

TEST_CASE("Coordinated reads: a consumer that stalls makes both skip the same rounds, then both carry on") {
  sluice::testing::TempDir tmp;
  constexpr int kConsumers = 2;
  constexpr int kLines = 400;  // per worker: 200 rounds of 2 elements each
  constexpr int kPauseAfter = 40;  // consumer 1 stops taking elements after this many
  constexpr int kSkipsWhilePaused = 3;
  auto options = TestServiceOptions();
  // Rounds are skipped after 300 ms; the debug level logs each skipped round.
  options.worker_flags = {"--round_timeout_ms=300", "--log_level=debug"};
  options.dispatcher_working_dir = tmp.File("dispatcher");
  WriteWorkerData(options.dispatcher_working_dir, 0, kLines);
  auto service = std::make_unique<local::LocalDataService>(options);
  REQUIRE(service->StartDispatcher().ok());
  AddWorkersWithOwnData(*service, tmp.File("worker"), 2, kLines);
  const auto def = Pipeline("source: {jsonl: {files: data.jsonl}}\n");

  std::vector<std::unique_ptr<DataServiceClient>> consumers;
  for (int c = 0; c < kConsumers; ++c) {
    auto o = ClientOptions(service->dispatcher_address(), def, service::SHARDING_OFF);
    o.job_name = "stalling";
    o.num_consumers = kConsumers;
    o.consumer_index = c;
    // One round in hand at most: a consumer that stops taking elements stops fetching rounds.
    o.max_outstanding_requests = 1;
    consumers.push_back(MakeClient(o));
  }

  // Each consumer reads on a thread of its own, as trainers would; consumer 1 stops after
  // kPauseAfter elements until the test lets it go on.
  std::vector<std::vector<std::pair<int64_t, int64_t>>> got(kConsumers);
  std::vector<std::string> errors(kConsumers);
  absl::Mutex mu;
  bool released = false;
  std::atomic<int> paused_at{-1};
  std::vector<std::thread> threads;
  for (int c = 0; c < kConsumers; ++c) {
    threads.emplace_back([&, c] {
      while (true) {
        if (c == 1 && static_cast<int>(got[1].size()) == kPauseAfter) {
          paused_at = kPauseAfter;
          absl::MutexLock lock(&mu);
          mu.Await(absl::Condition(&released));
        }
        auto next = consumers[static_cast<size_t>(c)]->GetNext(absl::Seconds(60));
        if (!next.ok()) {
          errors[static_cast<size_t>(c)] = next.status().ToString();
          return;
        }
        if (!next->has_value()) return;
        auto w = (*next)->Get("w"), i = (*next)->Get("i");
        if (!w.ok() || !i.ok()) {
          errors[static_cast<size_t>(c)] = "an element without w or i";
          return;
        }
        got[static_cast<size_t>(c)].emplace_back(*(*w)->AsInt64(), *(*i)->AsInt64());
      }
    });
  }
  auto release = [&] {
    absl::MutexLock lock(&mu);
    released = true;
  };
  // While consumer 1 holds back, consumer 0's rounds time out: wait until it skipped a few.
  const bool skipped_while_paused = PollUntil([&] {
    return paused_at.load() >= 0 && consumers[0]->stats().rounds_skipped >= kSkipsWhilePaused;
  }, absl::Seconds(60));
  const int64_t skipped_at_release = consumers[0]->stats().rounds_skipped;
  release();
  for (auto& t : threads) t.join();
  INFO(service->Logs());
  REQUIRE(skipped_while_paused);
  for (int c = 0; c < kConsumers; ++c) {
    INFO("consumer " << c);
    CHECK(errors[static_cast<size_t>(c)] == "");
  }

  // Which worker serves round r: the task at position r mod 2 among the job's tasks by task_id.
  auto state = service->GetState();
  REQUIRE(state.ok());
  std::map<int64_t, int> task_worker;
  for (const auto& w : state->workers()) {
    for (int64_t t : w.task_ids()) task_worker[t] = w.address() == service->worker(0).address ? 0 : 1;
  }
  REQUIRE(task_worker.size() == 2);
  std::vector<int> serving;
  for (const auto& [task, worker] : task_worker) serving.push_back(worker);
  REQUIRE(serving[0] != serving[1]);

  // The rounds skipped, from the workers' logs (a round is skipped by the worker that serves it).
  std::set<int64_t> skipped;
  for (int w = 0; w < 2; ++w) {
    for (int64_t r : SkippedRounds(*service->worker(w).process)) {
      INFO("round " << r << " skipped by worker " << w);
      CHECK(serving[static_cast<size_t>(r % 2)] == w);
      skipped.insert(r);
    }
  }
  CHECK(static_cast<int64_t>(skipped.size()) >= kSkipsWhilePaused);
  // Both consumers skipped exactly those rounds.
  for (int c = 0; c < kConsumers; ++c) {
    INFO("consumer " << c);
    CHECK(consumers[static_cast<size_t>(c)]->stats().rounds_skipped == static_cast<int64_t>(skipped.size()));
  }
  // Round by round: the rounds not skipped were received by both consumers, in order, from the
  // worker the rule names, each worker's rounds in its own order (a skipped round takes nothing
  // from the worker's data): consumer c holds the c-th element of that worker's k-th served round.
  CHECK(got[0].size() == got[1].size());
  std::string problems;
  int64_t worker_rounds[2] = {0, 0};
  size_t received = 0;
  int64_t round = 0;
  for (; received < got[0].size() && problems.size() < 600; ++round) {
    if (skipped.count(round) > 0) continue;
    const int w = serving[static_cast<size_t>(round % 2)];
    for (int c = 0; c < kConsumers; ++c) {
      if (received >= got[static_cast<size_t>(c)].size()) continue;
      const auto& [wc, ic] = got[static_cast<size_t>(c)][received];
      if (wc != w || ic != worker_rounds[w] * kConsumers + c) {
        absl::StrAppend(&problems, "round ", round, " consumer ", c, " got w=", wc, " i=", ic, " (expected w=", w,
                        " i=", worker_rounds[w] * kConsumers + c, "); ");
      }
    }
    ++worker_rounds[w];
    ++received;
  }
  CHECK(problems == "");
  // Then both carried on to the end of the data: a skipped round takes nothing from its worker, so
  // every worker round was received but a partial last one (the first worker to run out ends the job).
  CHECK(static_cast<int64_t>(got[0].size()) >= 2 * (kLines / kConsumers) - 1);
  std::cout << "round skipping: " << skipped.size() << " rounds skipped (" << skipped_at_release
            << " by consumer 0 while consumer 1 held back), " << got[0].size() << " rounds received by each consumer"
            << std::endl;
}

}  // namespace
}  // namespace sluice::e2e
