#include "bench/overhead/overhead_bench.h"

#include <sys/stat.h>
#include <unistd.h>

#include <sstream>

#include <catch2/catch.hpp>

#include "bench/dataservice/bench_report.h"
#include "bench/pipeline/pipeline_bench.h"
#include "dataplane/pipeline/pipeline.h"
#include "testing/test_util.h"

namespace sluice::bench {
namespace {

OverheadSample Sample(int64_t elements, double cpu, std::vector<double> per_process) {
  OverheadSample s;
  s.elements = elements;
  s.seconds = 1;
  s.cpu_seconds = cpu;
  s.process_cpu_seconds = std::move(per_process);
  return s;
}

// The last non-empty line of `text`.
std::string LastLine(const std::string& text) {
  std::string last, line;
  std::istringstream in(text);
  while (std::getline(in, line)) {
    if (!line.empty()) last = line;
  }
  return last;
}

TEST_CASE("OverheadResultJson divides the medians of CPU per element, and breaks the service down") {
  std::vector<OverheadSample> local = {Sample(100, 1.0, {1.0}), Sample(100, 1.2, {1.2}), Sample(100, 0.8, {0.8})};
  std::vector<OverheadSample> remote = {Sample(100, 1.1, {0.01, 0.99, 0.1}), Sample(100, 1.3, {0.01, 1.19, 0.1}),
                                        Sample(100, 1.2, {0.02, 1.08, 0.1})};
  auto j = OverheadResultJson(local, remote, 0.1, {{"pipeline", "test"}});
  CHECK(j["benchmark"] == "overhead");
  CHECK(j["overhead"].get<double>() == Approx(0.2));  // 12 ms / 10 ms - 1
  CHECK(j["in_process_cpu_ms_per_element"].get<double>() == Approx(10));
  CHECK(j["service_cpu_ms_per_element"].get<double>() == Approx(12));
  CHECK(j["in_process_cpu_spread"].get<double>() == Approx(0.4));
  CHECK(j["meets_target"] == false);
  CHECK(j["overhead_per_round"].size() == 3);
  CHECK(j["overhead_per_round"][0].get<double>() == Approx(0.1));
  CHECK(j["service_cpu_ms_per_element_by_process"]["dispatcher"].get<double>() == Approx(0.1));
  CHECK(j["service_cpu_ms_per_element_by_process"]["worker"].get<double>() == Approx(10.8));
  CHECK(j["service_cpu_ms_per_element_by_process"]["client"].get<double>() == Approx(1.0));
  CHECK(j["trials"].size() == 6);
  CHECK(j["pipeline"] == "test");
  CHECK(OverheadResultJson(local, local, 0.1, {})["meets_target"] == true);
  CHECK(OverheadResultJson({}, remote, 0.1, {})["meets_target"] == false);  // nothing to compare with
  CHECK(OverheadResultJson({Sample(0, 1, {1})}, remote, 0.1, {})["overhead"] == 0);
}

TEST_CASE("OverheadTransportsJson heads with the first transport and lists every one") {
  std::vector<OverheadSample> local = {Sample(100, 1.0, {1.0})};
  OverheadSample shm = Sample(100, 1.1, {0.01, 0.99, 0.1});
  shm.shm_elements = 100;
  shm.shm_views = 75;
  std::vector<std::pair<std::string, std::vector<OverheadSample>>> service = {
      {"shm", {shm}}, {"socket", {Sample(100, 1.5, {0.01, 1.29, 0.2})}}};
  auto j = OverheadTransportsJson(local, service, 0.1, {{"pipeline", "test"}});
  CHECK(j["benchmark"] == "overhead");
  CHECK(j["transport"] == "shm");
  CHECK(j["overhead"].get<double>() == Approx(0.1));
  CHECK(j["shm_element_share"].get<double>() == Approx(1.0));
  CHECK(j["shm_view_share"].get<double>() == Approx(0.75));
  CHECK(j["transports"]["shm"]["overhead"].get<double>() == Approx(0.1));
  CHECK(j["transports"]["socket"]["overhead"].get<double>() == Approx(0.5));
  CHECK(j["transports"]["socket"]["shm_element_share"].get<double>() == 0);
  CHECK(j["transports"]["socket"]["service_cpu_ms_per_element_by_process"]["client"].get<double>() == Approx(2));
  CHECK(j["pipeline"] == "test");
}

TEST_CASE("The built-in overhead pipeline parses and runs") {
  auto def = ParseBenchPipeline(DefaultOverheadPipeline(), "overhead");
  REQUIRE(def.ok());
  auto p = pipeline::Pipeline::Create(*def);
  REQUIRE(p.ok());
  auto it = (*p)->MakeIterator();
  REQUIRE(it.ok());
  auto e = (*it)->Next();
  REQUIRE(e.ok());
  REQUIRE(e->has_value());
  const pipeline::Tensor* data = (*e)->Find("data");
  REQUIRE(data != nullptr);
  CHECK(data->nbytes() == 3 * 224 * 224 * 4);  // normalized float32 CHW
}

TEST_CASE("Invalid overhead options and pipelines fail before any process starts") {
  std::ostringstream out, err;
  OverheadBenchOptions o;
  o.rounds = 0;
  CHECK(RunOverheadBenchmark(o, out, err) == 1);
  CHECK(err.str().find("--rounds") != std::string::npos);
  o = OverheadBenchOptions();
  o.seconds = 0;
  CHECK(RunOverheadBenchmark(o, out, err) == 1);
  o = OverheadBenchOptions();
  o.compression = "gzip";
  CHECK(RunOverheadBenchmark(o, out, err) == 1);
  CHECK(err.str().find("--compression") != std::string::npos);
  o = OverheadBenchOptions();
  o.transports = {"shm", "carrier-pigeon"};
  CHECK(RunOverheadBenchmark(o, out, err) == 1);
  CHECK(err.str().find("--transport: 'carrier-pigeon'") != std::string::npos);
  o = OverheadBenchOptions();
  o.pipeline_file = "/nonexistent/pipeline.yaml";
  CHECK(RunOverheadBenchmark(o, out, err) == 1);
  testing::TempDir dir;
  testing::WriteFile(dir.File("bad.yaml"), "name: x\nsource: {nosuchsource: {}}\n");
  o.pipeline_file = dir.File("bad.yaml");
  CHECK(RunOverheadBenchmark(o, out, err) == 1);
  o = OverheadBenchOptions();
  o.pipeline_file = dir.File("bad.yaml");
  o.images_dir = dir.path().string();
  CHECK(RunOverheadBenchmark(o, out, err) == 1);
  CHECK(err.str().find("--images and --pipeline") != std::string::npos);
  o = OverheadBenchOptions();
  o.images_dir = dir.path().string();
  o.batch_size = 0;
  CHECK(RunOverheadBenchmark(o, out, err) == 1);
  CHECK(err.str().find("--batch must be >= 1, got 0") != std::string::npos);
  CHECK(out.str().empty());
}

TEST_CASE("Option images runs the pipeline benchmark's ResNet JPEG pipeline with the given batch") {
  OverheadBenchOptions o;
  o.images_dir = "/some/jpegs";
  o.batch_size = 7;
  auto spec = OverheadPipelineSpec(o);
  REQUIRE(spec.ok());
  CHECK(spec->find("/some/jpegs/*.jpg") != std::string::npos);
  CHECK(spec->find("${") == std::string::npos);
  auto def = ParseBenchPipeline(*spec, "overhead");
  REQUIRE(def.ok());
  CHECK(def->name() == "resnet-bench");
  CHECK(spec->find("batch: {size: 7}") != std::string::npos);
  o.images_dir.clear();
  auto builtin = OverheadPipelineSpec(o);
  REQUIRE(builtin.ok());
  CHECK(*builtin == DefaultOverheadPipeline());
}

TEST_CASE("Option python defaults to sluice bench pipeline's interpreter and runs make_jpeg_dataset.py") {
  OverheadBenchOptions defaults;
  CLI::App app("overhead");
  AddOverheadBenchFlags(&app, defaults);
  const char* no_args[] = {"overhead"};
  app.parse(1, no_args);
  CHECK(defaults.python == "/usr/bin/python3");
  CHECK(defaults.python == PipelineBenchOptions().python);

  OverheadBenchOptions o;
  CLI::App given("overhead");
  AddOverheadBenchFlags(&given, o);
  const char* args[] = {"overhead", "--images", "/data/jpegs", "--python", "/opt/py/bin/python3", "--count", "8"};
  given.parse(7, args);
  CHECK(o.python == "/opt/py/bin/python3");
  CHECK(o.images_dir == "/data/jpegs");
  CHECK(o.image_count == 8);

  // With no JPEGs in --images, the given interpreter runs the script: a stand-in that records its
  // arguments and fails, so nothing else starts.
  testing::TempDir dir;
  const std::string fake = dir.File("fake-python");
  testing::WriteFile(fake, "#!/bin/sh\necho \"$@\" > \"$0.args\"\nexit 3\n");
  REQUIRE(chmod(fake.c_str(), 0755) == 0);
  const std::string images = dir.File("jpegs");
  REQUIRE(mkdir(images.c_str(), 0755) == 0);
  o.images_dir = images;
  o.python = fake;
  std::ostringstream out, err;
  CHECK(RunOverheadBenchmark(o, out, err) == 1);
  CHECK(err.str().find("make_jpeg_dataset.py failed (exit 3)") != std::string::npos);
  CHECK(err.str().find(fake) != std::string::npos);
  const std::string recorded = testing::ReadFile(fake + ".args");
  CHECK(recorded.find("make_jpeg_dataset.py " + images + " --count 8") != std::string::npos);
  CHECK(out.str().empty());

  o.python.clear();
  std::ostringstream err2;
  CHECK(RunOverheadBenchmark(o, out, err2) == 1);
  CHECK(err2.str().find("--python is empty") != std::string::npos);
}

TEST_CASE("A tiny overhead run prints a JSON last line with positive CPU numbers") {
  OverheadBenchOptions o;
  o.bin_dir = testing::BinaryDir() + "/bin";
  o.rounds = 1;
  o.seconds = 0.3;
  o.warmup_seconds = 0.2;
  std::ostringstream out, err;
  const int rc = RunOverheadBenchmark(o, out, err);
  INFO(err.str());
  REQUIRE(rc == 0);
  auto j = nlohmann::json::parse(LastLine(out.str()));
  CHECK(j["benchmark"] == "overhead");
  CHECK(j["overhead"].is_number());
  CHECK(j["in_process_cpu_ms_per_element"].get<double>() > 0);
  CHECK(j["service_cpu_ms_per_element"].get<double>() > 0);
  CHECK(j["service_cpu_ms_per_element_by_process"]["worker"].get<double>() > 0);
  CHECK(j["service_cpu_ms_per_element_by_process"]["client"].get<double>() > 0);
  CHECK(j["service_cpu_ms_per_element_by_process"].contains("dispatcher"));
  CHECK(j["trials"].size() == 2);
  CHECK(j["rounds"] == 1);
  CHECK(j["compression"] == "none");
  // Both transports were measured; the socket side never touched shared memory, and with a
  // writable /dev/shm the shm side did (602 KB elements are far above the 16 KiB floor).
  CHECK(j["transport"] == "shm");
  REQUIRE(j["transports"].contains("socket"));
  CHECK(j["transports"]["socket"]["service_cpu_ms_per_element"].get<double>() > 0);
  CHECK(j["transports"]["socket"]["shm_element_share"].get<double>() == 0);
  if (access("/dev/shm", W_OK) == 0) {
    CHECK(j["transports"]["shm"]["shm_element_share"].get<double>() > 0);
    // This consumer drops each element at once: they are views into the ring, not copies.
    CHECK(j["transports"]["shm"]["shm_view_share"].get<double>() > 0);
  }
}

}  // namespace
}  // namespace sluice::bench
