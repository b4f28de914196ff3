#include "bench/transfer/transfer_bench.h"

#include <catch2/catch.hpp>

#include "dataplane/pipeline/pipeline.h"

namespace sluice::bench {
namespace {

TEST_CASE("SizeLabel names KiB and MiB multiples") {
  CHECK(SizeLabel(1024) == "1k");
  CHECK(SizeLabel(100 * 1024) == "100k");
  CHECK(SizeLabel(1024 * 1024) == "1m");
  CHECK(SizeLabel(4 * 1024 * 1024) == "4m");
  CHECK(SizeLabel(1000) == "1000b");
}

TEST_CASE("DistinctElements holds cache_bytes within bounds") {
  CHECK(DistinctElements(1024 * 1024, 32 << 20) == 32);
  CHECK(DistinctElements(1024, 32 << 20) == 4096);     // capped
  CHECK(DistinctElements(64 << 20, 32 << 20) == 16);   // at least 16
  CHECK(DistinctElements(0, 32 << 20) == 16);
}

// The first `n` elements of the transfer pipeline `spec`, run in-process.
std::vector<pipeline::Element> FirstElements(const std::string& spec, int n) {
  auto def = ParseBenchPipeline(spec, "transfer");
  REQUIRE(def.ok());
  auto p = pipeline::Pipeline::Create(*def);
  REQUIRE(p.ok());
  auto it = (*p)->MakeIterator();
  REQUIRE(it.ok());
  std::vector<pipeline::Element> out;
  for (int i = 0; i < n; ++i) {
    auto e = (*it)->Next();
    REQUIRE(e.ok());
    REQUIRE(e->has_value());
    out.push_back(**std::move(e));
  }
  return out;
}

TEST_CASE("The transfer pipeline yields elements of the requested size, repeating the cached ones") {
  const std::vector<pipeline::Element> elements = FirstElements(TransferPipelineSpec(100 * 1024, 16), 40);
  for (const pipeline::Element& e : elements) {  // more than one pass: repeat is endless
    const pipeline::Tensor* data = e.Find("data");
    REQUIRE(data != nullptr);
    CHECK(data->nbytes() == 100 * 1024);
  }
  CHECK(elements[16].key() == elements[0].key());
  CHECK(elements[1].key() != elements[0].key());
}

TEST_CASE("The replay option picks the cache a worker serves encoded or the pipeline own cache, same elements") {
  const std::string encoded = TransferPipelineSpec(1024, 64, "encoded");
  const std::string elements = TransferPipelineSpec(1024, 64, "elements");
  CHECK(encoded.find("cache: {}") != std::string::npos);
  CHECK(elements.find("cache: {max_bytes: ") != std::string::npos);
  // Both read the same elements; the bound is far above them, so the pipeline's cache keeps them all.
  for (const std::string& spec : {encoded, elements}) {
    const std::vector<pipeline::Element> read = FirstElements(spec, 130);
    CHECK(read[64].key() == read[0].key());
    CHECK(read[129].key() == read[1].key());
    CHECK(read[1].key() != read[0].key());
  }
}

TEST_CASE("PairedRatio is the median of the per-trial ratios") {
  CHECK(PairedRatio({1, 2, 3}, {2, 2, 2}) == Approx(1.0));
  CHECK(PairedRatio({0.5, 0.9}, {1, 1}) == Approx(0.7));
  CHECK(PairedRatio({1, 1}, {0, 0}) == 0);  // failed baselines do not count as wins
  CHECK(PairedRatio({}, {}) == 0);
}

TEST_CASE("CpuSecondsPerGb") {
  CHECK(CpuSecondsPerGb(0.5, 2'000'000'000) == Approx(0.25));
  CHECK(CpuSecondsPerGb(0.5, 0) == 0);
}

TEST_CASE("TransferResultJson has the flat keys and judges small sizes against the small target") {
  std::vector<TransferSizeResult> sizes = {
      {1024, {0.1, 0.1}, {0.5, 0.5}, {1e5, 1e5}, {4, 4}, {1, 1}, {4, 4}, {1, 1}, {}, {}, {}},
      {100 * 1024, {0.9, 0.9}, {1.0, 1.0}, {9e3, 9e3}, {}, {}, {}, {}, {}, {}, {}},
      {1024 * 1024, {1.7, 1.9}, {2.0, 2.0}, {1.7e3, 1.8e3}, {0.6, 0.6}, {0.4, 0.4}, {0.5, 0.5}, {0.5, 0.5}, {}, {}, {}},
  };
  auto j = TransferResultJson(sizes, 0.8, 0.15, {{"mode", "test"}});
  CHECK(j["benchmark"] == "transfer");
  CHECK(j["ratio_1k"].get<double>() == Approx(0.2));
  CHECK(j["ratio_100k"].get<double>() == Approx(0.9));
  CHECK(j["ratio_1m"].get<double>() == Approx(0.9));
  CHECK(j["sluice_gbps_1m"].get<double>() == Approx(1.8));
  CHECK(j["grpc_gbps_1m"].get<double>() == Approx(2.0));
  CHECK(j["meets_target"] == true);  // 1 KiB's 0.2 meets its own target of 0.15
  CHECK(j["sluice_gb_per_cpu_s_1m"].get<double>() == Approx(1 / 1.1).margin(0.001));
  CHECK(j["grpc_gb_per_cpu_s_1m"].get<double>() == Approx(1 / 0.9).margin(0.001));
  CHECK(j["sizes"][2]["sluice_gbps_spread"].get<double>() == Approx(0.2 / 1.8).margin(0.001));
  CHECK(j["mode"] == "test");
  CHECK(j["cpu_cost_ratio_1k"].get<double>() == Approx(4.0));
  CHECK(j["cpu_cost_ratio_1m"].get<double>() == Approx(1.222));  // (0.6 + 0.5) / (0.4 + 0.5)
  CHECK(j["cpu_cost_ratio_100k"] == 0);  // not measured
  CHECK(j["sizes"][2]["sluice_worker_cpu_s_per_gb"].get<double>() == Approx(0.6));
  CHECK(j["sizes"].size() == 3);
  CHECK(j["sizes"][2]["sluice_gbps_trials"].size() == 2);
  CHECK(!j.contains("shm_ratio_1m"));  // no shared-memory trials

  // Shared-memory trials are reported beside the socket side, which stays the headline.
  sizes[2].shm_gbps = {3.0, 3.0};
  sizes[2].shm_server_cpu_per_gb = {0.3, 0.3};
  sizes[2].shm_client_cpu_per_gb = {0.2, 0.2};
  auto k = TransferResultJson(sizes, 0.8, 0.15, {});
  CHECK(k["ratio_1m"].get<double>() == Approx(0.9));
  CHECK(k["shm_ratio_1m"].get<double>() == Approx(1.5));
  CHECK(k["sluice_shm_gbps_1m"].get<double>() == Approx(3.0));
  CHECK(k["sluice_shm_gb_per_cpu_s_1m"].get<double>() == Approx(2.0));
  CHECK(k["shm_cpu_cost_ratio_1m"].get<double>() == Approx(0.5 / 0.9).margin(0.001));
  CHECK(k["sizes"][2]["sluice_shm_gbps_trials"].size() == 2);
  CHECK(!k.contains("shm_ratio_1k"));
  sizes[2].shm_gbps.clear();

  sizes[2].sluice_gbps = {1.0, 1.0};
  CHECK(TransferResultJson(sizes, 0.8, 0.15, {})["meets_target"] == false);
  sizes[2].sluice_gbps = {1.7, 1.9};
  CHECK(TransferResultJson(sizes, 0.8, 0.3, {})["meets_target"] == false);  // 1 KiB misses 0.3
  CHECK(TransferResultJson({}, 0.8, 0.15, {})["meets_target"] == false);  // nothing judged
}

TEST_CASE("Invalid options fail before any process starts") {
  TransferBenchOptions o;
  o.trials = 0;
  CHECK(RunTransferBenchmark(o) == 1);
  o = TransferBenchOptions();
  o.sizes = {0};
  CHECK(RunTransferBenchmark(o) == 1);
  o = TransferBenchOptions();
  o.compression = "gzip";
  CHECK(RunTransferBenchmark(o) == 1);
  o = TransferBenchOptions();
  o.seconds = 0;
  CHECK(RunTransferBenchmark(o) == 1);
  o = TransferBenchOptions();
  o.replay = "lazily";
  CHECK(RunTransferBenchmark(o) == 1);
}

TEST_CASE("The transfer flags parse") {
  CLI::App app;
  TransferBenchOptions o;
  AddTransferBenchFlags(&app, o);
  app.parse("--trials 3 --sizes 2048 --compression=lz4", false);
  CHECK(o.sizes == std::vector<int64_t>{2048});
  CHECK(o.trials == 3);
  CHECK(o.compression == "lz4");
  CHECK(o.replay == "encoded");
  CHECK(o.shm_side);
  app.parse("--no_shm_side --replay elements", false);
  CHECK(!o.shm_side);
  CHECK(o.replay == "elements");
}

}  // namespace
}  // namespace sluice::bench
