#include "bench/operator/operator_bench.h"

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <iostream>
#include <memory>
#include <thread>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "bench/common/bench_util.h"
#include "bench/kubecluster/bench_cluster.h"
#include "kube/client.h"
#include "kube/resource.h"
#include "nlohmann/json.hpp"

#ifndef SLUICE_BENCH_OPERATOR_BINARY
#define SLUICE_BENCH_OPERATOR_BINARY ""
#endif
#ifndef SLUICE_BENCH_SOURCE_DIR
#define SLUICE_BENCH_SOURCE_DIR ""
#endif

namespace sluice::bench {
namespace {

using json = nlohmann::json;

constexpr char kNamespace[] = "bench";
constexpr char kOperatorAgent[] = "sluice-operator";

json DataServiceManifest(int index, int workers) {
  return json{
      {"apiVersion", "sluice.dev/v1alpha1"},
      {"kind", "DataService"},
      {"metadata", {{"name", absl::StrFormat("ds-%04d", index)}, {"namespace", kNamespace}}},
      {"spec",
       {{"dispatcher", {{"image", "sluice/dispatcher:bench"}}},
        {"workers",
         {{"image", "sluice/worker:bench"},
          {"replicas", workers},
          {"maxReplicas", std::max(32, workers)},
          {"resources", {{"requests", {{"cpu", "100m"}, {"memory", "64Mi"}}}}}}}}}};
}

// The whole run; every child is stopped when this object goes.
class BenchRun {
 public:
  BenchRun(const OperatorBenchOptions& options, std::ostream* progress) : o_(options), progress_(progress) {}
  ~BenchRun() {
    operator_.reset();
    cluster_.reset();
  }

  absl::StatusOr<OperatorBenchResult> Run();

 private:
  void Say(const std::string& line) {
    if (progress_ != nullptr) (*progress_) << line << std::endl;
  }
  absl::Status Prepare();
  absl::Status CreateDataServices();
  absl::StatusOr<std::unique_ptr<BenchChild>> StartOperator();

  const OperatorBenchOptions o_;
  std::ostream* progress_;
  std::string source_dir_, operator_binary_;
  std::unique_ptr<BenchCluster> cluster_;
  std::unique_ptr<BenchChild> operator_;
};

absl::Status BenchRun::Prepare() {
  if (o_.dataservices < 1) return absl::InvalidArgumentError("--dataservices must be at least 1");
  if (o_.workers < 1 || o_.workers > 256) return absl::InvalidArgumentError("--workers must be in [1, 256]");
  if (o_.nodes < 1 || o_.nodes > 20) return absl::InvalidArgumentError("--nodes must be in [1, 20]");
  operator_binary_ = FindSluiceBinary(o_.operator_binary, "sluice-operator", SLUICE_BENCH_OPERATOR_BINARY);
  if (operator_binary_.empty()) {
    return absl::NotFoundError("sluice-operator not found next to this binary, in $SLUICE_BINARY_DIR/bin or the build "
                               "tree; build it or pass --operator");
  }
  source_dir_ = FindSourceDir(o_.source_dir, SLUICE_BENCH_SOURCE_DIR);
  return absl::OkStatus();
}

absl::Status BenchRun::CreateDataServices() {
  if (absl::Status s = cluster_->InstallDataServiceCrd(kNamespace); !s.ok()) return s;
  kube::ResourceRef ds{"sluice.dev", "v1alpha1", "dataservices", true};
  for (int i = 0; i < o_.dataservices; ++i) {
    auto made = cluster_->client().Create(ds, kNamespace, DataServiceManifest(i, o_.workers));
    if (!made.ok()) return made.status();
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<BenchChild>> BenchRun::StartOperator() {
  return BenchChild::Start({operator_binary_, "--kubeconfig", cluster_->kubeconfig(), "--metrics-address", "127.0.0.1:0",
                              "--health-address", "off", "--concurrency", absl::StrCat(o_.concurrency), "--kube-qps",
                              absl::StrCat(o_.kube_qps), "--kube-burst", "1000", "--log-level", "warning"},
                           "", cluster_->work_dir() + "/operator.log");
}

absl::StatusOr<OperatorBenchResult> BenchRun::Run() {
  if (absl::Status s = Prepare(); !s.ok()) return s;
  BenchClusterOptions cluster_options =
      ControllerBenchClusterOptions("operator", kNamespace, o_.nodes, o_.dataservices, o_.workers + 1);
  cluster_options.python = o_.python;
  cluster_options.source_dir = source_dir_;
  cluster_options.work_dir = o_.work_dir;
  auto cluster = BenchCluster::Start(cluster_options);
  if (!cluster.ok()) return cluster.status();
  cluster_ = *std::move(cluster);
  Say(absl::StrCat("operator benchmark: ", o_.dataservices, " DataServices x ", o_.workers, " workers on ", o_.nodes,
                   " simulated nodes (work dir ", cluster_->work_dir(), ")"));
  kube::Client& client = cluster_->client();
  absl::Time created_start = absl::Now();
  if (absl::Status s = CreateDataServices(); !s.ok()) return s;
  Say(absl::StrFormat("created %d DataServices in %.1f s; starting %s", o_.dataservices,
                      absl::ToDoubleSeconds(absl::Now() - created_start), operator_binary_));
  if (auto reset = client.RequestJson("POST", "/_admin/stats/reset"); !reset.ok()) return reset.status();

  auto started = StartOperator();
  if (!started.ok()) return started.status();
  operator_ = *std::move(started);
  const absl::Time t0 = absl::Now();
  const std::string proc = absl::StrCat("/proc/", operator_->pid());
  kube::ResourceRef ds_ref{"sluice.dev", "v1alpha1", "dataservices", true};
  OperatorBenchResult result;
  int ready = 0;
  absl::Time next_report = t0;
  int64_t hwm_kib = 0, cpu_ticks = 0;
  while (true) {
    if (!operator_->Alive()) {
      return absl::InternalError(absl::StrCat("sluice-operator exited:\n", operator_->LogTail()));
    }
    // Sample before listing, so the numbers at "all Ready" are the operator's, not the listing's.
    hwm_kib = std::max(hwm_kib, ProcStatusKib(ReadTextFile(proc + "/status"), "VmHWM"));
    cpu_ticks = std::max(cpu_ticks, ProcStatCpuTicks(ReadTextFile(proc + "/stat")));
    auto list = client.ListAll(ds_ref, kNamespace);
    if (list.ok()) {
      ready = 0;
      for (const json& item : (*list)["items"]) ready += HasTrueCondition(item, "Ready");
    }
    absl::Time now = absl::Now();
    if (ready == o_.dataservices) break;
    if (now - t0 > absl::Seconds(o_.timeout_seconds)) {
      return absl::DeadlineExceededError(absl::StrCat("only ", ready, " of ", o_.dataservices,
                                                      " DataServices were Ready after ", o_.timeout_seconds,
                                                      " s; operator log tail:\n", operator_->LogTail()));
    }
    if (now >= next_report) {
      Say(absl::StrFormat("t=%5.1fs ready=%d/%d operator_peak_rss=%.1fMiB", absl::ToDoubleSeconds(now - t0), ready,
                          o_.dataservices, static_cast<double>(hwm_kib) / 1024.0));
      next_report = now + absl::Seconds(2);
    }
    absl::SleepFor(absl::Milliseconds(250));
  }
  result.seconds_to_ready = absl::ToDoubleSeconds(absl::Now() - t0);
  hwm_kib = std::max(hwm_kib, ProcStatusKib(ReadTextFile(proc + "/status"), "VmHWM"));
  cpu_ticks = std::max(cpu_ticks, ProcStatCpuTicks(ReadTextFile(proc + "/stat")));
  auto stats = client.RequestJson("GET", "/_admin/stats");
  if (!stats.ok()) return stats.status();
  if (absl::Status s = FillRequestCounts(stats->dump(), kOperatorAgent, &result); !s.ok()) return s;
  operator_->Stop(absl::Seconds(10));

  result.dataservices = o_.dataservices;
  result.workers = o_.workers;
  result.nodes = o_.nodes;
  result.peak_rss_mib = static_cast<double>(hwm_kib) / 1024.0;
  result.cpu_seconds = static_cast<double>(cpu_ticks) / static_cast<double>(sysconf(_SC_CLK_TCK));
  result.machine = CpuModelName();
  result.cores = static_cast<int>(std::thread::hardware_concurrency());
  Say(absl::StrFormat("all %d Ready after %.1f s: %d pods created with %d writes (%.2f per pod), peak RSS %.1f MiB, "
                      "%.1f CPU s",
                      o_.dataservices, result.seconds_to_ready, result.pods_created, result.writes,
                      result.writes_per_pod, result.peak_rss_mib, result.cpu_seconds));
  return result;
}

}  // namespace

void AddOperatorBenchFlags(CLI::App* app, OperatorBenchOptions& o) {
  app->add_option("--dataservices", o.dataservices, "DataServices to create")->check(CLI::Range(1, 100000));
  app->add_option("--workers", o.workers, "workers per DataService")->check(CLI::Range(1, 256));
  app->add_option("--nodes", o.nodes, "simulated process nodes")->check(CLI::Range(1, 20));
  app->add_option("--concurrency", o.concurrency, "the operator's --concurrency")->check(CLI::Range(1, 64));
  app->add_option("--kube-qps", o.kube_qps, "the operator's --kube-qps (0: no client-side limit)")
      ->check(CLI::NonNegativeNumber);
  app->add_option("--timeout", o.timeout_seconds, "seconds to wait for every DataService to be Ready")
      ->check(CLI::PositiveNumber);
  app->add_option("--operator", o.operator_binary, "sluice-operator binary (default: the build's)");
  app->add_option("--source-dir", o.source_dir, "repository root with e2e/ and crds/ (default: $SLUICE_SOURCE_DIR, "
                                                "else the build's source tree)");
  app->add_option("--python", o.python, "Python interpreter for the test API server and process nodes");
  app->add_option("--work-dir", o.work_dir, "keep logs here (default: a temporary directory, removed afterwards)");
}

absl::StatusOr<OperatorBenchResult> MeasureOperator(const OperatorBenchOptions& options, std::ostream* progress) {
  BenchRun run(options, options.quiet ? nullptr : progress);
  return run.Run();
}

absl::Status FillRequestCounts(const std::string& stats_json, const std::string& agent, OperatorBenchResult* result) {
  json stats = json::parse(stats_json, nullptr, /*allow_exceptions=*/false);
  if (!stats.is_object()) return absl::InvalidArgumentError("the server's /_admin/stats answer is not a JSON object");
  const json* clients = stats.contains("byClient") ? &stats["byClient"] : nullptr;
  if (clients == nullptr || !clients->is_object() || !clients->contains(agent)) {
    return absl::NotFoundError(absl::StrCat("/_admin/stats has no byClient entry for '", agent,
                                            "' (did the operator send its User-Agent?)"));
  }
  const json& entry = (*clients)[agent];
  if (!entry.is_object() || !entry.contains("verbs") || !entry["verbs"].is_object() || !entry.contains("byResource") ||
      !entry["byResource"].is_object()) {
    return absl::InvalidArgumentError(absl::StrCat("byClient['", agent, "'] lacks verbs or byResource"));
  }
  result->verbs.clear();
  result->by_resource.clear();
  result->requests = 0;
  result->writes = 0;
  for (const auto& [verb, n] : entry["verbs"].items()) {
    if (!n.is_number_integer()) return absl::InvalidArgumentError(absl::StrCat("verbs['", verb, "'] is not an integer"));
    result->verbs[verb] = n.get<int64_t>();
    result->requests += n.get<int64_t>();
    if (verb == "create" || verb == "update" || verb == "patch" || verb == "delete" || verb == "deletecollection") {
      result->writes += n.get<int64_t>();
    }
  }
  for (const auto& [key, n] : entry["byResource"].items()) {
    if (!n.is_number_integer()) {
      return absl::InvalidArgumentError(absl::StrCat("byResource['", key, "'] is not an integer"));
    }
    result->by_resource[key] = n.get<int64_t>();
  }
  result->failed_requests = entry.value("failed", 0);
  auto pods = result->by_resource.find("create pods");
  result->pods_created = pods == result->by_resource.end() ? 0 : pods->second;
  result->writes_per_pod =
      result->pods_created > 0 ? static_cast<double>(result->writes) / static_cast<double>(result->pods_created) : 0;
  return absl::OkStatus();
}

int64_t ProcStatusKib(const std::string& status_text, const std::string& key) {
  for (absl::string_view line : absl::StrSplit(status_text, '\n')) {
    if (!absl::ConsumePrefix(&line, key) || !absl::ConsumePrefix(&line, ":")) continue;
    line = absl::StripAsciiWhitespace(line);
    absl::ConsumeSuffix(&line, "kB");
    int64_t kib = 0;
    if (absl::SimpleAtoi(absl::StripAsciiWhitespace(line), &kib)) return kib;
  }
  return -1;
}

int64_t ProcStatCpuTicks(const std::string& stat_text) {
  // pid (comm) state ppid ... : fields after the last ')' start at field 3; utime and stime are 14 and 15.
  auto close = stat_text.rfind(')');
  if (close == std::string::npos) return -1;
  std::vector<absl::string_view> fields =
      absl::StrSplit(absl::string_view(stat_text).substr(close + 1), ' ', absl::SkipEmpty());
  if (fields.size() < 13) return -1;
  int64_t utime = 0, stime = 0;
  if (!absl::SimpleAtoi(fields[11], &utime) || !absl::SimpleAtoi(fields[12], &stime)) return -1;
  return utime + stime;
}

std::string OperatorResultJson(const OperatorBenchResult& r) {
  json out = {
      {"benchmark", "operator"},
      {"dataservices", r.dataservices},
      {"workers_per_dataservice", r.workers},
      {"simulated_nodes", r.nodes},
      {"seconds_to_ready", std::round(r.seconds_to_ready * 100) / 100},
      {"pods_created", r.pods_created},
      {"operator_requests", r.requests},
      {"operator_writes", r.writes},
      {"operator_failed_requests", r.failed_requests},
      {"writes_per_pod", std::round(r.writes_per_pod * 1000) / 1000},
      {"requests_by_verb", r.verbs},
      {"requests_by_resource", r.by_resource},
      {"peak_rss_mib", std::round(r.peak_rss_mib * 10) / 10},
      {"cpu_seconds", std::round(r.cpu_seconds * 100) / 100},
      {"machine", r.machine},
      {"cores", r.cores},
  };
  return out.dump();
}

int RunOperatorBenchmark(const OperatorBenchOptions& options) {
  absl::StatusOr<OperatorBenchResult> result = MeasureOperator(options, &std::cout);
  if (!result.ok()) {
    std::cerr << "sluice bench operator: " << result.status().message() << std::endl;
    return 1;
  }
  std::cout << OperatorResultJson(*result) << std::endl;
  return 0;
}

}  // namespace sluice::bench
