// `sluice bench autoorder` on a tiny data set: its JSON line has every field, for every pipeline
// (the numbers themselves are not checked: they are timings), and the data writers and helpers.
#include "bench/autoorder/autoorder_bench.h"

#include <catch2/catch.hpp>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "dataplane/pipeline/image/image_test_util.h"
#include "dataplane/pipeline/pipeline_test_util.h"
#include "testing/test_util.h"

namespace sluice::bench {
namespace {

namespace fs = std::filesystem;

// Writes a w x h RGB JPEG of StripedImage at quality 75 (libjpeg's default).
void WriteJpeg(const fs::path& path, int w, int h, int seed) {
  namespace img = pipeline::image::testing;
  sluice::testing::WriteFile(path.string(), img::EncodeJpeg(img::StripedImage(h, w, seed), {.quality = 75}));
}

TEST_CASE("The data template") {
  CHECK(ExpandDataTemplate("files: \"${DATA}/x\"", "/d") == "files: \"/d/x\"");
}

TEST_CASE("the benchmark's JSON line has every field for every pipeline") {
  sluice::testing::TempDir dir;
  fs::create_directories(dir.path() / "jpeg");
  for (int i = 0; i < 24; ++i) WriteJpeg(dir.path() / "jpeg" / absl::StrCat("img_", i, ".jpg"), 96 + i, 80, i);
  AutoOrderBenchOptions options;
  options.data_dir = dir.path().string();
  options.rounds = 1;
  options.documents = 120;
  options.sample = 8;

  std::stringstream captured;
  std::streambuf* old = std::cout.rdbuf(captured.rdbuf());
  const int rc = RunAutoOrderBenchmark(options);
  std::cout.rdbuf(old);
  INFO(captured.str());
  REQUIRE(rc == 0);
  std::vector<std::string> lines = absl::StrSplit(captured.str(), '\n', absl::SkipEmpty());
  REQUIRE(!lines.empty());
  const nlohmann::json out = nlohmann::json::parse(lines.back());
  CHECK(out["benchmark"] == "autoorder");
  for (const char* key : {"machine", "cores", "rounds", "order", "unit", "load_average_start", "load_average_end"}) {
    INFO(key);
    CHECK(out.contains(key));
  }
  REQUIRE(out["ratios"].is_object());
  CHECK(out["ratios"].size() == 3);
  for (const char* name : {"image-classification", "detection", "text"}) {
    INFO(name);
    REQUIRE(out["ratios"].contains(name));
    CHECK(out["ratios"][name].is_number());
    const nlohmann::json& p = out["pipelines"][name];
    for (const char* key : {"outcome", "written_order", "rewritten_order", "predicted_speedup", "sample_measured_speedup",
                            "max_abs_diff", "planning_cpu_seconds", "elements_per_run", "ratio"}) {
      INFO(key);
      CHECK(p.contains(key));
    }
    for (const char* key : {"written_per_cpu_second", "rewritten_per_cpu_second", "ratio_per_round"}) {
      INFO(key);
      for (const char* stat : {"median", "min", "max"}) CHECK(p[key].contains(stat));
    }
    CHECK(p["elements_per_run"].get<double>() > 0);
  }
  // What the data writers made: one record per JPEG, one line per document.
  auto records = pipeline::testing::RunSpec(absl::StrCat("source: {tfrecord: {files: '", dir.File("detection.tfrecord"), "'}}\n"));
  REQUIRE(records.ok());
  CHECK(records->size() == 24);
  auto docs = pipeline::testing::RunSpec(absl::StrCat("source: {jsonl: {files: '", dir.File("text.jsonl"), "'}}\n"));
  REQUIRE(docs.ok());
  CHECK(docs->size() == 120);
}

}  // namespace
}  // namespace sluice::bench
