// DispatcherSplitProvider against an in-memory fake dispatcher: batching, prefetch, started-split
// acknowledgements, epochs, retries, errors and cancellation.
#include "dataplane/worker/split_provider.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <set>
#include <thread>

#include "dataplane/worker/worker_test_util.h"

namespace sluice::worker {
namespace {

using testing::FakeDispatcher;
using testing::WaitUntil;

std::vector<pipeline::Split> MakeSplits(int n) {
  std::vector<pipeline::Split> out;
  for (int i = 0; i < n; ++i) out.push_back(pipeline::Split{static_cast<uint64_t>(i), "range", i, i + 1});
  return out;
}

SplitProviderOptions FastRetry() {
  SplitProviderOptions o;
  o.initial_backoff = absl::Milliseconds(1);
  o.max_backoff = absl::Milliseconds(4);
  return o;
}

// Reads until the end of the epoch.
std::vector<uint64_t> ReadEpoch(DispatcherSplitProvider& provider) {
  std::vector<uint64_t> out;
  while (true) {
    auto next = provider.GetNext();
    REQUIRE(next.ok());
    if (!next->has_value()) return out;
    out.push_back((*next)->index);
  }
}

TEST_CASE("worker_split_provider fetches splits in batches, far fewer calls than splits") {
  FakeDispatcher fake;
  fake.SetSplits(MakeSplits(100));
  DispatcherSplitProvider provider(&fake, 7, "w:1", FastRetry());
  std::vector<uint64_t> got = ReadEpoch(provider);
  std::vector<uint64_t> expected(100);
  for (uint64_t i = 0; i < 100; ++i) expected[i] = i;
  CHECK(got == expected);
  // A fetch happens only when at most max_splits/4 = 2 splits are queued and asks for the rest of
  // max_splits = 8, so every call but the last brings at least 6 splits. (Calls without splits are
  // the polls at the end of the epoch, until the last starts are acknowledged.)
  CHECK(fake.calls_with_splits() <= 100 / 6 + 1);
  for (const auto& request : fake.get_splits_requests()) {
    CHECK(request.task_id() == 7);
    CHECK(request.worker_address() == "w:1");
    if (request.max_splits() == 0) continue;  // a call that only acknowledges starts
    CHECK(request.max_splits() >= 6);
    CHECK(request.max_splits() <= 8);
  }
}

TEST_CASE("worker_split_provider counts its calls, its starts and where its reader waited") {
  FakeDispatcher fake;
  fake.SetSplits(MakeSplits(20));
  DispatcherSplitProvider provider(&fake, 3, "w:1", FastRetry());
  const absl::Time start = absl::Now();
  CHECK(ReadEpoch(provider).size() == 20);
  const double elapsed = absl::ToDoubleSeconds(absl::Now() - start);
  const SplitProviderStats stats = provider.stats();
  CHECK(stats.splits_started == 20);
  CHECK(stats.rpcs == provider.get_splits_calls());
  CHECK(stats.rpcs >= 20);  // every start is acknowledged by a call before the split is read
  CHECK(stats.rpc_seconds > 0);
  // Waits are parts of the reader's own time: none is negative and together they fit in it.
  for (double w : {stats.wait_first_split_seconds, stats.wait_split_seconds, stats.wait_end_seconds,
                   stats.wait_ack_seconds, stats.wait_lease_seconds, stats.wait_epoch_end_seconds}) {
    CHECK(w >= 0);
  }
  CHECK(stats.wait_first_split_seconds + stats.wait_split_seconds + stats.wait_end_seconds + stats.wait_ack_seconds +
            stats.wait_lease_seconds + stats.wait_epoch_end_seconds <=
        elapsed);
  CHECK(stats.wait_first_split_seconds > 0);  // the first fetch of the epoch
  CHECK(stats.wait_ack_seconds > 0);  // ack_before_start: each GetNext waited for its call
}

TEST_CASE("worker_split_provider hands a split to the source only after the dispatcher acknowledged its start") {
  FakeDispatcher fake;
  fake.SetSplits(MakeSplits(30));
  DispatcherSplitProvider provider(&fake, 1, "w:1", FastRetry());
  int checked = 0;
  while (true) {
    auto next = provider.GetNext();
    REQUIRE(next.ok());
    if (!next->has_value()) break;
    // Whatever the worker does from here on (a kill -9 included), the dispatcher never hands this
    // split to another worker: no element of it can be read twice.
    CHECK(fake.started().count((*next)->index) == 1);
    ++checked;
  }
  CHECK(checked == 30);
  CHECK(provider.TakeUnreportedStarts().empty());
}

TEST_CASE("worker_split_provider: an acknowledgement that fails is retried before the split is read") {
  FakeDispatcher fake;
  fake.SetSplits(MakeSplits(20));
  DispatcherSplitProvider provider(&fake, 1, "w:1", FastRetry());
  REQUIRE(WaitUntil([&] { return fake.get_splits_calls() == 1; }));
  fake.FailNextGetSplits(2);
  auto next = provider.GetNext();
  REQUIRE(next.ok());
  REQUIRE(next->has_value());
  CHECK(fake.started().count((*next)->index) == 1);
  CHECK(provider.get_splits_calls() >= 4);  // the first fetch, two failed acks, the one that worked
}

TEST_CASE("worker_split_provider prefetches before the local queue runs dry") {
  FakeDispatcher fake;
  fake.SetSplits(MakeSplits(40));
  DispatcherSplitProvider provider(&fake, 1, "w:1", FastRetry());
  // The first batch is fetched before anyone asks.
  REQUIRE(WaitUntil([&] { return fake.get_splits_calls() == 1; }));
  CHECK(fake.handed_out().size() == 8);
  // Taking 6 of the 8 leaves 2 queued: the refill starts while splits are still queued locally.
  // (Calls in between only acknowledge starts: they ask for no splits.)
  for (int i = 0; i < 6; ++i) REQUIRE(provider.GetNext().ok());
  auto refills = [&] {
    std::vector<service::GetSplitsRequest> out;
    for (const auto& r : fake.get_splits_requests()) {
      if (r.max_splits() > 0) out.push_back(r);
    }
    return out;
  };
  REQUIRE(WaitUntil([&] { return refills().size() == 2; }));
  CHECK(provider.splits_started() == 6);
  CHECK(refills().at(1).max_splits() == 6);
}

TEST_CASE("worker_split_provider acknowledges each split once, on GetSplits or through the heartbeat") {
  FakeDispatcher fake;
  fake.SetSplits(MakeSplits(50));
  SplitProviderOptions lazy = FastRetry();
  lazy.ack_before_start = false;  // starts ride on the next GetSplits or heartbeat
  DispatcherSplitProvider provider(&fake, 1, "w:1", lazy);
  std::vector<uint64_t> got = ReadEpoch(provider);
  REQUIRE(got.size() == 50);
  // Acks that went with GetSplits calls were handed out before; the rest wait for the heartbeat.
  std::multiset<uint64_t> acked = fake.started();
  std::vector<uint64_t> pending = provider.TakeUnreportedStarts();
  acked.insert(pending.begin(), pending.end());
  std::multiset<uint64_t> expected(got.begin(), got.end());
  CHECK(acked == expected);
  CHECK(provider.TakeUnreportedStarts().empty());
  // A failed heartbeat gives them back.
  provider.RestoreUnreportedStarts(pending);
  CHECK(provider.TakeUnreportedStarts() == pending);
  // Nothing is acknowledged before it was handed to the source.
  for (const auto& request : fake.get_splits_requests()) {
    for (uint64_t index : request.started_split_indices()) {
      CHECK(std::find(got.begin(), got.end(), index) != got.end());
    }
  }
}

TEST_CASE("worker_split_provider walks epochs with Reset and ends after the last") {
  FakeDispatcher fake;
  fake.SetSplits(MakeSplits(10), /*num_epochs=*/3);
  DispatcherSplitProvider provider(&fake, 1, "w:1", FastRetry());
  for (int epoch = 0; epoch < 3; ++epoch) {
    CHECK(provider.epoch() == epoch);
    std::vector<uint64_t> got = ReadEpoch(provider);
    CHECK(got.size() == 10);
    REQUIRE(provider.Reset().ok());
  }
  CHECK(ReadEpoch(provider).empty());
  for (const auto& request : fake.get_splits_requests()) CHECK(request.epoch() <= 3);
}

TEST_CASE("worker_split_provider polls while another task holds unstarted splits of the epoch") {
  // Task b prefetched splits it has not started: task a, out of splits, is told "nothing yet" (they
  // could come back to the queue if b died) until b has started them all; then both see the end,
  // and the next epoch opens.
  FakeDispatcher fake;
  fake.SetSplits(MakeSplits(20), /*num_epochs=*/2);
  DispatcherSplitProvider a(&fake, 1, "a:1", FastRetry());
  DispatcherSplitProvider b(&fake, 2, "b:1", FastRetry());
  REQUIRE(WaitUntil([&] { return fake.handed_out().size() == 16; }));  // both prefetched 8
  std::vector<uint64_t> e0a;
  std::thread reader([&] { e0a = ReadEpoch(a); });
  auto empty_answers_to_a = [&] {
    int n = 0;
    for (const auto& r : fake.get_splits_requests()) n += r.task_id() == 1 ? 1 : 0;
    return n - 2;  // beyond the first batch and the refill that took the last 4
  };
  REQUIRE(WaitUntil([&] { return empty_answers_to_a() >= 2 && fake.handed_out().size() == 20; }));
  CHECK(fake.epoch() == 0);
  std::vector<uint64_t> e0b = ReadEpoch(b);  // b starts its splits: the epoch can end
  reader.join();
  CHECK(e0a.size() == 12);
  CHECK(e0b.size() == 8);
  REQUIRE(a.Reset().ok());
  REQUIRE(b.Reset().ok());
  std::vector<uint64_t> e1a;
  std::thread reader1([&] { e1a = ReadEpoch(a); });
  std::vector<uint64_t> e1b = ReadEpoch(b);
  reader1.join();
  CHECK(fake.epoch() == 1);
  CHECK(e1a.size() + e1b.size() == 20);
}

TEST_CASE("worker_split_provider ends the epoch without waiting out its poll backoff") {
  // The last splits' starts are what the dispatcher needs to end the epoch. Polling backs off (here
  // for an hour), but a source waiting on an empty queue with starts to report cuts the wait short.
  FakeDispatcher fake;
  fake.SetSplits(MakeSplits(10));
  SplitProviderOptions options;
  options.initial_backoff = absl::Hours(1);
  options.max_backoff = absl::Hours(1);
  DispatcherSplitProvider provider(&fake, 1, "w:1", options);
  std::atomic<bool> done{false};
  std::vector<uint64_t> got;
  std::thread reader([&] {
    got = ReadEpoch(provider);
    done = true;
  });
  const bool ended = WaitUntil([&] { return done.load(); });  // hang guard
  if (!ended) provider.Cancel();
  reader.join();
  REQUIRE(ended);
  CHECK(got.size() == 10);
}

TEST_CASE("worker_split_provider retries UNAVAILABLE with backoff and loses no acknowledgement") {
  FakeDispatcher fake;
  fake.SetSplits(MakeSplits(30));
  fake.FailNextGetSplits(3);
  DispatcherSplitProvider provider(&fake, 1, "w:1", FastRetry());
  std::vector<uint64_t> got = ReadEpoch(provider);
  CHECK(got.size() == 30);
  CHECK(provider.get_splits_calls() >= 4);
  // Fail again mid-stream: acknowledgements carried by failed calls are re-sent.
  std::multiset<uint64_t> acked = fake.started();
  for (uint64_t i : provider.TakeUnreportedStarts()) acked.insert(i);
  CHECK(acked == std::multiset<uint64_t>(got.begin(), got.end()));
}

TEST_CASE("worker_split_provider re-sends acknowledgements of a failed call") {
  FakeDispatcher fake;
  fake.SetSplits(MakeSplits(40));
  DispatcherSplitProvider provider(&fake, 1, "w:1", FastRetry());
  REQUIRE(WaitUntil([&] { return fake.get_splits_calls() == 1; }));
  fake.FailNextGetSplits(2);
  std::vector<uint64_t> got = ReadEpoch(provider);
  CHECK(got.size() == 40);
  std::multiset<uint64_t> acked = fake.started();
  for (uint64_t i : provider.TakeUnreportedStarts()) acked.insert(i);
  CHECK(acked == std::multiset<uint64_t>(got.begin(), got.end()));
}

TEST_CASE("worker_split_provider reports a non-retryable error naming the task") {
  FakeDispatcher fake;
  fake.SetSplits(MakeSplits(10));
  fake.FailNextGetSplits(1, absl::StatusCode::kNotFound);
  DispatcherSplitProvider provider(&fake, 42, "w:1", FastRetry());
  auto next = provider.GetNext();
  REQUIRE_FALSE(next.ok());
  CHECK(absl::IsNotFound(next.status()));
  CHECK_THAT(std::string(next.status().message()), Catch::Contains("task_id 42"));
  CHECK(provider.get_splits_calls() == 1);
}

TEST_CASE("worker_split_provider stops promptly when cancelled during a blocked call") {
  FakeDispatcher fake;
  fake.SetSplits(MakeSplits(10));
  fake.BlockGetSplits(true);
  auto provider = std::make_unique<DispatcherSplitProvider>(&fake, 1, "w:1", FastRetry());
  std::atomic<bool> done{false};
  absl::Status result;
  std::thread reader([&] {
    result = provider->GetNext().status();
    done = true;
  });
  REQUIRE(WaitUntil([&] { return fake.get_splits_calls() == 1; }));
  provider->Cancel();
  reader.join();
  CHECK(absl::IsCancelled(result));
  CHECK(absl::IsCancelled(provider->Reset()));
  provider.reset();  // joins the fetch thread, whose call was cancelled
  CHECK(done);
}

TEST_CASE("worker_split_provider: two tasks under dynamic sharding never read a split twice") {
  FakeDispatcher fake;
  fake.SetSplits(MakeSplits(200));
  DispatcherSplitProvider a(&fake, 1, "a:1", FastRetry());
  DispatcherSplitProvider b(&fake, 2, "b:1", FastRetry());
  std::vector<uint64_t> got_a;
  std::thread reader([&] { got_a = ReadEpoch(a); });
  std::vector<uint64_t> got_b = ReadEpoch(b);
  reader.join();
  std::set<uint64_t> all(got_a.begin(), got_a.end());
  for (uint64_t i : got_b) CHECK(all.insert(i).second);
  CHECK(all.size() == 200);
}

TEST_CASE("worker_split_provider: position leases go with the start, are renewed ahead and end with the split") {
  FakeDispatcher fake;
  fake.SetSplits(MakeSplits(2));
  SplitProviderOptions options = FastRetry();
  options.lease_elements = 4;
  options.max_lease_elements = 16;
  DispatcherSplitProvider provider(&fake, 1, "w:1", options);
  auto next = provider.GetNext();
  REQUIRE(next.ok());
  REQUIRE(next->has_value());
  const pipeline::Split split = **next;
  // The first lease was acknowledged together with the start.
  CHECK(fake.leases().at(split.index) == 4);
  auto lease = provider.RenewLease(split, 0);
  REQUIRE(lease.ok());
  CHECK(lease->end == 4);
  CHECK(lease->renew_at == 2);  // renew when half is left
  // At position 2 the provider asks for more, ahead (window doubled): position + 8.
  lease = provider.RenewLease(split, 2);
  REQUIRE(lease.ok());
  CHECK(lease->end >= 4);
  CHECK(lease->end <= 10);
  // Reaching the end of what is granted blocks until the renewal is acknowledged.
  lease = provider.RenewLease(split, 4);
  REQUIRE(lease.ok());
  CHECK(lease->end == 10);
  CHECK(fake.leases().at(split.index) == 10);
  CHECK(lease->renew_at > 4);
  CHECK(lease->renew_at <= 10);
  // The window stops growing at max_lease_elements.
  int64_t position = 4;
  for (int i = 0; i < 20; ++i) {
    position = lease->end;
    lease = provider.RenewLease(split, position);
    REQUIRE(lease.ok());
    CHECK(lease->end > position);
    CHECK(lease->end - position <= 16);
  }
  CHECK(fake.finished().empty());
  provider.SplitFinished(split, position + 1);
  // The other split, then the end of the epoch: not before the finishes are acknowledged.
  auto second = provider.GetNext();
  REQUIRE(second.ok());
  REQUIRE(second->has_value());
  provider.SplitFinished(**second, 0);
  auto end = provider.GetNext();
  REQUIRE(end.ok());
  CHECK(!end->has_value());
  CHECK(fake.finished() == std::multiset<uint64_t>{0, 1});
  // A lease for a split that is not being read is an error, not a silent "no limit".
  CHECK(provider.RenewLease(split, 0).status().code() == absl::StatusCode::kInternal);
}

TEST_CASE("worker_split_provider: a remainder's first lease starts past its skip - failed reports are re-sent") {
  FakeDispatcher fake;
  std::vector<pipeline::Split> splits = MakeSplits(1);
  splits[0].skip = 100;
  fake.SetSplits(splits);
  SplitProviderOptions options = FastRetry();
  options.lease_elements = 8;
  DispatcherSplitProvider provider(&fake, 1, "w:1", options);
  auto next = provider.GetNext();
  REQUIRE(next.ok());
  REQUIRE(next->has_value());
  CHECK((*next)->skip == 100);
  CHECK(fake.leases().at(0) == 108);
  fake.FailNextGetSplits(2);
  auto lease = provider.RenewLease(**next, 104);  // half left: renews, through two failures
  REQUIRE(lease.ok());
  lease = provider.RenewLease(**next, 108);
  REQUIRE(lease.ok());
  CHECK(lease->end == 104 + 16);
  CHECK(fake.leases().at(0) == 120);
}

TEST_CASE("worker_split_provider: Reset reports splits the pipeline left mid-way as finished") {
  FakeDispatcher fake;
  fake.SetSplits(MakeSplits(4), 2);
  DispatcherSplitProvider provider(&fake, 1, "w:1", FastRetry());
  auto next = provider.GetNext();
  REQUIRE(next.ok());
  REQUIRE(provider.RenewLease(**next, 0).ok());
  REQUIRE(provider.Reset().ok());  // e.g. `take` before `repeat`: split 0 and the queued ones are dropped
  REQUIRE(WaitUntil([&] { return fake.finished().size() == 4; }));
  CHECK(fake.finished() == std::multiset<uint64_t>{0, 1, 2, 3});
}

TEST_CASE("worker_split_provider: a release hands queued splits back whole and the read one at the reader's position") {
  FakeDispatcher fake;
  fake.SetSplits(MakeSplits(10));
  SplitProviderOptions options = FastRetry();
  options.lease_elements = 4;
  DispatcherSplitProvider provider(&fake, 1, "w:1", options);
  auto first = provider.GetNext();
  REQUIRE(first.ok());
  REQUIRE(first->has_value());
  const pipeline::Split split = **first;
  REQUIRE(provider.RenewLease(split, 0).ok());
  CHECK(!provider.ReleaseRequested());
  provider.RequestRelease();
  provider.RequestRelease();  // idempotent
  CHECK(provider.ReleaseRequested());
  CHECK(provider.releasing());
  provider.SplitReleased(split, 3);
  // The end comes only once the dispatcher acknowledged both hand-backs.
  auto end = provider.GetNext();
  REQUIRE(end.ok());
  CHECK(!end->has_value());
  std::set<uint64_t> returned;
  int released = 0;
  for (const auto& request : fake.get_splits_requests()) {
    returned.insert(request.returned_split_indices().begin(), request.returned_split_indices().end());
    for (const auto& p : request.progress()) {
      if (!p.released()) continue;
      ++released;
      CHECK(p.index() == split.index);
      CHECK(p.lease_end() == 3);
      CHECK(!p.finished());
    }
  }
  // The first call fetched splits 0..7; 0 was being read, 1..7 were queued.
  CHECK(returned == std::set<uint64_t>{1, 2, 3, 4, 5, 6, 7});
  CHECK(released == 1);
  // No further epoch is this task's business: Reset asks nothing and the next epoch is empty.
  const size_t calls = fake.get_splits_requests().size();
  REQUIRE(provider.Reset().ok());
  auto next_epoch = provider.GetNext();
  REQUIRE(next_epoch.ok());
  CHECK(!next_epoch->has_value());
  for (size_t i = calls; i < fake.get_splits_requests().size(); ++i) {
    CHECK(fake.get_splits_requests()[i].max_splits() == 0);
  }
}

TEST_CASE("worker_split_provider: a dispatcher's release flag starts the hand-back - splits in that answer go back") {
  FakeDispatcher fake;
  fake.SetSplits(MakeSplits(10));
  fake.SetRelease(true);
  DispatcherSplitProvider provider(&fake, 1, "w:1", FastRetry());
  REQUIRE(WaitUntil([&] { return provider.releasing(); }));
  auto end = provider.GetNext();
  REQUIRE(end.ok());
  CHECK(!end->has_value());
  std::set<uint64_t> returned;
  for (const auto& request : fake.get_splits_requests()) {
    returned.insert(request.returned_split_indices().begin(), request.returned_split_indices().end());
  }
  CHECK(returned.size() == 8);  // everything the first answer handed out, none started
  CHECK(provider.splits_started() == 0);
}

TEST_CASE("worker_split_provider converts splits to and from the wire") {
  pipeline::Split split{5, "/data/a.tfrecord", 10, 20};
  CHECK(FromProto(ToProto(split)) == split);
}

}  // namespace
}  // namespace sluice::worker
