#include "e2e_dataplane/e2e_test_util.h"

#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "dataplane/pipeline/spec_parser.h"
#include "testing/test_util.h"

namespace sluice::e2e {

local::LocalDataServiceOptions TestServiceOptions(int64_t worker_timeout_ms) {
  local::LocalDataServiceOptions options;
  options.bin_dir = sluice::testing::BinaryDir() + "/bin";
  options.worker_timeout_ms = worker_timeout_ms;
  options.heartbeat_interval_ms = 100;
  options.dispatcher_flags = {"--log_level=info"};
  return options;
}

std::unique_ptr<local::LocalDataService> StartService(int workers, local::LocalDataServiceOptions options) {
  auto service = std::make_unique<local::LocalDataService>(std::move(options));
  absl::Status started = service->StartDispatcher();
  INFO(started.ToString());
  REQUIRE(started.ok());
  for (int i = 0; i < workers; ++i) {
    auto added = service->AddWorker();
    INFO(added.status().ToString());
    REQUIRE(added.ok());
  }
  absl::Status registered = service->WaitForWorkers(workers, absl::Seconds(30));
  INFO(registered.ToString() << "\n" << service->Logs());
  REQUIRE(registered.ok());
  return service;
}

pipeline::PipelineDef Pipeline(const std::string& yaml) {
  auto def = pipeline::ParsePipelineSpec(yaml, "<test>");
  INFO(def.status().ToString());
  REQUIRE(def.ok());
  return *def;
}

pipeline::PipelineDef RangePipeline(int64_t n, int64_t split_size) {
  return Pipeline(absl::StrCat("source: {range: {stop: ", n, ", split_size: ", split_size, "}}\n"));
}

pipeline::PipelineDef PaddedRangePipeline(int64_t n, int64_t split_size, int64_t length) {
  return Pipeline(absl::StrCat("source: {range: {stop: ", n, ", split_size: ", split_size, "}}\n",
                               "steps:\n  - map: {parallelism: 1, ops: [{reshape: {field: value, shape: [1]}}, "
                               "{pad: {field: value, length: ", length, "}}]}\n"));
}

client::DataServiceClientOptions ClientOptions(const std::string& address, const pipeline::PipelineDef& def,
                                               service::ShardingPolicy sharding) {
  client::DataServiceClientOptions o;
  o.dispatcher_address = address;
  o.pipeline = def;
  o.sharding = sharding;
  o.heartbeat_interval = absl::Milliseconds(100);
  o.initial_backoff = absl::Milliseconds(20);
  o.max_backoff = absl::Milliseconds(500);
  o.create_timeout = absl::Seconds(30);
  return o;
}

std::unique_ptr<client::DataServiceClient> MakeClient(client::DataServiceClientOptions options) {
  auto client = client::DataServiceClient::Create(std::move(options));
  INFO(client.status().ToString());
  REQUIRE(client.ok());
  return *std::move(client);
}

int64_t IntField(const pipeline::Element& element, const std::string& field) {
  auto tensor = element.Get(field);
  INFO(tensor.status().ToString());
  REQUIRE(tensor.ok());
  if ((*tensor)->rank() > 0) {  // a padded field: the value is its first entry
    REQUIRE((*tensor)->num_elements() > 0);
    return static_cast<int64_t>((*tensor)->GetAsDouble(0));
  }
  auto value = (*tensor)->AsInt64();
  INFO(value.status().ToString());
  REQUIRE(value.ok());
  return *value;
}

std::optional<int64_t> TryIntField(const pipeline::Element& element, const std::string& field) {
  auto tensor = element.Get(field);
  if (!tensor.ok() || (*tensor)->num_elements() < 1) return std::nullopt;
  if ((*tensor)->rank() > 0) return static_cast<int64_t>((*tensor)->GetAsDouble(0));
  auto value = (*tensor)->AsInt64();
  if (!value.ok()) return std::nullopt;
  return *value;
}

std::string MissingRanges(const std::map<int64_t, int>& counts, int64_t n) {
  std::string out;
  int64_t v = 0;
  while (v < n) {
    if (counts.count(v)) {
      ++v;
      continue;
    }
    int64_t end = v;
    while (end + 1 < n && !counts.count(end + 1)) ++end;
    absl::StrAppend(&out, out.empty() ? "" : " ", v, "-", end);
    v = end + 1;
  }
  return out;
}

std::string StringField(const pipeline::Element& element, const std::string& field) {
  auto tensor = element.Get(field);
  INFO(tensor.status().ToString());
  REQUIRE(tensor.ok());
  REQUIRE((*tensor)->strings().size() == 1);
  return std::string((*tensor)->strings()[0]);
}

std::optional<pipeline::Element> Next(client::DataServiceClient& client, absl::Duration timeout) {
  auto next = client.GetNext(timeout);
  INFO("GetNext: " << next.status().ToString());
  REQUIRE(next.ok());
  return *std::move(next);
}

std::vector<int64_t> ReadAll(client::DataServiceClient& client, const std::string& field, absl::Duration timeout) {
  std::vector<int64_t> values;
  const absl::Time deadline = absl::Now() + timeout;
  while (true) {
    const absl::Duration left = deadline - absl::Now();
    INFO("read " << values.size() << " elements before the deadline");
    REQUIRE(left > absl::ZeroDuration());
    std::optional<pipeline::Element> e = Next(client, left);
    if (!e) break;
    values.push_back(IntField(*e, field));
  }
  return values;
}

std::vector<int64_t> ReadSome(client::DataServiceClient& client, int64_t n, const std::string& field) {
  std::vector<int64_t> values;
  while (static_cast<int64_t>(values.size()) < n) {
    std::optional<pipeline::Element> e = Next(client);
    if (!e) break;
    values.push_back(IntField(*e, field));
  }
  return values;
}

void ReadBothToEnd(client::DataServiceClient& a, client::DataServiceClient& b, std::vector<int64_t>* from_a,
                   std::vector<int64_t>* from_b, const std::string& field) {
  bool a_done = false, b_done = false;
  while (!a_done || !b_done) {
    if (!a_done) {
      auto e = Next(a);
      if (e) from_a->push_back(IntField(*e, field));
      a_done = !e;
    }
    if (!b_done) {
      auto e = Next(b);
      if (e) from_b->push_back(IntField(*e, field));
      b_done = !e;
    }
  }
}

void WriteWorkerData(const std::string& dir, int worker, int lines) {
  std::filesystem::create_directories(dir);
  std::ofstream out(dir + "/data.jsonl");
  for (int i = 0; i < lines; ++i) out << "{\"w\": " << worker << ", \"i\": " << i << "}\n";
}

void AddWorkersWithOwnData(local::LocalDataService& service, const std::string& dir_prefix, int n, int lines) {
  for (int w = 0; w < n; ++w) {
    const std::string dir = absl::StrCat(dir_prefix, w);
    WriteWorkerData(dir, w, lines);
    auto added = service.AddWorker({}, dir);
    INFO(added.status().ToString());
    REQUIRE(added.ok());
  }
  REQUIRE(service.WaitForWorkers(n, absl::Seconds(30)).ok());
}

std::map<int64_t, int> Counts(const std::vector<int64_t>& values) {
  std::map<int64_t, int> counts;
  for (int64_t v : values) ++counts[v];
  return counts;
}

std::string CountProblems(const std::map<int64_t, int>& counts, int64_t n, int times) {
  std::string problems;
  int reported = 0;
  auto report = [&](const std::string& what) {
    if (++reported <= 20) absl::StrAppend(&problems, what, "; ");
  };
  for (int64_t v = 0; v < n; ++v) {
    auto it = counts.find(v);
    const int seen = it == counts.end() ? 0 : it->second;
    if (seen != times) report(absl::StrCat("value ", v, " seen ", seen, " times"));
  }
  for (const auto& [v, seen] : counts) {
    if (v < 0 || v >= n) report(absl::StrCat("unexpected value ", v, " (", seen, " times)"));
  }
  if (reported > 20) absl::StrAppend(&problems, "... ", reported, " problems in all");
  return problems;
}

bool PollUntil(const std::function<bool()>& condition, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (true) {
    if (condition()) return true;
    if (absl::Now() >= deadline) return false;
    absl::SleepFor(absl::Milliseconds(20));
  }
}

double WorkerMetric(const local::LocalDataService& service, int worker, const std::string& name) {
  auto samples = service.ScrapeWorker(worker);
  INFO(samples.status().ToString());
  REQUIRE(samples.ok());
  return local::SumSamples(*samples, name);
}

}  // namespace sluice::e2e
