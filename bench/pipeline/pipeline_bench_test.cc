#include "bench/pipeline/pipeline_bench.h"

#include <catch2/catch.hpp>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include <jpeglib.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "dataplane/pipeline/pipeline.h"
#include "dataplane/pipeline/spec_parser.h"
#include "testing/test_util.h"

namespace sluice::bench {
namespace {

namespace fs = std::filesystem;

std::string ReadText(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Writes a w x h RGB JPEG with a smooth pattern.
void WriteJpeg(const fs::path& path, int w, int h, int seed) {
  std::vector<uint8_t> pixels(static_cast<size_t>(w) * h * 3);
  for (int y = 0; y < h; ++y) {
    for (int x = 0; x < w; ++x) {
      for (int c = 0; c < 3; ++c) pixels[(y * w + x) * 3 + c] = static_cast<uint8_t>((x * (c + 1) + y * 2 + seed * 40) & 0xFF);
    }
  }
  jpeg_compress_struct cinfo;
  jpeg_error_mgr jerr;
  cinfo.err = jpeg_std_error(&jerr);
  jpeg_create_compress(&cinfo);
  FILE* f = std::fopen(path.c_str(), "wb");
  REQUIRE(f != nullptr);
  jpeg_stdio_dest(&cinfo, f);
  cinfo.image_width = w;
  cinfo.image_height = h;
  cinfo.input_components = 3;
  cinfo.in_color_space = JCS_RGB;
  jpeg_set_defaults(&cinfo);
  jpeg_set_quality(&cinfo, 90, TRUE);
  jpeg_start_compress(&cinfo, TRUE);
  while (cinfo.next_scanline < cinfo.image_height) {
    JSAMPROW row = pixels.data() + static_cast<size_t>(cinfo.next_scanline) * w * 3;
    jpeg_write_scanlines(&cinfo, &row, 1);
  }
  jpeg_finish_compress(&cinfo);
  jpeg_destroy_compress(&cinfo);
  std::fclose(f);
}

TEST_CASE("ExpandSpecTemplate fills the image directory and batch size") {
  std::string out = ExpandSpecTemplate("files: \"${IMAGES}/*.jpg\"\nsize: ${BATCH}\n", "/data/x", 64);
  CHECK(out == "files: \"/data/x/*.jpg\"\nsize: 64\n");
}

TEST_CASE("The checked-in resnet.yaml runs on real JPEGs with decode+crop and flip+normalize fused") {
  testing::TempDir dir;
  for (int i = 0; i < 6; ++i) WriteJpeg(fs::path(dir.path()) / absl::StrCat("img_", i, ".jpg"), 300 + 20 * i, 260, i);
  const fs::path spec_path = fs::path(BenchPipelineDir()) / "resnet.yaml";
  std::string spec = ExpandSpecTemplate(ReadText(spec_path), dir.path().string(), 4);
  auto def = pipeline::ParsePipelineSpec(spec, spec_path.string());
  INFO(def.status().ToString());
  REQUIRE(def.ok());
  pipeline::RuntimeOptions runtime;
  runtime.cpu_budget = 2;
  auto p = pipeline::Pipeline::Create(*def, runtime);
  INFO(p.status().ToString());
  REQUIRE(p.ok());
  const std::string plan = (*p)->Explain();
  INFO(plan);
  CHECK(absl::StrContains(plan, "decode_jpeg+random_resized_crop"));
  CHECK(absl::StrContains(plan, "fused random_flip"));

  auto it = (*p)->MakeIterator();
  REQUIRE(it.ok());
  // 6 files, repeated: batches keep coming past the end of the first pass.
  for (int b = 0; b < 3; ++b) {
    auto next = (*it)->Next();
    REQUIRE(next.ok());
    REQUIRE(next->has_value());
    const pipeline::Tensor* image = (*next)->Find("image");
    REQUIRE(image != nullptr);
    CHECK(image->dtype() == pipeline::DType::kFloat32);
    CHECK(image->shape() == pipeline::Shape{4, 3, 224, 224});
    // Normalized with ImageNet statistics: every value lies in [(0 - 0.485) / 0.229, (1 - 0.406) / 0.225].
    const float* v = image->data<float>();
    float lo = v[0], hi = v[0];
    for (int64_t k = 0; k < image->num_elements(); ++k) {
      lo = std::min(lo, v[k]);
      hi = std::max(hi, v[k]);
    }
    CHECK(lo >= -2.12f);
    CHECK(hi <= 2.64f);
    CHECK(hi > lo);
  }
}

TEST_CASE("ParseTorchResult reads the torch side's JSON line and rejects anything else") {
  std::string version;
  auto r = ParseTorchResult(
      R"({"images": 2560, "seconds": 10.5, "images_per_sec": 243.8, "cpu_seconds": 20.1, "torch": "1.13.0"})",
      &version);
  REQUIRE(r.ok());
  CHECK(r->images == 2560);
  CHECK(r->seconds == Approx(10.5));
  CHECK(r->cpu_seconds == Approx(20.1));
  CHECK(version == "1.13.0");

  auto garbage = ParseTorchResult("Traceback (most recent call last):", nullptr);
  REQUIRE_FALSE(garbage.ok());
  CHECK(absl::StrContains(garbage.status().message(), "not a JSON object"));
  auto missing = ParseTorchResult(R"({"images": 5, "seconds": 1})", nullptr);
  REQUIRE_FALSE(missing.ok());
  CHECK(absl::StrContains(missing.status().message(), "cpu_seconds"));
  CHECK_FALSE(ParseTorchResult(R"({"images": 5, "seconds": 0, "cpu_seconds": 1})", nullptr).ok());
}

TEST_CASE("ReportJson has the headline fields, per-core rates and the ratio") {
  BenchReport r;
  r.cores = 2;
  r.dataset_images = 2048;
  r.batch_size = 128;
  r.sluice = SideResult{1000, 2.0, 3.0};
  r.torch = SideResult{400, 2.0, 4.0};
  r.plan = {"source[files]", "map[...]"};
  std::string line = ReportJson(r);
  CHECK(line.find('\n') == std::string::npos);
  auto j = nlohmann::json::parse(line);
  CHECK(j["cores"] == 2);
  CHECK(j["images"] == 2048);
  CHECK(j["sluice_images_per_sec"].get<double>() == Approx(500));
  CHECK(j["sluice_images_per_sec_per_core"].get<double>() == Approx(250));
  CHECK(j["torch_images_per_sec_per_core"].get<double>() == Approx(100));
  CHECK(j["ratio"].get<double>() == Approx(2.5));
  CHECK(j["details"]["sluice_images_per_cpu_second"].get<double>() == Approx(1000.0 / 3.0));
  CHECK(j["details"]["cpu_efficiency_ratio"].get<double>() == Approx((1000.0 / 3.0) / 100.0));

  r.torch.reset();
  r.torch_error = "skipped";
  auto k = nlohmann::json::parse(ReportJson(r));
  CHECK(k["ratio"].is_null());
  CHECK(k["torch_images_per_sec_per_core"].is_null());
  CHECK(k["details"]["torch_error"] == "skipped");
}

TEST_CASE("PickCpus takes the first N allowed CPUs") {
  CHECK(PickCpus({0, 2, 4, 6}, 2) == std::vector<int>{0, 2});
  CHECK(PickCpus({0, 2, 4, 6}, 0) == std::vector<int>{0, 2, 4, 6});
  CHECK(PickCpus({0, 1}, 8) == std::vector<int>{0, 1});
}

}  // namespace
}  // namespace sluice::bench
