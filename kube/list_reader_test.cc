// The streaming list reader: items one at a time, the list's other fields kept, and clear errors
// for bodies that are not a list.
#include "kube/list_reader.h"

#include <catch2/catch.hpp>

#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"

namespace sluice::kube {
namespace {

using nlohmann::json;

struct Read {
  absl::Status status;
  json head;
  std::vector<json> items;
};

Read ReadText(const std::string& text) {
  Read out;
  out.status = ReadList(
      text, "GET /api/v1/pods",
      [&out](size_t index, json&& item) {
        CHECK(index == out.items.size());
        out.items.push_back(std::move(item));
        return absl::OkStatus();
      },
      &out.head);
  return out;
}

// The error message, checked to be a DataLoss naming the request.
std::string Error(const Read& read) {
  CHECK(read.status.code() == absl::StatusCode::kDataLoss);
  CHECK(absl::StartsWith(read.status.message(), "GET /api/v1/pods: "));
  return std::string(read.status.message());
}

const char kList[] = R"js({"apiVersion": "v1", "kind": "PodList",
  "metadata": {"resourceVersion": "42", "continue": "tok", "items": "not the list's items"},
  "items": [
    {"metadata": {"name": "a", "namespace": "ml", "labels": {"app": "x"}},
     "spec": {"containers": [{"name": "c", "ports": [{"containerPort": 80}, {"containerPort": 81}]}]},
     "status": {"phase": "Running", "conditions": [[], {}, null, true, 1.5, -2, 3]}},
    {"metadata": {"name": "b"}, "spec": {}}
  ],
  "extra": [1, {"k": [2]}]})js";

TEST_CASE("list reader: items one by one as the tree parser reads them, the rest kept as the head") {
  Read read = ReadText(kList);
  REQUIRE(read.status.ok());
  json whole = json::parse(kList);
  REQUIRE(read.items.size() == 2);
  CHECK(read.items[0] == whole["items"][0]);
  CHECK(read.items[1] == whole["items"][1]);
  json head = whole;
  head.erase("items");
  CHECK(read.head == head);

  // From a stream, the same.
  std::istringstream in(kList);
  std::vector<json> streamed;
  json stream_head;
  REQUIRE(ReadList(in, "GET /api/v1/pods", [&](size_t, json&& item) {
            streamed.push_back(std::move(item));
            return absl::OkStatus();
          }, &stream_head).ok());
  CHECK(streamed == read.items);
  CHECK(stream_head == head);
}

TEST_CASE("list reader: empty and null items, and a callback's error stops the read") {
  Read empty = ReadText(R"({"kind": "PodList", "metadata": {"resourceVersion": "1"}, "items": []})");
  REQUIRE(empty.status.ok());
  CHECK(empty.items.empty());
  CHECK(empty.head["metadata"]["resourceVersion"] == "1");
  Read null_items = ReadText(R"({"kind": "PodList", "items": null})");
  REQUIRE(null_items.status.ok());
  CHECK(null_items.items.empty());

  int calls = 0;
  json head;
  absl::Status status = ReadList(
      R"({"items": [{"metadata": {"name": "a"}}, {"metadata": {"name": "b"}}]})", "GET /x",
      [&calls](size_t, json&&) {
        ++calls;
        return absl::InvalidArgumentError("transform refused it");
      },
      &head);
  CHECK(calls == 1);
  CHECK(status == absl::InvalidArgumentError("transform refused it"));
}

TEST_CASE("list reader: bodies that are not a list name the problem") {
  std::string not_json = Error(ReadText("<html>hello</html>"));
  CHECK(absl::StrContains(not_json, "the body is not JSON"));
  CHECK(absl::StrContains(not_json, "it begins: <html>hello</html>"));
  CHECK(absl::StrContains(Error(ReadText("")), "the body is not JSON"));
  // Truncated in the middle of an item (a connection cut short).
  std::string truncated = Error(ReadText(R"({"items": [{"metadata": {"name": "a"}}, {"metadata": {"na)"));
  CHECK(absl::StrContains(truncated, "the body is not JSON"));
  CHECK(absl::StrContains(Error(ReadText(R"([{"metadata": {"name": "a"}}])")),
                          "the body is a JSON array, not a list object"));
  CHECK(absl::StrContains(Error(ReadText(R"("PodList")")), "the body is a JSON string, not a list object"));
  CHECK(absl::StrContains(Error(ReadText(R"({"items": {"a": 1}})")), "\"items\" is an object, not an array"));
  CHECK(absl::StrContains(Error(ReadText(R"({"items": 3})")), "\"items\" is a number, not an array"));
  CHECK(absl::StrContains(Error(ReadText(R"({"items": [{"metadata": {"name": "a"}}, "b"]})")),
                          "items[1] is a string, not an object"));
  CHECK(absl::StrContains(Error(ReadText(R"({"items": [[]]})")), "items[0] is an array, not an object"));
  CHECK(absl::StrContains(Error(ReadText(R"({"items": [{"metadata": {"name": "a"}}, {"spec": {}}]})")),
                          "items[1] has no metadata.name"));
  CHECK(absl::StrContains(Error(ReadText(R"({"items": [{"metadata": {"name": 7}}]})")),
                          "items[0] has no metadata.name"));
  // Trailing data after the list object.
  CHECK(absl::StrContains(Error(ReadText(R"({"items": []} {"items": []})")), "the body is not JSON"));
}

}  // namespace
}  // namespace sluice::kube
