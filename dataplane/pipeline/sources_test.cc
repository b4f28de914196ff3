// Tests of the range, synthetic, jsonl, csv, files and idx sources, including bad input.
#include <zlib.h>

#include <catch2/catch.hpp>
#include <set>

#include "absl/strings/str_cat.h"
#include "dataplane/pipeline/pipeline_test_util.h"
#include "testing/test_util.h"

namespace sluice::pipeline {
namespace {

using testing::Collect;
using testing::Ints;
using testing::MakePipeline;
using testing::RunSpec;
using ::sluice::testing::TempDir;
using ::sluice::testing::WriteFile;

std::string Msg(const absl::Status& s) { return std::string(s.message()); }

TEST_CASE("range yields values with splits of split_size") {
  auto p = MakePipeline("source: {range: {start: 5, stop: 25, step: 2, split_size: 3}}\n");
  REQUIRE(p.ok());
  auto splits = (*p)->ListSplits();
  REQUIRE(splits.ok());
  CHECK(splits->size() == 4);  // 10 values / 3
  auto out = Collect(**p);
  REQUIRE(out.ok());
  CHECK(Ints(*out) == std::vector<int64_t>{5, 7, 9, 11, 13, 15, 17, 19, 21, 23});
  auto neg = RunSpec("source: {range: {start: 3, stop: 0, step: -1}}\n");
  REQUIRE(neg.ok());
  CHECK(Ints(*neg) == std::vector<int64_t>{3, 2, 1});
  CHECK_FALSE(RunSpec("source: {range: {stop: 3, step: 0}}\n").ok());
}

TEST_CASE("synthetic yields deterministic tensors of the given shape") {
  auto a = RunSpec("source: {synthetic: {count: 5, shape: [4, 3], dtype: float32}}\n");
  auto b = RunSpec("source: {synthetic: {count: 5, shape: [4, 3], dtype: float32}}\n");
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  REQUIRE(a->size() == 5);
  const Tensor* t = (*a)[2].Find("data");
  REQUIRE(t != nullptr);
  CHECK(t->dtype() == DType::kFloat32);
  CHECK(t->shape() == Shape{4, 3});
  CHECK(std::memcmp(t->raw(), (*b)[2].Find("data")->raw(), t->nbytes()) == 0);
  CHECK(std::memcmp(t->raw(), (*a)[3].Find("data")->raw(), t->nbytes()) != 0);
  CHECK(Ints(*a, "index") == std::vector<int64_t>{0, 1, 2, 3, 4});
}

TEST_CASE("jsonl reads objects, types values and splits by byte ranges without losing lines") {
  TempDir dir;
  std::string text;
  for (int i = 0; i < 100; ++i) {
    absl::StrAppend(&text, "{\"id\": ", i, ", \"score\": ", i, ".5, \"name\": \"n", i, "\", \"tags\": [1, 2, 3], \"ok\": true}\n");
  }
  WriteFile(dir.File("a.jsonl"), text);
  auto p = MakePipeline(absl::StrCat("source: {jsonl: {files: '", dir.File("*.jsonl"), "', split_bytes: 100}}\n"));
  REQUIRE(p.ok());
  CHECK((*p)->ListSplits()->size() > 20);
  auto out = Collect(**p);
  REQUIRE(out.ok());
  REQUIRE(out->size() == 100);
  std::vector<int64_t> ids = Ints(*out, "id");
  for (int i = 0; i < 100; ++i) CHECK(ids[static_cast<size_t>(i)] == i);
  const Element& e = (*out)[7];
  CHECK(e.Find("score")->dtype() == DType::kFloat32);
  CHECK(*e.Find("score")->AsDouble() == Approx(7.5));
  CHECK(e.Find("name")->strings()[0] == "n7");
  CHECK(e.Find("tags")->shape() == Shape{3});
  CHECK(e.Find("ok")->dtype() == DType::kBool);
}

TEST_CASE("jsonl bad lines fail with file and offset, or are skipped and counted") {
  TempDir dir;
  WriteFile(dir.File("bad.jsonl"), "{\"a\": 1}\n{\"a\": oops}\n{\"a\": 3}\n[1]\n");
  auto fail = RunSpec(absl::StrCat("source: {jsonl: {files: '", dir.File("bad.jsonl"), "'}}\n"));
  REQUIRE_FALSE(fail.ok());
  CHECK_THAT(Msg(fail.status()), Catch::Contains("bad.jsonl: line at byte offset 9: malformed JSON"));
  auto p = MakePipeline(absl::StrCat("source: {jsonl: {files: '", dir.File("bad.jsonl"), "', on_error: skip}}\n"));
  REQUIRE(p.ok());
  auto out = Collect(**p);
  REQUIRE(out.ok());
  CHECK(Ints(*out, "a") == std::vector<int64_t>{1, 3});
  CHECK((*p)->Stats()[0].errors_skipped == 2);
}

TEST_CASE("missing files and empty globs are clear errors") {
  auto none = MakePipeline("source: {jsonl: {files: /nonexistent/dir/*.jsonl}}\n");
  REQUIRE_FALSE(none.ok());
  CHECK_THAT(Msg(none.status()), Catch::Contains("no files match '/nonexistent/dir/*.jsonl'"));
  auto idx = MakePipeline("source: {idx: {images: /nonexistent/images.idx}}\n");
  REQUIRE_FALSE(idx.ok());
  CHECK_THAT(Msg(idx.status()), Catch::Contains("/nonexistent/images.idx"));
}

TEST_CASE("csv infers types, honours explicit types and reports bad rows") {
  TempDir dir;
  WriteFile(dir.File("t.csv"), "id,weight,name\n1,0.5,\"a, b\"\n2,1.5,c\n3,x,d\n");
  auto fail = RunSpec(absl::StrCat("source: {csv: {files: '", dir.File("t.csv"), "'}}\n"));
  REQUIRE_FALSE(fail.ok());
  CHECK_THAT(Msg(fail.status()), Catch::Contains("column 'weight': 'x' is not a number"));
  CHECK_THAT(Msg(fail.status()), Catch::Contains("t.csv: line at byte offset"));
  auto ok = RunSpec(absl::StrCat("source: {csv: {files: '", dir.File("t.csv"), "', types: {weight: string}}}\n"));
  REQUIRE(ok.ok());
  REQUIRE(ok->size() == 3);
  CHECK((*ok)[0].Find("name")->strings()[0] == "a, b");
  CHECK((*ok)[0].Find("id")->dtype() == DType::kInt64);
  CHECK((*ok)[2].Find("weight")->strings()[0] == "x");
  auto skip = MakePipeline(absl::StrCat("source: {csv: {files: '", dir.File("t.csv"), "', on_error: skip}}\n"));
  REQUIRE(skip.ok());
  auto rows = Collect(**skip);
  REQUIRE(rows.ok());
  CHECK(rows->size() == 2);
  CHECK((*skip)->Stats()[0].errors_skipped == 1);
  WriteFile(dir.File("short.csv"), "a,b\n1\n");
  auto short_row = RunSpec(absl::StrCat("source: {csv: {files: '", dir.File("short.csv"), "'}}\n"));
  REQUIRE_FALSE(short_row.ok());
  CHECK_THAT(Msg(short_row.status()), Catch::Contains("expected 2 columns, found 1"));
  auto bad_type = MakePipeline(absl::StrCat("source: {csv: {files: '", dir.File("t.csv"), "', types: {nope: int64}}}\n"));
  REQUIRE_FALSE(bad_type.ok());
  CHECK_THAT(Msg(bad_type.status()), Catch::Contains("types.nope: no such column"));
}

TEST_CASE("csv without a header uses given column names") {
  TempDir dir;
  WriteFile(dir.File("n.csv"), "1,2\n3,4\n");
  auto out = RunSpec(absl::StrCat("source: {csv: {files: '", dir.File("n.csv"), "', header: false, columns: [x, y]}}\n"));
  REQUIRE(out.ok());
  CHECK(Ints(*out, "y") == std::vector<int64_t>{2, 4});
}

TEST_CASE("files yields one element per file with labels from directories") {
  TempDir dir;
  WriteFile(dir.File("cat/1.bin"), "meow");
  WriteFile(dir.File("cat/2.bin"), "purr");
  WriteFile(dir.File("dog/1.bin"), "woof!");
  auto out = RunSpec(absl::StrCat("source: {files: {files: '", dir.File("*/*.bin"),
                                  "', field: data, label_from_dir: true, include_path: true, split_size: 2}}\n"));
  REQUIRE(out.ok());
  REQUIRE(out->size() == 3);
  CHECK((*out)[0].Find("data")->strings()[0] == "meow");
  CHECK(Ints(*out, "label") == std::vector<int64_t>{0, 0, 1});
  CHECK((*out)[2].Find("path")->strings()[0] == dir.File("dog/1.bin"));
  auto big = RunSpec(absl::StrCat("options: {max_element_bytes: 4}\nsource: {files: {files: '", dir.File("dog/*.bin"), "'}}\n"));
  REQUIRE_FALSE(big.ok());
  CHECK_THAT(Msg(big.status()), Catch::Contains("exceeds options.max_element_bytes"));
}

std::string IdxBytes(uint8_t type, std::vector<uint32_t> dims, const std::string& payload) {
  std::string s = {0, 0, static_cast<char>(type), static_cast<char>(dims.size())};
  for (uint32_t d : dims) {
    for (int k = 3; k >= 0; --k) s.push_back(static_cast<char>((d >> (8 * k)) & 0xff));
  }
  return s + payload;
}

TEST_CASE("idx reads items and labels, converts big-endian values and rejects bad files") {
  TempDir dir;
  std::string images(2 * 2 * 3, '\0');
  for (size_t i = 0; i < images.size(); ++i) images[i] = static_cast<char>(i);
  WriteFile(dir.File("img.idx"), IdxBytes(0x08, {2, 2, 3}, images));
  WriteFile(dir.File("lab.idx"), IdxBytes(0x08, {2}, std::string("\x07\x09", 2)));
  WriteFile(dir.File("i32.idx"), IdxBytes(0x0C, {2}, std::string("\x00\x00\x01\x00\xff\xff\xff\xfe", 8)));
  auto out = RunSpec(absl::StrCat("source: {idx: {images: '", dir.File("img.idx"), "', labels: '", dir.File("lab.idx"), "'}}\n"));
  REQUIRE(out.ok());
  REQUIRE(out->size() == 2);
  CHECK((*out)[1].Find("image")->shape() == Shape{2, 3});
  CHECK((*out)[1].Find("image")->raw()[0] == 6);
  CHECK(Ints(*out, "label") == std::vector<int64_t>{7, 9});
  auto ints = RunSpec(absl::StrCat("source: {idx: {images: '", dir.File("i32.idx"), "'}}\n"));
  REQUIRE(ints.ok());
  CHECK((*ints)[0].Find("image")->GetAsDouble(0) == 256);
  CHECK((*ints)[1].Find("image")->GetAsDouble(0) == -2);

  WriteFile(dir.File("trunc.idx"), IdxBytes(0x08, {5, 2}, "abc"));
  auto trunc = MakePipeline(absl::StrCat("source: {idx: {images: '", dir.File("trunc.idx"), "'}}\n"));
  REQUIRE_FALSE(trunc.ok());
  CHECK_THAT(Msg(trunc.status()), Catch::Contains("truncated"));
  WriteFile(dir.File("magic.idx"), "PK\x03\x04garbage");
  auto magic = MakePipeline(absl::StrCat("source: {idx: {images: '", dir.File("magic.idx"), "'}}\n"));
  REQUIRE_FALSE(magic.ok());
  CHECK_THAT(Msg(magic.status()), Catch::Contains("byte offset 0: not an IDX file"));
  WriteFile(dir.File("lab3.idx"), IdxBytes(0x08, {3}, std::string("\x01\x02\x03", 3)));
  auto mismatch = MakePipeline(absl::StrCat("source: {idx: {images: '", dir.File("img.idx"), "', labels: '", dir.File("lab3.idx"), "'}}\n"));
  REQUIRE_FALSE(mismatch.ok());
  CHECK_THAT(Msg(mismatch.status()), Catch::Contains("holds 3 items but images holds 2"));
  WriteFile(dir.File("bad.idx.gz"), "\x1f\x8b\x08\x00garbage-not-deflate");
  auto gz = MakePipeline(absl::StrCat("source: {idx: {images: '", dir.File("bad.idx.gz"), "'}}\n"));
  REQUIRE_FALSE(gz.ok());
  CHECK_THAT(Msg(gz.status()), Catch::Contains("bad.idx.gz"));
}

TEST_CASE("idx reads Debian's gzipped Fashion-MNIST") {
  const std::string images = "/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz";
  const std::string labels = "/usr/share/datasets/fashion-mnist/t10k-labels-idx1-ubyte.gz";
  auto p = MakePipeline(absl::StrCat("source: {idx: {images: ", images, ", labels: ", labels, "}}\n"));
  REQUIRE(p.ok());
  auto out = Collect(**p);
  REQUIRE(out.ok());
  REQUIRE(out->size() == 10000);
  CHECK((*out)[0].Find("image")->shape() == Shape{28, 28});
  std::set<int64_t> classes;
  for (int64_t l : Ints(*out, "label")) classes.insert(l);
  CHECK(classes.size() == 10);
  CHECK(*classes.begin() == 0);
  CHECK(*classes.rbegin() == 9);
}

}  // namespace
}  // namespace sluice::pipeline
