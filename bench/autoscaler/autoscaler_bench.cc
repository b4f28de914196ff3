#include "bench/autoscaler/autoscaler_bench.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <iostream>
#include <memory>
#include <thread>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "bench/common/bench_util.h"
#include "bench/kubecluster/bench_cluster.h"
#include "bench/operator/operator_bench.h"
#include "kube/client.h"
#include "kube/config.h"
#include "kube/resource.h"
#include "nlohmann/json.hpp"

#ifndef SLUICE_BENCH_AUTOSCALER_BINARY
#define SLUICE_BENCH_AUTOSCALER_BINARY ""
#endif
#ifndef SLUICE_BENCH_SOURCE_DIR
#define SLUICE_BENCH_SOURCE_DIR ""
#endif

namespace sluice::bench {
namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

constexpr char kNamespace[] = "bench";
constexpr char kAutoscalerAgent[] = "sluice-autoscaler";

std::string Name(int index) { return absl::StrFormat("ds-%04d", index); }

json DataServiceManifest(int index, int workers) {
  return json{{"apiVersion", "sluice.dev/v1alpha1"},
              {"kind", "DataService"},
              {"metadata", {{"name", Name(index)}, {"namespace", kNamespace}}},
              {"spec",
               {{"dispatcher", {{"image", "sluice/dispatcher:bench"}}},
                {"workers",
                 {{"image", "sluice/worker:bench"},
                  {"replicas", workers},
                  {"maxReplicas", std::max(32, workers)},
                  {"resources", {{"requests", {{"cpu", "1"}, {"memory", "64Mi"}}}}}}},
                {"autoscaling", {{"enabled", true}}}}}};
}

json PodManifest(int index, const std::string& role, int ordinal) {
  const std::string ds = Name(index);
  const bool worker = role == "worker";
  json labels = {{"sluice.dev/dataservice", ds}, {"sluice.dev/role", role}};
  if (worker) labels["sluice.dev/placement"] = "remote";
  return json{{"apiVersion", "v1"},
              {"kind", "Pod"},
              {"metadata",
               {{"name", worker ? absl::StrCat(ds, "-worker-remote-", ordinal) : ds + "-dispatcher"},
                {"namespace", kNamespace},
                {"labels", labels}}},
              {"spec",
               {{"containers",
                 {{{"name", role},
                   {"image", worker ? "sluice/worker:bench" : "sluice/dispatcher:bench"},
                   {"resources", {{"requests", {{"cpu", worker ? "1" : "100m"}, {"memory", "64Mi"}}}}}}}}}}};
}

class BenchRun {
 public:
  BenchRun(const AutoscalerBenchOptions& options, std::ostream* progress) : o_(options), progress_(progress) {}
  ~BenchRun() {
    autoscaler_.reset();
    prometheus_.reset();
    cluster_.reset();
  }
  absl::StatusOr<AutoscalerBenchResult> Run();

 private:
  void Say(const std::string& line) {
    if (progress_ != nullptr) (*progress_) << line << std::endl;
  }
  absl::Status Prepare();
  absl::Status CreateObjects();
  absl::Status StartPrometheus();
  absl::StatusOr<int> CountDecided();

  const AutoscalerBenchOptions o_;
  std::ostream* progress_;
  std::string source_dir_, binary_, prometheus_url_;
  std::unique_ptr<BenchCluster> cluster_;
  std::unique_ptr<BenchChild> prometheus_;
  std::unique_ptr<BenchChild> autoscaler_;
};

absl::Status BenchRun::Prepare() {
  binary_ = FindSluiceBinary(o_.autoscaler_binary, "sluice-autoscaler", SLUICE_BENCH_AUTOSCALER_BINARY);
  if (binary_.empty()) {
    return absl::NotFoundError("sluice-autoscaler not found next to this binary, in $SLUICE_BINARY_DIR/bin or the "
                               "build tree; build it or pass --autoscaler");
  }
  source_dir_ = FindSourceDir(o_.source_dir, SLUICE_BENCH_SOURCE_DIR);
  if (source_dir_.empty() || !fs::exists(fs::path(source_dir_) / "bench" / "autoscaler" / "fake_prometheus.py")) {
    return absl::NotFoundError(absl::StrCat("the repository (with e2e/apiserver and bench/autoscaler) was not found at '",
                                            source_dir_, "'; pass --source-dir or set $SLUICE_SOURCE_DIR"));
  }
  return absl::OkStatus();
}

absl::Status BenchRun::CreateObjects() {
  if (absl::Status s = cluster_->InstallDataServiceCrd(kNamespace); !s.ok()) return s;
  kube::Client& client = cluster_->client();
  const kube::ResourceRef ds{"sluice.dev", "v1alpha1", "dataservices", true};
  absl::Time next = absl::Now();
  for (int i = 0; i < o_.dataservices; ++i) {
    if (auto made = client.Create(ds, kNamespace, DataServiceManifest(i, o_.workers)); !made.ok()) return made.status();
    if (auto made = client.Create(kube::resources::Pods(), kNamespace, PodManifest(i, "dispatcher", 0)); !made.ok()) {
      return made.status();
    }
    for (int w = 0; w < o_.workers; ++w) {
      if (auto made = client.Create(kube::resources::Pods(), kNamespace, PodManifest(i, "worker", w)); !made.ok()) {
        return made.status();
      }
    }
    if (absl::Now() >= next) {
      Say(absl::StrFormat("created %d/%d DataServices and their pods", i + 1, o_.dataservices));
      next = absl::Now() + absl::Seconds(5);
    }
  }
  const int pods = o_.dataservices * (o_.workers + 1);
  int ready = 0;
  bool all = WaitUntil([&] {
    auto list = client.ListAll(kube::resources::Pods(), kNamespace);
    if (!list.ok()) return false;
    ready = 0;
    for (const json& p : (*list)["items"]) ready += HasTrueCondition(p, "Ready");
    return ready == pods;
  }, absl::Seconds(o_.timeout_seconds), absl::Seconds(2));
  if (!all) return absl::DeadlineExceededError(absl::StrCat("only ", ready, " of ", pods, " pods became Ready"));
  Say(absl::StrFormat("%d pods Ready on %d simulated nodes", pods, o_.nodes));
  return absl::OkStatus();
}

absl::Status BenchRun::StartPrometheus() {
  std::string port_file = cluster_->work_dir() + "/prometheus.port";
  auto p = BenchChild::Start({o_.python, source_dir_ + "/bench/autoscaler/fake_prometheus.py", "--port-file", port_file,
                                "--dataservices", absl::StrCat(o_.dataservices), "--namespace", kNamespace, "--workers",
                                absl::StrCat(o_.workers)},
                               source_dir_, cluster_->work_dir() + "/prometheus.log", {"PYTHONDONTWRITEBYTECODE=1"});
  if (!p.ok()) return p.status();
  prometheus_ = *std::move(p);
  int port = 0;
  bool up = WaitUntil([&] {
    return absl::SimpleAtoi(absl::StripAsciiWhitespace(ReadTextFile(port_file)), &port) && port > 0;
  }, absl::Seconds(30));
  if (!up || !prometheus_->Alive()) return absl::UnavailableError(absl::StrCat("the fake Prometheus did not start:\n", prometheus_->LogTail()));
  prometheus_url_ = absl::StrCat("http://127.0.0.1:", port);
  return absl::OkStatus();
}

absl::StatusOr<int> BenchRun::CountDecided() {
  kube::Client& client = cluster_->client();
  kube::ResourceRef ds{"sluice.dev", "v1alpha1", "dataservices", true};
  auto list = client.ListAll(ds, kNamespace);
  if (!list.ok()) return list.status();
  int decided = 0;
  for (const json& item : (*list)["items"]) {
    if (item.contains("status") && item["status"].is_object() && item["status"].contains("autoscaler") &&
        item["status"]["autoscaler"].contains("decision")) {
      ++decided;
    }
  }
  return decided;
}

absl::StatusOr<AutoscalerBenchResult> BenchRun::Run() {
  if (absl::Status s = Prepare(); !s.ok()) return s;
  BenchClusterOptions cluster_options =
      ControllerBenchClusterOptions("autoscaler", kNamespace, o_.nodes, o_.dataservices, o_.workers + 1);
  cluster_options.python = o_.python;
  cluster_options.source_dir = source_dir_;
  cluster_options.work_dir = o_.work_dir;
  auto cluster = BenchCluster::Start(cluster_options);
  if (!cluster.ok()) return cluster.status();
  cluster_ = *std::move(cluster);
  Say(absl::StrCat("autoscaler benchmark: ", o_.dataservices, " autoscaled DataServices x ", o_.workers,
                   " workers, period ", o_.period_seconds, " s (work dir ", cluster_->work_dir(), ")"));
  kube::Client& client = cluster_->client();
  if (absl::Status s = CreateObjects(); !s.ok()) return s;
  if (absl::Status s = StartPrometheus(); !s.ok()) return s;

  // The autoscaler with its default client settings and sources; Prometheus for every DataService.
  const std::string period = absl::StrCat(o_.period_seconds, "s");
  const std::string window = absl::StrCat(std::max(60.0, o_.period_seconds), "s");
  const std::string max_age = absl::StrCat(std::max(120.0, 4 * o_.period_seconds), "s");
  auto started = BenchChild::Start({binary_, "--kubeconfig", cluster_->kubeconfig(), "--metrics-address", "127.0.0.1:0",
                                      "--health-address", "off", "--period", period, "--window", window,
                                      "--max-signal-age", max_age, "--prometheus-url", prometheus_url_, "--keda", "off",
                                      "--log-level", "warning"},
                                     "", cluster_->work_dir() + "/autoscaler.log");
  if (!started.ok()) return started.status();
  autoscaler_ = *std::move(started);
  const absl::Time t0 = absl::Now();
  const std::string proc = absl::StrCat("/proc/", autoscaler_->pid());
  AutoscalerBenchResult result;
  int decided = 0;
  while (true) {
    if (!autoscaler_->Alive()) return absl::InternalError(absl::StrCat("sluice-autoscaler exited:\n", autoscaler_->LogTail()));
    auto n = CountDecided();
    if (n.ok()) decided = *n;
    if (decided == o_.dataservices) break;
    if (absl::Now() - t0 > absl::Seconds(o_.timeout_seconds)) {
      return absl::DeadlineExceededError(absl::StrCat("only ", decided, " of ", o_.dataservices,
                                                      " DataServices carry status.autoscaler after ", o_.timeout_seconds,
                                                      " s; autoscaler log tail:\n", autoscaler_->LogTail()));
    }
    Say(absl::StrFormat("t=%5.1fs decided=%d/%d rss=%.1fMiB", absl::ToDoubleSeconds(absl::Now() - t0), decided,
                        o_.dataservices, static_cast<double>(ProcStatusKib(ReadTextFile(proc + "/status"), "VmRSS")) / 1024));
    absl::SleepFor(absl::Seconds(3));
  }
  result.seconds_to_all_decided = absl::ToDoubleSeconds(absl::Now() - t0);
  Say(absl::StrFormat("all %d decided after %.1f s; measuring %d periods", o_.dataservices,
                      result.seconds_to_all_decided, o_.windows));

  // Steady state: CPU per wall second over each period, RSS at its end; the API requests over all of them.
  if (auto reset = client.RequestJson("POST", "/_admin/stats/reset"); !reset.ok()) return reset.status();
  const double tick = static_cast<double>(sysconf(_SC_CLK_TCK));
  result.load_before = LoadAverage1();
  for (int w = 0; w < o_.windows; ++w) {
    const int64_t c0 = ProcStatCpuTicks(ReadTextFile(proc + "/stat"));
    const absl::Time w0 = absl::Now();
    absl::SleepFor(absl::Seconds(o_.period_seconds));
    if (!autoscaler_->Alive()) return absl::InternalError(absl::StrCat("sluice-autoscaler exited:\n", autoscaler_->LogTail()));
    const int64_t c1 = ProcStatCpuTicks(ReadTextFile(proc + "/stat"));
    const double wall = absl::ToDoubleSeconds(absl::Now() - w0);
    if (c0 < 0 || c1 < 0) return absl::InternalError("cannot read the autoscaler's /proc/<pid>/stat");
    result.cpu_core_fraction.push_back(static_cast<double>(c1 - c0) / tick / wall);
    result.rss_mib.push_back(static_cast<double>(ProcStatusKib(ReadTextFile(proc + "/status"), "VmRSS")) / 1024);
    Say(absl::StrFormat("period %d/%d: cpu %.2f%% of a core, rss %.1f MiB", w + 1, o_.windows,
                        100 * result.cpu_core_fraction.back(), result.rss_mib.back()));
  }
  result.load_after = LoadAverage1();
  result.peak_rss_mib = static_cast<double>(ProcStatusKib(ReadTextFile(proc + "/status"), "VmHWM")) / 1024;
  auto stats = client.RequestJson("GET", "/_admin/stats");
  if (!stats.ok()) return stats.status();
  OperatorBenchResult counts;
  // No entry: the autoscaler sent nothing over the windows (its watches were opened before them).
  if (absl::Status s = FillRequestCounts(stats->dump(), kAutoscalerAgent, &counts); !s.ok() && !absl::IsNotFound(s)) {
    return s;
  }
  result.requests = counts.requests;
  result.writes = counts.writes;
  result.failed_requests = counts.failed_requests;
  result.by_resource = counts.by_resource;
  {
    // The fake Prometheus's query count (the kube client is a plain HTTP client here).
    kube::Config pc;
    pc.server = prometheus_url_;
    auto http = kube::Client::Create(pc);
    if (http.ok()) {
      auto answer = (*http)->Send("GET", "/stats");
      if (answer.ok()) {
        json j = json::parse(answer->body, nullptr, false);
        if (j.is_object()) result.prometheus_queries = j.value("queries", int64_t{0});
      }
    }
  }
  autoscaler_->Stop(absl::Seconds(10));
  result.dataservices = o_.dataservices;
  result.pods = o_.dataservices * (o_.workers + 1);
  result.period_seconds = o_.period_seconds;
  result.machine = CpuModelName();
  result.cores = static_cast<int>(std::thread::hardware_concurrency());
  return result;
}

}  // namespace

double PeriodMedian(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

void AddAutoscalerBenchFlags(CLI::App* app, AutoscalerBenchOptions& o) {
  app->add_option("--dataservices", o.dataservices, "autoscaled DataServices to create")->check(CLI::Range(1, 100000));
  app->add_option("--workers", o.workers, "worker pods per DataService")->check(CLI::Range(1, 64));
  app->add_option("--nodes", o.nodes, "simulated process nodes")->check(CLI::Range(1, 20));
  app->add_option("--period", o.period_seconds, "the autoscaler's decision period in seconds")
      ->check(CLI::Range(1.0, 600.0));
  app->add_option("--windows", o.windows, "periods the CPU is measured over")->check(CLI::Range(1, 100));
  app->add_option("--timeout", o.timeout_seconds, "seconds to wait for every DataService to be decided")
      ->check(CLI::PositiveNumber);
  app->add_option("--autoscaler", o.autoscaler_binary, "sluice-autoscaler binary (default: the build's)");
  app->add_option("--source-dir", o.source_dir, "repository root with e2e/, crds/ and bench/ (default: "
                                                "$SLUICE_SOURCE_DIR, else the build's source tree)");
  app->add_option("--python", o.python, "Python interpreter for the test API server, nodes and fake Prometheus");
  app->add_option("--work-dir", o.work_dir, "keep logs here (default: a temporary directory, removed afterwards)");
}

absl::StatusOr<AutoscalerBenchResult> MeasureAutoscaler(const AutoscalerBenchOptions& options, std::ostream* progress) {
  BenchRun run(options, options.quiet ? nullptr : progress);
  return run.Run();
}

std::string AutoscalerResultJson(const AutoscalerBenchResult& r) {
  // Rounded to 1/scale (a division by the scale gives the nearest double to the decimal).
  auto round = [](double v, double unit) { return std::round(v / unit) / std::round(1 / unit); };
  std::vector<double> cpu, rss;
  for (double c : r.cpu_core_fraction) cpu.push_back(round(c, 1e-4));
  for (double m : r.rss_mib) rss.push_back(round(m, 0.1));
  const double cpu_median = PeriodMedian(r.cpu_core_fraction);
  const double rss_median = PeriodMedian(r.rss_mib);
  const double periods = r.cpu_core_fraction.empty() ? 1 : static_cast<double>(r.cpu_core_fraction.size());
  json out = {
      {"benchmark", "autoscaler"},
      {"dataservices", r.dataservices},
      {"pods", r.pods},
      {"period_seconds", r.period_seconds},
      {"seconds_to_all_decided", round(r.seconds_to_all_decided, 0.01)},
      {"cpu_core_fraction_median", round(cpu_median, 1e-4)},
      {"cpu_core_fraction_min", cpu.empty() ? 0 : *std::min_element(cpu.begin(), cpu.end())},
      {"cpu_core_fraction_max", cpu.empty() ? 0 : *std::max_element(cpu.begin(), cpu.end())},
      {"cpu_core_fraction_per_period", cpu},
      {"rss_mib_median", round(rss_median, 0.1)},
      {"rss_mib_per_period", rss},
      {"peak_rss_mib", round(r.peak_rss_mib, 0.1)},
      {"requests_per_period", round(static_cast<double>(r.requests) / periods, 0.1)},
      {"writes_per_period", round(static_cast<double>(r.writes) / periods, 0.1)},
      {"failed_requests", r.failed_requests},
      {"prometheus_queries_total", r.prometheus_queries},
      {"requests_by_resource", r.by_resource},
      {"goal_rss_mib", 64},
      {"goal_cpu_core_fraction", 0.05},
      {"meets_goals", r.peak_rss_mib <= 64 && cpu_median <= 0.05},
      {"machine", r.machine},
      {"cores", r.cores},
      {"loadavg_1m_before", round(r.load_before, 0.01)},
      {"loadavg_1m_after", round(r.load_after, 0.01)},
  };
  return out.dump();
}

int RunAutoscalerBenchmark(const AutoscalerBenchOptions& options) {
  absl::StatusOr<AutoscalerBenchResult> result = MeasureAutoscaler(options, &std::cerr);
  if (!result.ok()) {
    std::cerr << "sluice bench autoscaler: " << result.status().message() << std::endl;
    return 1;
  }
  std::cout << AutoscalerResultJson(*result) << std::endl;
  return 0;
}

}  // namespace sluice::bench
