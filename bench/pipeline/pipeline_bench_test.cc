#include "bench/pipeline/pipeline_bench.h"

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "bench/common/bench_util.h"
#include "dataplane/pipeline/image/crop_geometry.h"
#include "dataplane/pipeline/image/image_op_util.h"
#include "dataplane/pipeline/image/image_test_util.h"
#include "dataplane/pipeline/image/jpeg_decoder.h"
#include "dataplane/pipeline/pipeline.h"
#include "dataplane/pipeline/spec_parser.h"
#include "testing/test_util.h"

#ifndef SLUICE_PYTHON3
#define SLUICE_PYTHON3 "/usr/bin/python3"
#endif

namespace sluice::bench {
namespace {

namespace fs = std::filesystem;

// Writes a w x h RGB JPEG of StripedImage at quality 90.
void WriteJpeg(const fs::path& path, int w, int h, int seed) {
  namespace img = pipeline::image::testing;
  sluice::testing::WriteFile(path.string(), img::EncodeJpeg(img::StripedImage(h, w, seed), {.quality = 90}));
}

TEST_CASE("ExpandSpecTemplate fills the image directory and batch size") {
  std::string out = ExpandSpecTemplate("files: \"${IMAGES}/*.jpg\"\nsize: ${BATCH}\n", "/data/x", 64);
  CHECK(out == "files: \"/data/x/*.jpg\"\nsize: 64\n");
}

TEST_CASE("The checked-in resnet.yaml runs on real JPEGs with decode+crop and flip+normalize fused") {
  testing::TempDir dir;
  for (int i = 0; i < 6; ++i) WriteJpeg(fs::path(dir.path()) / absl::StrCat("img_", i, ".jpg"), 300 + 20 * i, 260, i);
  const fs::path spec_path = fs::path(BenchPipelineDir()) / "resnet.yaml";
  std::string spec = ExpandSpecTemplate(ReadTextFile(spec_path), dir.path().string(), 4);
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

TEST_CASE("ParseTorchResult reads the variant runs of torch_pipeline.py") {
  auto r = ParseTorchResult(
      R"({"images": 768, "seconds": 4.0, "images_per_sec": 192, "cpu_seconds": 8.0, "variant": "best"})", nullptr);
  REQUIRE(r.ok());
  CHECK(r->images_per_second() == Approx(192));
  CHECK(r->images_per_cpu_second() == Approx(96));
}

TEST_CASE("RoundOrder alternates the sides symmetrically") {
  CHECK(RoundOrder(true) == "SUBBUS");
  CHECK(RoundOrder(false) == "SS");
}

TEST_CASE("ReportJson: the headline ratio is per CPU-second against the usual recipe, wall ratios secondary") {
  BenchReport r;
  r.cores = 2;
  r.dataset_images = 2048;
  r.batch_size = 128;
  r.rounds = 2;
  // Two rounds, two runs per side per round.
  r.sluice = {SideResult{1000, 2.0, 1.0}, SideResult{900, 2.0, 1.0}, SideResult{800, 2.0, 1.0},
              SideResult{1000, 2.0, 2.0}};           // per CPU-s 1000, 900, 800, 500; per s 500, 450, 400, 500
  r.torch_usual = {SideResult{400, 2.0, 4.0}, SideResult{400, 2.0, 4.0}, SideResult{300, 2.0, 4.0},
                   SideResult{500, 2.0, 4.0}};     // per CPU-s 100, 100, 75, 125; per s 200, 200, 150, 250
  r.torch_best = {SideResult{600, 2.0, 3.0}, SideResult{600, 2.0, 3.0}, SideResult{600, 2.0, 3.0},
                  SideResult{600, 2.0, 3.0}};      // per CPU-s 200; per s 300
  r.plan = {"source[files]", "map[...]"};
  r.load_avg_start = {1.5, 1.0, 0.5};
  r.load_avg_end = {2.5, 1.0, 0.5};
  std::string line = ReportJson(r);
  CHECK(line.find('\n') == std::string::npos);
  auto j = nlohmann::json::parse(line);
  CHECK(j["benchmark"] == "pipeline");
  CHECK(j["cores"] == 2);
  CHECK(j["images"] == 2048);
  CHECK(j["rounds"] == 2);
  CHECK(j["order"] == "SUBBUS");
  // Medians per CPU-second: Sluice 850, usual 100, best 200.
  CHECK(j["sluice_images_per_cpu_second"]["median"].get<double>() == Approx(850));
  CHECK(j["sluice_images_per_cpu_second"]["min"].get<double>() == Approx(500));
  CHECK(j["sluice_images_per_cpu_second"]["max"].get<double>() == Approx(1000));
  CHECK(j["sluice_images_per_cpu_second"]["n"] == 4);
  CHECK(j["torch_usual_images_per_cpu_second"]["median"].get<double>() == Approx(100));
  CHECK(j["torch_best_images_per_cpu_second"]["median"].get<double>() == Approx(200));
  CHECK(j["ratio"].get<double>() == Approx(8.5));
  CHECK(j["ratio_vs_usual"].get<double>() == Approx(8.5));
  CHECK(j["ratio_vs_best"].get<double>() == Approx(4.25));
  // Wall clock: Sluice median 475 images/s, usual 200, best 300.
  CHECK(j["wall_ratio_vs_usual"].get<double>() == Approx(475.0 / 200.0));
  CHECK(j["wall_ratio_vs_best"].get<double>() == Approx(475.0 / 300.0));
  CHECK(j["sluice_images_per_sec"]["median"].get<double>() == Approx(475));
  CHECK(j["sluice_images_per_sec_per_core"].get<double>() == Approx(237.5));
  CHECK(j["torch_images_per_sec_per_core"].get<double>() == Approx(100));
  CHECK(j["torch_best_images_per_sec_per_core"].get<double>() == Approx(150));
  // Per round, pooled over the round's two runs of each side: round 1 1900/2 vs 800/8, round 2 1800/3 vs 800/8.
  CHECK(j["ratio_vs_usual_per_round"]["n"] == 2);
  CHECK(j["ratio_vs_usual_per_round"]["max"].get<double>() == Approx(9.5));
  CHECK(j["ratio_vs_usual_per_round"]["min"].get<double>() == Approx(6.0));
  CHECK(j["ratio_vs_best_per_round"]["max"].get<double>() == Approx(950.0 / 200.0));
  CHECK(j["details"]["sluice_runs"].size() == 4);
  CHECK(j["details"]["torch_best_runs"][0]["images_per_cpu_second"].get<double>() == Approx(200));
  CHECK(j["details"]["load_avg_start"][0].get<double>() == Approx(1.5));
  CHECK(j["details"]["sluice_vs_ffcv_anchor"].get<double>() == Approx(850.0 / 326.0));

  r.torch_usual.clear();
  r.torch_best.clear();
  r.torch_error = "skipped";
  auto k = nlohmann::json::parse(ReportJson(r));
  CHECK(k["ratio"].is_null());
  CHECK(k["ratio_vs_best"].is_null());
  CHECK(k["wall_ratio_vs_usual"].is_null());
  CHECK(k["torch_images_per_sec_per_core"].is_null());
  CHECK(k["torch_usual_images_per_cpu_second"].is_null());
  CHECK(k["details"]["torch_error"] == "skipped");
  CHECK(k["sluice_images_per_cpu_second"]["median"].get<double>() == Approx(850));
}

// --- Sluice's crop-and-resize against PIL's ----------------------------------------------------

namespace img = pipeline::image;
namespace imgt = pipeline::image::testing;

// Photo-like content with fine detail: smooth waves plus a little deterministic noise.
imgt::RawImage TexturedImage(int64_t h, int64_t w, uint64_t seed) {
  imgt::RawImage smooth = imgt::SmoothImage(h, w, 3);
  imgt::RawImage noise = imgt::NoiseImage(h, w, 3, seed);
  for (size_t i = 0; i < smooth.pixels.size(); ++i) {
    const int v = smooth.pixels[i] + (noise.pixels[i] % 25) - 12;
    smooth.pixels[i] = static_cast<uint8_t>(std::clamp(v, 0, 255));
  }
  return smooth;
}

imgt::RawImage ReadRaw(const fs::path& p, int64_t h, int64_t w) {
  std::string bytes = ReadTextFile(p);
  imgt::RawImage out{h, w, 3, std::vector<uint8_t>(bytes.begin(), bytes.end())};
  return out;
}

// Tolerances of Sluice's fused region decode + crop + resize (decode_jpeg + random_resized_crop to
// 224x224) against PIL on the same box, per channel value (0-255), per image. Measured on the images
// below (natural photographs from make_jpeg_dataset.py and textured synthetic images, DCT scales 1,
// 2 and 4; 60 boxes): against PIL's full-size decode, crop, resize (the `usual` torchvision recipe)
// the mean absolute difference is at most 0.78 and the largest single difference 16 (the DCT-scaled
// decode is a different low-pass filter than the antialiased resize; most at sharp edges); against
// PIL with the same DCT-scaled decode and resize(box=...) (torch_pipeline.py's `best`), at most 0.21
// and 21 (resampler rounding, and PIL's filter reads pixels just outside the box where Sluice clamps
// to it: the outermost output pixels). The bounds leave some room above those measurements; a box
// moved by an eighth of its size fails them (the negative control below; lowest mean measured 1.33).
constexpr double kMeanTolFullDecode = 1.0;
constexpr int kMaxTolFullDecode = 32;
constexpr double kMeanTolSameDecode = 0.4;
constexpr int kMaxTolSameDecode = 32;

TEST_CASE("Sluice's crop-and-resize matches PIL's on the same box within the stated tolerance") {
  testing::TempDir dir;
  // Natural photographs, as the benchmark uses (the script falls back to textured images if the
  // photo package is missing), and two larger synthetic ones so DCT scales 2 and 4 both occur.
  const fs::path photos = fs::path(dir.path()) / "photos";
  const std::string make = absl::StrCat(SLUICE_PYTHON3, " ", BenchPipelineDir(), "/make_jpeg_dataset.py ",
                                        photos.string(), " --count 4 --workers 1 >/dev/null 2>&1");
  REQUIRE(std::system(make.c_str()) == 0);
  std::vector<fs::path> jpegs;
  for (int i = 0; i < 4; ++i) jpegs.push_back(photos / absl::StrFormat("img_%05d.jpg", i));
  struct Synthetic {
    int64_t h, w;
    bool subsample;
  };
  int n = 0;
  for (Synthetic s : {Synthetic{960, 1280, true}, Synthetic{1000, 1000, false}}) {
    imgt::JpegOptions jo;
    jo.quality = 90;
    jo.subsample = s.subsample;
    const fs::path p = fs::path(dir.path()) / absl::StrCat("synthetic_", n++, ".jpg");
    std::ofstream(p, std::ios::binary) << imgt::EncodeJpeg(TexturedImage(s.h, s.w, 7 + n), jo);
    jpegs.push_back(p);
  }

  const img::RandomResizedCropParams params;  // torchvision's defaults: scale [0.08, 1], ratio [3/4, 4/3]
  imgt::ArgList crop_args = {{"size", imgt::Ints({224, 224})},
                             {"scale", imgt::Floats({params.scale_min, params.scale_max})},
                             {"ratio", imgt::Floats({params.ratio_min, params.ratio_max})}};
  auto fused = imgt::Fuse("decode_jpeg", {}, "random_resized_crop", crop_args);
  REQUIRE(fused != nullptr);

  struct Case {
    fs::path jpeg;
    img::CropRect rect;
    int scale = 1;
    imgt::RawImage sluice;
    bool shifted = false;  // the negative control: PIL on a box moved by an eighth of its width
  };
  std::vector<Case> cases;
  nlohmann::json manifest = nlohmann::json::array();
  for (const fs::path& jpeg : jpegs) {
    const std::string bytes = ReadTextFile(jpeg);
    img::JpegDecoder decoder(bytes);
    REQUIRE(decoder.ReadHeader().ok());
    const int64_t h = decoder.header().height, w = decoder.header().width;
    for (uint64_t seed = 0; seed < 10; ++seed) {
      // The fused op draws its box from the element's seed exactly as RandomResizedCropRect does.
      img::CropRng rng(seed);
      Case c;
      c.jpeg = jpeg;
      c.rect = img::RandomResizedCropRect(h, w, params, rng);
      c.scale = img::ChooseDctScale(c.rect, 224, 224, -1);
      pipeline::Element e = imgt::EncodedElement(bytes);
      REQUIRE(fused->Apply(e, seed).ok());
      c.sluice = imgt::FromTensor(*e.Find("image"));
      REQUIRE(c.sluice.height == 224);
      REQUIRE(c.sluice.width == 224);
      for (bool shifted : {false, true}) {
        c.shifted = shifted;
        img::CropRect box = c.rect;
        if (shifted) {
          // Moved by an eighth of its size (at least 8 px), whichever way stays inside the image.
          const int64_t dx = std::max<int64_t>(8, box.w / 8), dy = std::max<int64_t>(8, box.h / 8);
          if (box.x >= dx) {
            box.x -= dx;
          } else if (box.x + box.w + dx <= w) {
            box.x += dx;
          } else if (box.y >= dy) {
            box.y -= dy;
          } else if (box.y + box.h + dy <= h) {
            box.y += dy;
          } else {
            continue;  // the box fills the image
          }
        }
        const std::string stem = (fs::path(dir.path()) / absl::StrCat("out_", cases.size())).string();
        manifest.push_back({{"jpeg", jpeg.string()},
                            {"box", {box.x, box.y, box.w, box.h}},
                            {"size", {224, 224}},
                            {"usual", stem + ".usual.rgb"},
                            {"best", stem + ".best.rgb"}});
        cases.push_back(c);
      }
    }
  }
  const fs::path manifest_path = fs::path(dir.path()) / "manifest.json";
  std::ofstream(manifest_path) << manifest.dump();
  std::string out;
  const int rc = RunCommand(
      absl::StrCat(SLUICE_PYTHON3, " ", BenchPipelineDir(), "/pil_crop.py ", manifest_path.string(), " 2>&1"),
      [&](const std::string& line) { absl::StrAppend(&out, line, "\n"); });
  INFO(out);
  REQUIRE(rc == 0);
  auto result = nlohmann::json::parse(out.substr(out.rfind('{')));
  REQUIRE(result["pil_dct_scales"].size() == cases.size());

  std::set<int> scales;
  double worst_mean_same = 0, worst_mean_full = 0, lowest_shifted = 1e9;
  int worst_max_same = 0, worst_max_full = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    INFO(c.jpeg.string() << " box x=" << c.rect.x << " y=" << c.rect.y << " w=" << c.rect.w << " h=" << c.rect.h
                         << " dct scale 1/" << c.scale << (c.shifted ? " (PIL's box moved by w/8)" : ""));
    const imgt::RawImage usual = ReadRaw(manifest[i]["usual"].get<std::string>(), 224, 224);
    const imgt::RawImage best = ReadRaw(manifest[i]["best"].get<std::string>(), 224, 224);
    const imgt::Diff same = imgt::Compare(c.sluice, best);
    const imgt::Diff full = imgt::Compare(c.sluice, usual);
    if (c.shifted) {
      // Negative control: a misplaced box must fail the tolerance, or the check proves nothing.
      CHECK(full.mean > kMeanTolFullDecode);
      CHECK(same.mean > kMeanTolSameDecode);
      lowest_shifted = std::min(lowest_shifted, full.mean);
      continue;
    }
    // PIL decoded at the DCT scale Sluice chose.
    CHECK(result["pil_dct_scales"][i].get<double>() == Approx(c.scale));
    scales.insert(c.scale);
    CHECK(same.mean <= kMeanTolSameDecode);
    CHECK(same.max <= kMaxTolSameDecode);
    CHECK(full.mean <= kMeanTolFullDecode);
    CHECK(full.max <= kMaxTolFullDecode);
    worst_mean_same = std::max(worst_mean_same, same.mean);
    worst_max_same = std::max(worst_max_same, same.max);
    worst_mean_full = std::max(worst_mean_full, full.mean);
    worst_max_full = std::max(worst_max_full, full.max);
  }
  WARN("vs PIL with the same DCT-scaled decode: worst mean " << worst_mean_same << ", worst max " << worst_max_same
                                                             << "; vs PIL full decode: worst mean " << worst_mean_full
                                                             << ", worst max " << worst_max_full
                                                             << "; shifted boxes: lowest mean " << lowest_shifted);
  CHECK(scales.count(1) == 1);
  CHECK(scales.count(2) == 1);
  CHECK(scales.count(4) == 1);
}

TEST_CASE("PickCpus takes the first N allowed CPUs") {
  CHECK(PickCpus({0, 2, 4, 6}, 2) == std::vector<int>{0, 2});
  CHECK(PickCpus({0, 2, 4, 6}, 0) == std::vector<int>{0, 2, 4, 6});
  CHECK(PickCpus({0, 1}, 8) == std::vector<int>{0, 1});
}

}  // namespace
}  // namespace sluice::bench
