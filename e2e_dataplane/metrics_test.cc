// Metrics of real processes: the values of the dispatcher's gauges and counters that no other test
// reads (jobs, journal bytes, snapshots, client bytes), and docs/metrics.md against what a running
// dispatcher and worker export — every documented name with its type and labels is exported, and
// every exported sluice_* name is documented.
#include <signal.h>

#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <optional>
#include <set>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "e2e_dataplane/e2e_test_util.h"
#include "testing/test_util.h"

namespace sluice::e2e {
namespace {

using client::DataServiceClient;

constexpr int64_t kElements = 6000;
constexpr int64_t kSplitSize = 50;
constexpr int64_t kPadLength = 512;  // 4 KiB elements: a client that stops reading stalls the workers

// A dynamic-sharding client of padded elements with a small buffer: when the test stops reading,
// the job cannot end (its workers stall with most of the epoch unread).
client::DataServiceClientOptions PausableClient(const local::LocalDataService& service, const std::string& job_name) {
  auto o = ClientOptions(service.dispatcher_address(), PaddedRangePipeline(kElements, kSplitSize, kPadLength),
                         service::SHARDING_DYNAMIC);
  o.job_name = job_name;
  o.compression = service::COMPRESSION_NONE;
  o.max_buffered_bytes = 32 << 10;
  o.max_elements_per_response = 16;
  return o;
}

double DispatcherMetric(const local::LocalDataService& service, const std::string& name,
                        const std::map<std::string, std::string>& match = {}) {
  auto samples = service.ScrapeDispatcher();
  INFO(samples.status().ToString());
  REQUIRE(samples.ok());
  return local::SumSamples(*samples, name, match);
}

// Bytes of the files in the journal directory (segments and snapshots; not temporary files).
int64_t JournalDirBytes(const std::string& dir) {
  int64_t total = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (absl::EndsWith(name, ".log") || absl::EndsWith(name, ".snap")) total += static_cast<int64_t>(entry.file_size());
  }
  return total;
}

int SnapshotFiles(const std::string& dir) {
  int n = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    n += absl::EndsWith(entry.path().filename().string(), ".snap") ? 1 : 0;
  }
  return n;
}

TEST_CASE("Dispatcher metrics of a real process: jobs, journal bytes, snapshots, client bytes") {
  sluice::testing::TempDir tmp;
  auto options = TestServiceOptions();
  options.journal_dir = tmp.File("journal");
  options.dataservice = "metrics-e2e";
  // A snapshot after every 20 journaled updates (checked at each tick); reading one epoch journals
  // hundreds (split starts, leases, ends).
  options.dispatcher_flags.push_back("--snapshot_every=20");
  auto service = StartService(2, options);
  const std::string journal_dir = options.journal_dir;
  const std::map<std::string, std::string> ds = {{"dataservice", "metrics-e2e"}};

  // Before any job: no job; the journal holds the workers' registrations and the gauge says how
  // many bytes that is (it lags by a tick, so poll until it equals what is on disk).
  CHECK(DispatcherMetric(*service, "sluice_dispatcher_jobs", ds) == 0);
  int64_t journal_before = 0;
  CHECK(PollUntil([&] {
    journal_before = JournalDirBytes(journal_dir);
    return journal_before > 0 && DispatcherMetric(*service, "sluice_dispatcher_journal_bytes", ds) == journal_before;
  }));
  const double snapshots_before = DispatcherMetric(*service, "sluice_dispatcher_snapshots_total", ds);

  auto client_options = PausableClient(*service, "metered");
  auto client = MakeClient(client_options);
  std::vector<int64_t> values = ReadSome(*client, 500);
  REQUIRE(values.size() == 500);
  // Paused mid-job: one unfinished job.
  CHECK(PollUntil([&] { return DispatcherMetric(*service, "sluice_dispatcher_jobs", ds) == 1; }));
  CHECK_FALSE(client->stats().job_finished);
  std::vector<int64_t> rest = ReadAll(*client);
  values.insert(values.end(), rest.begin(), rest.end());
  REQUIRE(CountProblems(Counts(values), kElements, 1) == "");
  CHECK(client->stats().job_finished);
  // The job finished: no unfinished job left.
  CHECK(PollUntil([&] { return DispatcherMetric(*service, "sluice_dispatcher_jobs", ds) == 0; }));

  // Every snapshot written is counted (one log line each), and one is on disk (a snapshot replaces
  // the ones before it).
  auto dispatcher_lines = [&] { return service->dispatcher().process->CountLines("msg=\"journal snapshot written\""); };
  double snapshots = 0;
  CHECK(PollUntil([&] {
    snapshots = DispatcherMetric(*service, "sluice_dispatcher_snapshots_total", ds);
    return snapshots == dispatcher_lines() && snapshots >= snapshots_before + 1;
  }));
  CHECK(PollUntil([&] { return SnapshotFiles(journal_dir) == 1; }));
  // The journal grew with the job (and was compacted meanwhile); the gauge matches the directory
  // once the dispatcher is idle.
  int64_t journal_after = 0;
  CHECK(PollUntil([&] {
    journal_after = JournalDirBytes(journal_dir);
    return DispatcherMetric(*service, "sluice_dispatcher_journal_bytes", ds) == journal_after;
  }));
  CHECK(journal_after > journal_before);

  // The client's decoded bytes reach the dispatcher with its heartbeats; its last heartbeat (when
  // it is closed) carries the final totals.
  const client::ClientStats final_stats = client->stats();
  CHECK(final_stats.elements_total == kElements);
  CHECK(final_stats.bytes_total >= kElements * kPadLength * 8);
  client.reset();
  const std::map<std::string, std::string> job = {{"dataservice", "metrics-e2e"}, {"job", "metered"}};
  CHECK(PollUntil([&] {
    return DispatcherMetric(*service, "sluice_client_bytes_total", job) == final_stats.bytes_total;
  }));
  CHECK(DispatcherMetric(*service, "sluice_client_elements_total", job) == kElements);
  std::cout << "dispatcher metrics: journal " << journal_before << " -> " << journal_after << " bytes, "
            << snapshots << " snapshots, client bytes " << final_stats.bytes_total << std::endl;
  INFO(service->Logs());
}

// ---------------------------------------------------------------- docs/metrics.md vs. /metrics

struct DocumentedMetric {
  std::string type;              // counter | gauge
  std::set<std::string> labels;
};

// Backticked words of `text`, in order.
std::vector<std::string> Backticked(const std::string& text) {
  std::vector<std::string> out;
  const std::vector<std::string> parts = absl::StrSplit(text, '`');
  for (size_t i = 1; i < parts.size(); i += 2) out.push_back(parts[i]);
  return out;
}

std::vector<std::string> Cells(const std::string& row) {
  std::vector<std::string> cells = absl::StrSplit(row, '|');
  // A row "| a | b |" splits into "", " a ", " b ", "".
  std::vector<std::string> out;
  for (size_t i = 1; i + 1 < cells.size(); ++i) out.push_back(std::string(absl::StripAsciiWhitespace(cells[i])));
  return out;
}

std::set<std::string> LabelList(const std::string& cell) {
  std::set<std::string> out;
  for (absl::string_view l : absl::StrSplit(cell, ',', absl::SkipWhitespace())) {
    out.insert(std::string(absl::StripAsciiWhitespace(absl::StripSuffix(absl::StripPrefix(absl::StripAsciiWhitespace(l), "`"), "`"))));
  }
  return out;
}

struct MetricsDoc {
  std::map<std::string, DocumentedMetric> metrics;
  // label -> the metric names or prefixes ("sluice_client_") its row in the Labels table lists;
  // "*" for "every metric".
  std::map<std::string, std::vector<std::string>> label_rows;
};

// Reads the tables of docs/metrics.md: "## Labels" (label | on | value), "## Dispatcher"
// (metric | type | labels | meaning) and "## Worker" (metric | type | meaning, with the labels in the
// "All with labels ..." sentence).
MetricsDoc ReadMetricsDoc(const std::string& path) {
  std::ifstream in(path);
  INFO(path);
  REQUIRE(in.good());
  MetricsDoc doc;
  std::string section;
  std::set<std::string> worker_labels;
  std::vector<std::string> worker_metrics;
  std::string line;
  while (std::getline(in, line)) {
    if (absl::StartsWith(line, "## ")) {
      section = line.substr(3);
      continue;
    }
    if (absl::StartsWith(section, "Worker") && absl::StartsWith(line, "All with labels")) {
      for (const auto& l : Backticked(line)) worker_labels.insert(l);
    }
    if (!absl::StartsWith(line, "| `")) continue;
    const std::vector<std::string> cells = Cells(line);
    if (section == "Labels" && cells.size() >= 2) {
      const std::vector<std::string> label = Backticked(cells[0]);
      REQUIRE(label.size() == 1);
      std::vector<std::string>& on = doc.label_rows[label[0]];
      if (absl::StrContains(cells[1], "every metric")) on.push_back("*");
      for (std::string m : Backticked(cells[1])) {
        if (absl::EndsWith(m, "*")) m.pop_back();  // a prefix
        on.push_back(m);
      }
    } else if (absl::StartsWith(section, "Dispatcher") && cells.size() >= 3) {
      const std::vector<std::string> name = Backticked(cells[0]);
      REQUIRE(name.size() == 1);
      doc.metrics[name[0]] = DocumentedMetric{cells[1], LabelList(cells[2])};
    } else if (absl::StartsWith(section, "Worker") && cells.size() >= 2) {
      const std::vector<std::string> name = Backticked(cells[0]);
      REQUIRE(name.size() == 1);
      worker_metrics.push_back(name[0]);
      doc.metrics[name[0]] = DocumentedMetric{cells[1], {}};
    }
  }
  REQUIRE_FALSE(worker_labels.empty());
  for (const auto& m : worker_metrics) doc.metrics[m].labels = worker_labels;
  return doc;
}

struct ExportedMetric {
  std::string type;                  // from the # TYPE line
  std::set<std::set<std::string>> label_sets;  // label names of each sample
};

// The sluice_* families of one /metrics page: type and the label names of their samples.
std::map<std::string, ExportedMetric> Exported(const std::string& host, int port) {
  auto page = local::HttpGet(host, port, "/metrics");
  INFO(page.status().ToString());
  REQUIRE(page.ok());
  REQUIRE(page->status == 200);
  std::map<std::string, ExportedMetric> out;
  for (absl::string_view line : absl::StrSplit(page->body, '\n', absl::SkipEmpty())) {
    if (absl::StartsWith(line, "# TYPE ")) {
      const std::vector<std::string> parts = absl::StrSplit(line, ' ');
      REQUIRE(parts.size() == 4);
      if (absl::StartsWith(parts[2], "sluice_")) out[parts[2]].type = parts[3];
    }
  }
  auto samples = local::ParsePrometheusText(page->body);
  INFO(samples.status().ToString());
  REQUIRE(samples.ok());
  for (const auto& s : *samples) {
    if (!absl::StartsWith(s.name, "sluice_")) continue;
    std::set<std::string> names;
    for (const auto& [k, v] : s.labels) names.insert(k);
    out[s.name].label_sets.insert(names);
  }
  return out;
}

bool LabelRowCovers(const std::vector<std::string>& on, const std::string& metric) {
  for (const auto& m : on) {
    if (m == "*" || m == metric || (absl::EndsWith(m, "_") && absl::StartsWith(metric, m))) return true;
  }
  return false;
}

TEST_CASE("docs/metrics.md lists exactly the metrics a running dispatcher and worker export, with their types and labels") {
  const MetricsDoc doc = ReadMetricsDoc(sluice::testing::SourceDir() + "/docs/metrics.md");
  REQUIRE(doc.metrics.size() >= 10);

  // Every series the dispatcher can have: a dynamic job with a client (client counters, splits
  // served, per-job workers) that is still running, and a worker removed while it read a split
  // under a position lease (a removal and a remainder).
  auto options = TestServiceOptions();
  options.worker_flags = {"--buffer_elements=8", "--split_lease_elements=4", "--split_lease_max_elements=8"};
  auto service = StartService(2, options);
  auto client_options = PausableClient(*service, "documented");
  auto client = MakeClient(client_options);
  REQUIRE(ReadSome(*client, 500).size() == 500);
  // Paused: the workers stall mid-split. Kill one (SIGKILL: a SIGTERM'd worker hands its splits
  // back at its readers' positions instead): after the heartbeat timeout the dispatcher removes it,
  // and the split it was reading comes back as a remainder from its lease's end.
  REQUIRE(PollUntil([&] { return client->stats().buffered_bytes >= client_options.max_buffered_bytes; }));
  service->worker(0).process->Signal(SIGKILL);
  auto exited = service->worker(0).process->Wait(absl::Seconds(30));
  REQUIRE(exited.ok());
  REQUIRE(service->WaitForWorkers(1, absl::Seconds(30)).ok());

  const local::ServiceProcess& dispatcher = service->dispatcher();
  const local::ServiceProcess& worker = service->worker(1);
  std::map<std::string, ExportedMetric> exported;
  // The per-job gauges and client counters appear with the dispatcher's next tick and the client's
  // next heartbeat: poll until every documented name is there.
  auto missing = [&] {
    exported = Exported("127.0.0.1", dispatcher.metrics_port);
    for (auto& [name, m] : Exported("127.0.0.1", worker.metrics_port)) exported[name] = m;
    std::vector<std::string> out;
    for (const auto& [name, m] : doc.metrics) {
      if (exported.count(name) == 0 || exported[name].label_sets.empty()) out.push_back(name);
    }
    return out;
  };
  const bool all_there = PollUntil([&] { return missing().empty(); });
  INFO("documented but not exported: " << absl::StrJoin(missing(), ", ") << "\n" << service->Logs());
  CHECK(all_there);

  for (const auto& [name, m] : exported) {
    INFO("exported metric " << name);
    auto documented = doc.metrics.find(name);
    CHECK(documented != doc.metrics.end());  // every exported sluice_* metric is documented
    if (documented == doc.metrics.end()) continue;
    CHECK(m.type == documented->second.type);
    for (const auto& labels : m.label_sets) {
      CHECK(labels == documented->second.labels);  // the labels column (or sentence) is exact
      // The Labels table names this metric in each of its labels' rows.
      for (const auto& label : labels) {
        INFO("label " << label);
        auto row = doc.label_rows.find(label);
        REQUIRE(row != doc.label_rows.end());
        CHECK(LabelRowCovers(row->second, name));
      }
    }
  }
  // And each Labels row lists only metrics that carry the label.
  for (const auto& [label, on] : doc.label_rows) {
    for (const auto& m : on) {
      if (m == "*" || absl::EndsWith(m, "_")) continue;
      INFO("the Labels table's `" << label << "` row lists " << m);
      auto documented = doc.metrics.find(m);
      REQUIRE(documented != doc.metrics.end());
      CHECK(documented->second.labels.count(label) == 1);
    }
  }
  std::cout << "docs/metrics.md: " << doc.metrics.size() << " metrics documented, " << exported.size()
            << " sluice_* families exported" << std::endl;
}

}  // namespace
}  // namespace sluice::e2e
