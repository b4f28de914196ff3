// Tests of the transformations: map (ordered, unordered, skip), filter, shuffle, batch, unbatch,
// repeat, take, skip, interleave, prefetch, cache, shard, bucket_by_length; stats; autotune;
// cancellation.
#include <algorithm>
#include <catch2/catch.hpp>

#include <atomic>
#include <cstring>
#include <numeric>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "dataplane/pipeline/pipeline_test_util.h"
#include "dataplane/pipeline/stages.h"
#include "testing/test_util.h"

namespace sluice::pipeline {
namespace {

using testing::Collect;
using testing::Ints;
using testing::MakePipeline;
using testing::RunSpec;

std::vector<int64_t> Range(int64_t n) {
  std::vector<int64_t> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), 0);
  return v;
}

TEST_CASE("parallel map keeps input order when deterministic") {
  auto out = RunSpec(
      "source: {range: {stop: 500, split_size: 7}}\n"
      "steps:\n  - map: {parallelism: 4, ops: [{cast: {field: value, dtype: float64, scale: 2}}]}\n");
  REQUIRE(out.ok());
  REQUIRE(out->size() == 500);
  for (size_t i = 0; i < out->size(); ++i) CHECK((*out)[i].Find("value")->GetAsDouble(0) == 2.0 * static_cast<double>(i));
}

TEST_CASE("unordered parallel map delivers every element exactly once") {
  auto out = RunSpec(
      "source: {range: {stop: 300}}\n"
      "steps:\n  - map: {parallelism: 3, deterministic: false, ops: [{cast: {field: value, dtype: int32}}]}\n");
  REQUIRE(out.ok());
  std::vector<int64_t> values = Ints(*out);
  std::sort(values.begin(), values.end());
  CHECK(values == Range(300));
}

TEST_CASE("map errors fail the pipeline or are skipped and counted with on_error: skip") {
  // constexpr: clang checks absl::StrFormat's format at compile time.
  static constexpr char spec[] =
      "source: {range: {stop: 6}}\n"
      "steps:\n  - map: {parallelism: %s, on_error: %s, ops: [{one_hot: {field: value, depth: 4}}]}\n";
  for (const char* par : {"1", "3"}) {
    auto fail = RunSpec(absl::StrFormat(spec, par, "fail"));
    REQUIRE_FALSE(fail.ok());
    CHECK_THAT(std::string(fail.status().message()), Catch::Contains("value 4 outside [0, 4)"));
    auto p = MakePipeline(absl::StrFormat(spec, par, "skip"));
    REQUIRE(p.ok());
    auto out = Collect(**p);
    REQUIRE(out.ok());
    CHECK(out->size() == 4);
    CHECK((*p)->Stats()[1].errors_skipped == 2);
  }
}

TEST_CASE("filter keeps elements meeting every condition") {
  auto out = RunSpec("source: {range: {stop: 20}}\nsteps:\n  - filter: {field: value, ge: 5, lt: 9}\n");
  REQUIRE(out.ok());
  CHECK(Ints(*out) == std::vector<int64_t>{5, 6, 7, 8});
  auto missing = RunSpec("source: {range: {stop: 3}}\nsteps:\n  - filter: {field: nope, gt: 1}\n");
  REQUIRE_FALSE(missing.ok());
  CHECK_THAT(std::string(missing.status().message()), Catch::Contains("no field 'nope'"));
}

TEST_CASE("shuffle is a seeded permutation, reshuffled each epoch") {
  const std::string spec = "source: {range: {stop: 100}}\nsteps:\n  - shuffle: {buffer: 50, seed: 7}\n";
  auto p = MakePipeline(spec);
  REQUIRE(p.ok());
  auto a = Collect(**p);
  auto b = Collect(**p);  // second epoch of the same pipeline
  auto c = RunSpec(spec);  // a fresh pipeline: same first epoch
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  REQUIRE(c.ok());
  std::vector<int64_t> va = Ints(*a), vb = Ints(*b), vc = Ints(*c);
  CHECK(va != Range(100));
  CHECK(va == vc);
  CHECK(va != vb);
  std::sort(va.begin(), va.end());
  CHECK(va == Range(100));
}

TEST_CASE("batch stacks, drops or keeps the remainder, pads, and rejects mismatches") {
  auto out = RunSpec("source: {range: {stop: 10}}\nsteps:\n  - batch: 4\n");
  REQUIRE(out.ok());
  REQUIRE(out->size() == 3);
  CHECK((*out)[0].Find("value")->shape() == Shape{4});
  CHECK((*out)[2].Find("value")->shape() == Shape{2});
  CHECK((*out)[1].Find("value")->GetAsDouble(3) == 7);
  auto dropped = RunSpec("source: {range: {stop: 10}}\nsteps:\n  - batch: {size: 4, drop_remainder: true}\n");
  REQUIRE(dropped.ok());
  CHECK(dropped->size() == 2);

  sluice::testing::TempDir dir;
  sluice::testing::WriteFile(dir.File("v.jsonl"), "{\"x\": [1, 2]}\n{\"x\": [3]}\n{\"x\": 1.5}\n");
  auto ragged = RunSpec(absl::StrCat("source: {jsonl: {files: '", dir.File("v.jsonl"), "'}}\nsteps:\n  - take: 2\n  - batch: 2\n"));
  REQUIRE_FALSE(ragged.ok());
  CHECK_THAT(std::string(ragged.status().message()), Catch::Contains("set `pad: true`"));
  auto padded = RunSpec(absl::StrCat("source: {jsonl: {files: '", dir.File("v.jsonl"),
                                     "'}}\nsteps:\n  - take: 2\n  - batch: {size: 2, pad: true, padding_value: -1}\n"));
  REQUIRE(padded.ok());
  const Tensor* x = (*padded)[0].Find("x");
  CHECK(x->shape() == Shape{2, 2});
  CHECK(x->GetAsDouble(3) == -1);
  CHECK(x->GetAsDouble(2) == 3);
  auto mixed = RunSpec(absl::StrCat("source: {jsonl: {files: '", dir.File("v.jsonl"), "'}}\nsteps:\n  - skip: 1\n  - batch: 2\n"));
  REQUIRE_FALSE(mixed.ok());
  CHECK_THAT(std::string(mixed.status().message()), Catch::Contains("field 'x' is int64 in one element and float32"));
}

TEST_CASE("batch then unbatch gives back the elements") {
  auto out = RunSpec("source: {synthetic: {count: 10, shape: [3]}}\nsteps:\n  - batch: 4\n  - unbatch\n");
  auto plain = RunSpec("source: {synthetic: {count: 10, shape: [3]}}\n");
  REQUIRE(out.ok());
  REQUIRE(plain.ok());
  REQUIRE(out->size() == 10);
  for (size_t i = 0; i < 10; ++i) {
    CHECK(std::memcmp((*out)[i].Find("data")->raw(), (*plain)[i].Find("data")->raw(), 3) == 0);
  }
  auto scalar = RunSpec("source: {range: {stop: 3}}\nsteps:\n  - unbatch\n");
  REQUIRE_FALSE(scalar.ok());
  CHECK_THAT(std::string(scalar.status().message()), Catch::Contains("is a scalar"));
}

TEST_CASE("repeat, take and skip") {
  auto out = RunSpec("source: {range: {stop: 3}}\nsteps:\n  - repeat: 3\n  - skip: 2\n  - take: 5\n");
  REQUIRE(out.ok());
  CHECK(Ints(*out) == std::vector<int64_t>{2, 0, 1, 2, 0});
  auto forever = RunSpec("source: {range: {stop: 2}}\nsteps:\n  - repeat\n  - take: 7\n");
  REQUIRE(forever.ok());
  CHECK(forever->size() == 7);
  auto empty = RunSpec("source: {range: {stop: 0}}\nsteps:\n  - repeat\n");  // must end, not spin
  REQUIRE(empty.ok());
  CHECK(empty->empty());
}

TEST_CASE("shard keeps every n-th element") {
  auto out = RunSpec("source: {range: {stop: 10}}\nsteps:\n  - shard: {num_shards: 3, index: 1}\n");
  REQUIRE(out.ok());
  CHECK(Ints(*out) == std::vector<int64_t>{1, 4, 7});
}

// Serves fixed splits and grants position leases two elements at a time, recording every call.
class LeasingSplitProvider : public SplitProvider {
 public:
  explicit LeasingSplitProvider(std::vector<Split> splits) : splits_(std::move(splits)) {}
  absl::StatusOr<std::optional<Split>> GetNext() override {
    absl::MutexLock lock(&mu_);
    if (next_ >= splits_.size()) return std::optional<Split>();
    return std::optional<Split>(splits_[next_++]);
  }
  absl::Status Reset() override { return absl::OkStatus(); }
  bool UsesLeases() const override { return true; }
  absl::StatusOr<SplitLease> RenewLease(const Split& split, int64_t position) override {
    absl::MutexLock lock(&mu_);
    renewals_[split.index].push_back(position);
    if (short_lease_) return SplitLease{position, position};  // does not cover: a bug the reader must catch
    return SplitLease{position + 2, position + 2};
  }
  void SplitFinished(const Split& split, int64_t elements) override {
    absl::MutexLock lock(&mu_);
    finished_[split.index] = elements;
  }
  std::map<uint64_t, std::vector<int64_t>> renewals() {
    absl::MutexLock lock(&mu_);
    return renewals_;
  }
  std::map<uint64_t, int64_t> finished() {
    absl::MutexLock lock(&mu_);
    return finished_;
  }
  bool ReleaseRequested() const override { return release_.load(); }
  void SplitReleased(const Split& split, int64_t position) override {
    absl::MutexLock lock(&mu_);
    released_[split.index] = position;
  }
  std::map<uint64_t, int64_t> released() {
    absl::MutexLock lock(&mu_);
    return released_;
  }
  bool short_lease_ = false;
  std::atomic<bool> release_{false};

 private:
  absl::Mutex mu_;
  std::map<uint64_t, int64_t> released_ ABSL_GUARDED_BY(mu_);
  std::vector<Split> splits_;
  size_t next_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<uint64_t, std::vector<int64_t>> renewals_ ABSL_GUARDED_BY(mu_);
  std::map<uint64_t, int64_t> finished_ ABSL_GUARDED_BY(mu_);
};

TEST_CASE("sources skip a remainder's first elements, read under leases and report each split's end") {
  for (const char* steps : {"", "steps:\n  - interleave: {cycle_length: 2, block_length: 1, parallel: false}\n",
                            "steps:\n  - interleave: {cycle_length: 2, block_length: 1, parallel: true}\n"}) {
    INFO(steps);
    auto p = MakePipeline(std::string("source: {range: {stop: 20, split_size: 10}}\n") + steps);
    REQUIRE(p.ok());
    auto listed = (*p)->ListSplits();
    REQUIRE(listed.ok());
    std::vector<Split> splits = *listed;
    splits[0].skip = 3;  // a remainder: elements 0..2 were leased to a worker that is gone
    auto provider = std::make_shared<LeasingSplitProvider>(splits);
    auto it = (*p)->MakeIterator(provider);
    REQUIRE(it.ok());
    std::vector<int64_t> values;
    while (true) {
      auto next = (*it)->Next();
      REQUIRE(next.ok());
      if (!next->has_value()) break;
      values.push_back(*(*next)->Find("value")->AsInt64());
    }
    std::sort(values.begin(), values.end());
    std::vector<int64_t> expected;
    for (int64_t v = 3; v < 20; ++v) expected.push_back(v);
    CHECK(values == expected);
    // A lease is asked for before element `position` is read, whenever the last one runs out
    // (also at the split's end, which the reader only finds by reading on).
    CHECK(provider->renewals()[0] == std::vector<int64_t>{3, 5, 7, 9});
    CHECK(provider->renewals()[1] == std::vector<int64_t>{0, 2, 4, 6, 8, 10});
    CHECK(provider->finished() == std::map<uint64_t, int64_t>{{0, 10}, {1, 10}});
  }
}

TEST_CASE("a reader asked to hand its split back stops before its next element and names that position") {
  auto p = MakePipeline("source: {range: {stop: 20, split_size: 10}}\n");
  REQUIRE(p.ok());
  auto listed = (*p)->ListSplits();
  REQUIRE(listed.ok());
  std::vector<Split> splits = *listed;
  splits[0].skip = 2;  // a remainder: positions count its skipped elements too
  auto provider = std::make_shared<LeasingSplitProvider>(splits);
  auto it = (*p)->MakeIterator(provider);
  REQUIRE(it.ok());
  std::vector<int64_t> values;
  for (int i = 0; i < 3; ++i) {
    auto next = (*it)->Next();
    REQUIRE(next.ok());
    REQUIRE(next->has_value());
    values.push_back(*(*next)->Find("value")->AsInt64());
  }
  CHECK(values == std::vector<int64_t>{2, 3, 4});
  provider->release_ = true;
  // The reader stops before element 5 of split 0 and reports it; the provider here still hands
  // out split 1, whose reader stops before its first element.
  auto next = (*it)->Next();
  REQUIRE(next.ok());
  CHECK(!next->has_value());
  CHECK(provider->released() == std::map<uint64_t, int64_t>{{0, 5}, {1, 0}});
  CHECK(provider->finished().empty());
}

TEST_CASE("a lease that does not cover the reader's position is an error naming the split") {
  auto p = MakePipeline("source: {range: {stop: 10, split_size: 10}}\n");
  REQUIRE(p.ok());
  auto listed = (*p)->ListSplits();
  REQUIRE(listed.ok());
  auto provider = std::make_shared<LeasingSplitProvider>(*listed);
  provider->short_lease_ = true;
  auto it = (*p)->MakeIterator(provider);
  REQUIRE(it.ok());
  auto next = (*it)->Next();
  CHECK(next.status().code() == absl::StatusCode::kInternal);
  CHECK(std::string(next.status().message()).find("the lease ends at element 0") != std::string::npos);
  // A negative skip is refused when the split is opened.
  std::vector<Split> bad = *listed;
  bad[0].skip = -1;
  auto it2 = (*p)->MakeIterator(std::make_shared<ListSplitProvider>(bad));
  REQUIRE(it2.ok());
  CHECK((*it2)->Next().status().code() == absl::StatusCode::kInvalidArgument);
}

TEST_CASE("interleave reads splits round-robin in blocks, in parallel or not, deterministically") {
  const std::string base = "source: {range: {stop: 12, split_size: 4}}\nsteps:\n  - interleave: {cycle_length: 2, block_length: 2, parallel: ";
  for (const char* parallel : {"false", "true"}) {
    auto out = RunSpec(base + parallel + "}\n");
    REQUIRE(out.ok());
    // splits: [0..3], [4..7], [8..11]; two at a time, two elements per turn.
    CHECK(Ints(*out) == std::vector<int64_t>{0, 1, 4, 5, 2, 3, 6, 7, 8, 9, 10, 11});
  }
  auto unordered = RunSpec("source: {range: {stop: 100, split_size: 9}}\nsteps:\n  - interleave: {cycle_length: 3, deterministic: false}\n");
  REQUIRE(unordered.ok());
  std::vector<int64_t> v = Ints(*unordered);
  std::sort(v.begin(), v.end());
  CHECK(v == Range(100));
}

TEST_CASE("prefetch delivers everything in order") {
  auto out = RunSpec("source: {range: {stop: 1000}}\nsteps:\n  - prefetch: 8\n  - map: {parallelism: 2, ops: [{cast: {field: value, dtype: int32}}]}\n  - prefetch: auto\n");
  REQUIRE(out.ok());
  CHECK(Ints(*out) == Range(1000));
}

TEST_CASE("cache reads its input once and replays it") {
  auto p = MakePipeline("source: {range: {stop: 50}}\nsteps:\n  - map: {parallelism: 1, ops: [{cast: {field: value, dtype: int64, scale: 3}}]}\n  - cache\n  - repeat: 3\n");
  REQUIRE(p.ok());
  auto out = Collect(**p);
  REQUIRE(out.ok());
  CHECK(out->size() == 150);
  CHECK(Ints(*out)[149] == 147);
  auto stats = (*p)->Stats();
  CHECK(stats[0].elements_out == 50);  // the source ran once
  CHECK(stats[1].elements_out == 50);  // and so did the map
  CHECK(stats[2].elements_out == 150);
}

TEST_CASE("cache replays the same tensors: small ones from its arena (64-byte aligned), large ones as they were") {
  // 1000 float32 (4 KB) and an int32 index, compacted: each replayed pass must equal the first,
  // field by field and byte by byte.
  auto p = MakePipeline(
      "source: {synthetic: {count: 3, shape: [1000], dtype: float32}}\nsteps:\n"
      "  - map: {parallelism: 1, ops: [{cast: {field: index, dtype: int32}}]}\n"
      "  - cache\n  - repeat: 3\n");
  REQUIRE(p.ok());
  auto out = Collect(**p);
  REQUIRE(out.ok());
  REQUIRE(out->size() == 9);
  for (size_t i = 3; i < 9; ++i) {
    const Element& first = (*out)[i % 3];
    const Element& again = (*out)[i];
    CHECK(again.key() == first.key());
    REQUIRE(again.fields().size() == first.fields().size());
    for (size_t f = 0; f < first.fields().size(); ++f) {
      const Tensor& a = first.fields()[f].second;
      const Tensor& b = again.fields()[f].second;
      CHECK(again.fields()[f].first == first.fields()[f].first);
      CHECK(b.dtype() == a.dtype());
      CHECK(b.shape() == a.shape());
      REQUIRE(b.nbytes() == a.nbytes());
      CHECK(std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0);
      CHECK(reinterpret_cast<uintptr_t>(b.raw()) % 64 == 0);
    }
  }
  // A tensor above the arena's 64 KiB is replayed as it is (the same buffer).
  auto big = MakePipeline("source: {synthetic: {count: 2, shape: [100000]}}\nsteps:\n  - cache\n  - repeat: 2\n");
  REQUIRE(big.ok());
  auto b = Collect(**big);
  REQUIRE(b.ok());
  REQUIRE(b->size() == 4);
  CHECK((*b)[2].Find("data")->raw() == (*b)[0].Find("data")->raw());
  CHECK((*b)[3].Find("data")->raw() == (*b)[1].Find("data")->raw());
  // Small ones are copied once, at the first pass: every replay shares the arena's copy.
  auto small = MakePipeline("source: {synthetic: {count: 2, shape: [16]}}\nsteps:\n  - cache\n  - repeat: 3\n");
  REQUIRE(small.ok());
  auto s = Collect(**small);
  REQUIRE(s.ok());
  REQUIRE(s->size() == 6);
  CHECK((*s)[2].Find("data")->raw() == (*s)[4].Find("data")->raw());
  CHECK((*s)[2].Find("data")->raw() != (*s)[0].Find("data")->raw());
  CHECK(std::memcmp((*s)[2].Find("data")->raw(), (*s)[0].Find("data")->raw(), 16) == 0);
}

TEST_CASE("bucket_by_length batches elements of similar length, padded") {
  sluice::testing::TempDir dir;
  std::string text;
  for (int len : {1, 7, 2, 8, 3, 9, 1, 6}) {
    std::string arr = "[";
    for (int i = 0; i < len; ++i) absl::StrAppend(&arr, i ? "," : "", 1);
    absl::StrAppend(&text, "{\"tokens\": ", arr, "]}\n");
  }
  sluice::testing::WriteFile(dir.File("t.jsonl"), text);
  auto out = RunSpec(absl::StrCat("source: {jsonl: {files: '", dir.File("t.jsonl"),
                                  "'}}\nsteps:\n  - bucket_by_length: {field: tokens, boundaries: [5], batch_sizes: [2, 2]}\n"));
  REQUIRE(out.ok());
  REQUIRE(out->size() == 4);
  for (const auto& batch : *out) {
    const Tensor* t = batch.Find("tokens");
    REQUIRE(t->shape()[0] == 2);
    if (t->shape()[1] <= 4) CHECK(t->shape()[1] <= 3);  // short bucket: max len of its members
    else CHECK(t->shape()[1] >= 7);
  }
}

TEST_CASE("bucket_by_length with group emits runs of batches from one bucket (the batches of a round)") {
  sluice::testing::TempDir dir;
  std::string text;
  // Short and long sequences interleaved: 1, 9, 2, 8, ... (12 of each).
  for (int k = 0; k < 24; ++k) {
    const int len = k % 2 == 0 ? 1 + k % 4 : 6 + k % 4;
    std::string arr = "[";
    for (int i = 0; i < len; ++i) absl::StrAppend(&arr, i ? "," : "", 1);
    absl::StrAppend(&text, "{\"tokens\": ", arr, "]}\n");
  }
  sluice::testing::WriteFile(dir.File("t.jsonl"), text);
  for (int group : {1, 3}) {
    INFO("group " << group);
    auto out = RunSpec(absl::StrCat("source: {jsonl: {files: '", dir.File("t.jsonl"),
                                    "'}}\nsteps:\n  - bucket_by_length: {field: tokens, boundaries: [5], batch_sizes: [2, 2], group: ",
                                    group, "}\n"));
    REQUIRE(out.ok());
    REQUIRE(out->size() == 12);
    std::vector<bool> long_batch;
    for (const auto& batch : *out) {
      const Tensor* t = batch.Find("tokens");
      REQUIRE(t->shape()[0] == 2);
      long_batch.push_back(t->shape()[1] >= 6);
    }
    // Runs of `group` consecutive batches (a round of `group` consumers) come from one bucket.
    for (size_t r = 0; r + group <= long_batch.size(); r += static_cast<size_t>(group)) {
      for (int k = 1; k < group; ++k) CHECK(long_batch[r + static_cast<size_t>(k)] == long_batch[r]);
    }
  }
  auto bad = RunSpec(absl::StrCat("source: {jsonl: {files: '", dir.File("t.jsonl"),
                                  "'}}\nsteps:\n  - bucket_by_length: {field: tokens, boundaries: [5], batch_sizes: [2, 2], group: 0}\n"));
  CHECK(!bad.ok());
  CHECK(std::string(bad.status().message()).find("group") != std::string::npos);
}

TEST_CASE("every stage counts elements and bytes, the source counts CPU") {
  auto p = MakePipeline("source: {synthetic: {count: 64, shape: [1000]}}\nsteps:\n  - filter: {field: index, lt: 32}\n  - batch: 8\n");
  REQUIRE(p.ok());
  auto out = Collect(**p);
  REQUIRE(out.ok());
  auto stats = (*p)->Stats();
  REQUIRE(stats.size() == 3);
  CHECK(stats[0].elements_out == 64);
  CHECK(stats[0].bytes_out == 64 * (1000 + 8));
  CHECK(stats[1].elements_in == 64);
  CHECK(stats[1].elements_out == 32);
  CHECK(stats[2].elements_in == 32);
  CHECK(stats[2].elements_out == 4);
  CHECK(stats[0].cpu_ns > 0);
  CHECK(stats[2].wait_ns > 0);
}

TEST_CASE("max_element_bytes rejects oversized batches with a message naming the stage") {
  auto out = RunSpec("options: {max_element_bytes: 5000}\nsource: {synthetic: {count: 10, shape: [1000]}}\nsteps:\n  - batch: 8\n");
  REQUIRE_FALSE(out.ok());
  CHECK_THAT(std::string(out.status().message()), Catch::Contains("stage batch exceeds options.max_element_bytes"));
}

TEST_CASE("destroying an iterator mid-stream stops its threads") {
  auto p = MakePipeline(
      "source: {range: {stop: 1000000, split_size: 100}}\nsteps:\n  - interleave: {cycle_length: 4}\n"
      "  - map: {parallelism: 4, ops: [{cast: {field: value, dtype: float32}}]}\n  - prefetch: 16\n");
  REQUIRE(p.ok());
  for (int round = 0; round < 5; ++round) {
    auto it = (*p)->MakeIterator();
    REQUIRE(it.ok());
    for (int i = 0; i < 100; ++i) REQUIRE((*it)->Next().ok());
  }  // each iterator is destroyed with producers blocked on full buffers
  SUCCEED("no hang");
}

TEST_CASE("a split provider restricts what the source reads (dynamic sharding)") {
  auto p = MakePipeline("source: {range: {stop: 40, split_size: 10}}\n");
  REQUIRE(p.ok());
  auto splits = (*p)->ListSplits();
  REQUIRE(splits.ok());
  auto provider = std::make_shared<ListSplitProvider>(*splits, /*num_shards=*/2, /*shard_index=*/1);
  auto it = (*p)->MakeIterator(provider);
  REQUIRE(it.ok());
  std::vector<int64_t> got;
  while (true) {
    auto next = (*it)->Next();
    REQUIRE(next.ok());
    if (!next->has_value()) break;
    got.push_back(*(*next)->Find("value")->AsInt64());
  }
  REQUIRE(got.size() == 20);
  CHECK(got.front() == 10);
  CHECK(got.back() == 39);
}

TEST_CASE("map steps with the same settings are fused into one stage") {
  auto p = MakePipeline(
      "source: {range: {stop: 4}}\nsteps:\n  - cast: {field: value, dtype: float32}\n  - reshape: {field: value, shape: [1]}\n");
  REQUIRE(p.ok());
  CHECK((*p)->Stats().size() == 2);
  CHECK_THAT((*p)->Explain(), Catch::Contains("cast(value->float32) -> reshape"));
}

TEST_CASE("the autotuner splits the CPU budget by measured cost and grows starved prefetch buffers") {
  StageStats heavy(1, "map[heavy]", "map"), light(2, "map[light]", "map"), pre(3, "prefetch", "prefetch");
  auto t1 = std::make_shared<Tunable>(), t2 = std::make_shared<Tunable>(), t3 = std::make_shared<Tunable>();
  t1->kind = t2->kind = Tunable::Kind::kParallelism;
  t1->stats = &heavy;
  t2->stats = &light;
  t1->max = t2->max = 8;
  t3->kind = Tunable::Kind::kBuffer;
  t3->stats = &pre;
  t3->max = 1024;
  t3->value = 2;
  std::vector<std::shared_ptr<Tunable>> tunables = {t1, t2, t3};
  for (int i = 0; i < 100; ++i) {
    heavy.AddOut(10);
    light.AddOut(10);
    pre.AddOut(1000);
  }
  heavy.AddCpu(300'000'000);  // 3 ms per element
  light.AddCpu(100'000'000);  // 1 ms per element
  AutotuneStep(tunables, /*cpu_budget=*/8, /*ram_budget=*/1 << 20);
  CHECK(t1->value == 6);
  CHECK(t2->value == 2);
  CHECK(t3->value == 2);  // the consumer never waited
  t3->consumer_waits = 5;
  AutotuneStep(tunables, 8, 1 << 20);
  CHECK(t3->value == 4);
  t3->consumer_waits = 9;
  AutotuneStep(tunables, 8, /*ram_budget=*/5000);  // 1000-byte elements: at most 5 fit
  CHECK(t3->value == 5);
}

}  // namespace
}  // namespace sluice::pipeline

namespace sluice::pipeline {
namespace {

TEST_CASE("an op that skips bad data (DataLoss) drops the element even when the map fails on errors") {
  sluice::testing::TempDir dir;
  sluice::testing::WriteFile(dir.File("a.jpg"), "not a jpeg");
  sluice::testing::WriteFile(dir.File("b.jpg"), "\xff\xd8\xff truncated");
  auto p = testing::MakePipeline(absl::StrCat("source: {files: {files: '", dir.File("*.jpg"),
                                              "'}}\nsteps:\n  - decode_jpeg: {field: image, on_error: skip}\n"));
  REQUIRE(p.ok());
  auto out = testing::Collect(**p);
  REQUIRE(out.ok());
  CHECK(out->empty());
  CHECK((*p)->Stats()[1].errors_skipped == 2);
  auto fail = testing::RunSpec(absl::StrCat("source: {files: {files: '", dir.File("*.jpg"), "'}}\nsteps:\n  - decode_jpeg: {field: image}\n"));
  REQUIRE_FALSE(fail.ok());
}

}  // namespace
}  // namespace sluice::pipeline
