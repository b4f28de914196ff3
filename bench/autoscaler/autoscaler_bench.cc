#include "bench/autoscaler/autoscaler_bench.h"

#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <memory>
#include <sstream>
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

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

bool WaitFor(const std::function<bool()>& done, absl::Duration timeout, absl::Duration interval = absl::Milliseconds(50)) {
  absl::Time deadline = absl::Now() + timeout;
  while (!done()) {
    if (absl::Now() >= deadline) return false;
    absl::SleepFor(interval);
  }
  return true;
}

// A child process in its own process group with its output in a log file (as in bench/operator).
class ChildProcess {
 public:
  static absl::StatusOr<std::unique_ptr<ChildProcess>> Start(const std::vector<std::string>& argv,
                                                             const std::string& cwd, const std::string& log_path,
                                                             const std::vector<std::string>& env = {}) {
    std::vector<char*> args;
    for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0) return absl::InternalError(absl::StrCat("fork for ", argv[0], " failed"));
    if (pid == 0) {
      setsid();
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != parent) _exit(125);
      int fd = open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
      if (fd >= 0) {
        dup2(fd, 1);
        dup2(fd, 2);
        close(fd);
      }
      int null = open("/dev/null", O_RDONLY);
      if (null >= 0) dup2(null, 0);
      if (!cwd.empty() && chdir(cwd.c_str()) != 0) _exit(126);
      for (const std::string& e : env) putenv(const_cast<char*>(e.c_str()));
      execvp(args[0], args.data());
      _exit(127);
    }
    auto child = std::unique_ptr<ChildProcess>(new ChildProcess());
    child->pid_ = pid;
    child->log_ = log_path;
    return child;
  }
  ~ChildProcess() { Stop(absl::Seconds(5)); }

  pid_t pid() const { return pid_; }
  bool Alive() {
    if (pid_ <= 0) return false;
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      return false;
    }
    return true;
  }
  void Stop(absl::Duration grace) {
    if (pid_ <= 0) return;
    pid_t pid = pid_;
    kill(-pid, SIGTERM);
    WaitFor([&] { return !Alive(); }, grace);
    kill(-pid, SIGKILL);
    if (pid_ > 0) {
      waitpid(pid_, nullptr, 0);
      pid_ = -1;
    }
  }
  std::string LogTail(size_t bytes = 2000) const {
    std::string text = ReadFile(log_);
    return text.size() > bytes ? text.substr(text.size() - bytes) : text;
  }

 private:
  ChildProcess() = default;
  pid_t pid_ = -1;
  std::string log_;
};

std::string MachineName() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (absl::StartsWith(line, "model name")) {
      auto colon = line.find(':');
      if (colon != std::string::npos) return std::string(absl::StripAsciiWhitespace(line.substr(colon + 1)));
    }
  }
  return "unknown";
}

// The 1-minute load average (-1 when unreadable).
double LoadAverage() {
  double load = -1;
  std::istringstream in(ReadFile("/proc/loadavg"));
  if (!(in >> load)) return -1;
  return load;
}

std::string ResolveBinary(const AutoscalerBenchOptions& o) {
  if (!o.autoscaler_binary.empty()) return o.autoscaler_binary;
  std::vector<std::string> candidates;
  std::error_code ec;
  fs::path self = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) candidates.push_back((self.parent_path() / "sluice-autoscaler").string());
  if (const char* dir = std::getenv("SLUICE_BINARY_DIR")) candidates.push_back(absl::StrCat(dir, "/bin/sluice-autoscaler"));
  candidates.push_back(SLUICE_BENCH_AUTOSCALER_BINARY);
  for (const std::string& c : candidates) {
    if (!c.empty() && access(c.c_str(), X_OK) == 0) return c;
  }
  return "";
}

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

bool PodReady(const json& pod) {
  if (!pod.contains("status") || !pod["status"].is_object()) return false;
  for (const json& c : pod["status"].value("conditions", json::array())) {
    if (c.value("type", "") == "Ready") return c.value("status", "") == "True";
  }
  return false;
}

class BenchRun {
 public:
  BenchRun(const AutoscalerBenchOptions& options, std::ostream* progress) : o_(options), progress_(progress) {}
  ~BenchRun() {
    autoscaler_.reset();
    prometheus_.reset();
    nodes_.clear();
    server_.reset();
    if (own_work_dir_ && !work_dir_.empty()) {
      std::error_code ec;
      fs::remove_all(work_dir_, ec);
    }
  }
  absl::StatusOr<AutoscalerBenchResult> Run();

 private:
  void Say(const std::string& line) {
    if (progress_ != nullptr) (*progress_) << line << std::endl;
  }
  absl::Status Prepare();
  absl::Status StartServer();
  absl::Status StartNodes();
  absl::Status CreateObjects();
  absl::Status StartPrometheus();
  absl::StatusOr<int> CountDecided();

  const AutoscalerBenchOptions o_;
  std::ostream* progress_;
  std::string source_dir_, binary_, work_dir_, kubeconfig_, prometheus_url_;
  bool own_work_dir_ = false;
  std::unique_ptr<ChildProcess> server_;
  std::vector<std::unique_ptr<ChildProcess>> nodes_;
  std::unique_ptr<ChildProcess> prometheus_;
  std::unique_ptr<ChildProcess> autoscaler_;
  std::unique_ptr<kube::Client> client_;
};

absl::Status BenchRun::Prepare() {
  binary_ = ResolveBinary(o_);
  if (binary_.empty()) {
    return absl::NotFoundError("sluice-autoscaler not found next to this binary, in $SLUICE_BINARY_DIR/bin or the "
                               "build tree; build it or pass --autoscaler");
  }
  source_dir_ = !o_.source_dir.empty() ? o_.source_dir
                : std::getenv("SLUICE_SOURCE_DIR") != nullptr ? std::string(std::getenv("SLUICE_SOURCE_DIR"))
                                                             : std::string(SLUICE_BENCH_SOURCE_DIR);
  if (source_dir_.empty() || !fs::exists(fs::path(source_dir_) / "e2e" / "apiserver" / "__main__.py") ||
      !fs::exists(fs::path(source_dir_) / "bench" / "autoscaler" / "fake_prometheus.py")) {
    return absl::NotFoundError(absl::StrCat("the repository (with e2e/apiserver and bench/autoscaler) was not found at '",
                                            source_dir_, "'; pass --source-dir or set $SLUICE_SOURCE_DIR"));
  }
  if (o_.work_dir.empty()) {
    std::string pattern = (fs::temp_directory_path() / "sluice-bench-autoscaler-XXXXXX").string();
    if (mkdtemp(pattern.data()) == nullptr) return absl::InternalError("cannot create a temporary directory");
    work_dir_ = pattern;
    own_work_dir_ = true;
  } else {
    work_dir_ = o_.work_dir;
    std::error_code ec;
    fs::create_directories(work_dir_, ec);
    if (ec) return absl::InvalidArgumentError(absl::StrCat("--work-dir ", work_dir_, ": ", ec.message()));
  }
  return absl::OkStatus();
}

absl::Status BenchRun::StartServer() {
  std::string port_file = work_dir_ + "/apiserver.port";
  auto server = ChildProcess::Start({o_.python, "-m", "e2e.apiserver", "--port", "0", "--port-file", port_file},
                                    source_dir_, work_dir_ + "/apiserver.log",
                                    {"PYTHONPATH=" + source_dir_, "PYTHONDONTWRITEBYTECODE=1"});
  if (!server.ok()) return server.status();
  server_ = *std::move(server);
  int port = 0;
  bool up = WaitFor([&] {
    return absl::SimpleAtoi(absl::StripAsciiWhitespace(ReadFile(port_file)), &port) && port > 0;
  }, absl::Seconds(30));
  if (!up || !server_->Alive()) return absl::UnavailableError(absl::StrCat("the test API server did not start:\n", server_->LogTail()));
  const std::string url = absl::StrCat("http://127.0.0.1:", port);
  kubeconfig_ = work_dir_ + "/kubeconfig";
  std::ofstream(kubeconfig_) << "apiVersion: v1\nkind: Config\ncurrent-context: bench\n"
                             << "clusters: [{name: bench, cluster: {server: \"" << url << "\"}}]\n"
                             << "users: [{name: bench, user: {}}]\n"
                             << "contexts: [{name: bench, context: {cluster: bench, user: bench, namespace: "
                             << kNamespace << "}}]\n";
  kube::Config config;
  config.server = url;
  kube::ClientOptions copts;
  copts.qps = 0;
  copts.user_agent = "sluice-bench/0.1";
  auto client = kube::Client::Create(config, copts);
  if (!client.ok()) return client.status();
  client_ = *std::move(client);
  return absl::OkStatus();
}

absl::Status BenchRun::StartNodes() {
  const int64_t pods = static_cast<int64_t>(o_.dataservices) * (o_.workers + 1);
  for (int i = 0; i < o_.nodes; ++i) {
    std::string name = absl::StrCat("sim-", i);
    std::string dir = absl::StrCat(work_dir_, "/", name);
    fs::create_directories(dir);
    std::string ip_base = absl::StrCat("127.", 250 + i / 4, ".", 64 * (i % 4), ".2");
    auto node = ChildProcess::Start(
        {o_.python, "-m", "e2e.processnode", "--kubeconfig", kubeconfig_, "--node-name", name, "--cpu", "100000",
         "--memory", "100000Gi", "--pods", absl::StrCat(pods / o_.nodes + 64), "--simulated", "--schedule", "--ip-base",
         ip_base, "--log-dir", dir + "/logs", "--work-dir", dir + "/work"},
        source_dir_, dir + "/processnode.log", {"PYTHONPATH=" + source_dir_, "PYTHONDONTWRITEBYTECODE=1"});
    if (!node.ok()) return node.status();
    nodes_.push_back(*std::move(node));
  }
  for (int i = 0; i < o_.nodes; ++i) {
    std::string name = absl::StrCat("sim-", i);
    bool ready = WaitFor([&] {
      if (!nodes_[i]->Alive()) return true;
      auto node = client_->Get(kube::resources::Nodes(), "", name);
      if (!node.ok() || !(*node).contains("status")) return false;
      for (const json& c : (*node)["status"].value("conditions", json::array())) {
        if (c.value("type", "") == "Ready" && c.value("status", "") == "True") return true;
      }
      return false;
    }, absl::Seconds(60));
    if (!ready || !nodes_[i]->Alive()) {
      return absl::UnavailableError(absl::StrCat("process node ", name, " did not become Ready:\n", nodes_[i]->LogTail()));
    }
  }
  return absl::OkStatus();
}

absl::Status BenchRun::CreateObjects() {
  std::string crd_path = source_dir_ + "/crds/dataservices.sluice.dev.yaml";
  auto applied = client_->Send(
      "PATCH", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/dataservices.sluice.dev?fieldManager=bench",
      ReadFile(crd_path), "application/apply-patch+yaml");
  if (!applied.ok()) return applied.status();
  if (applied->status >= 300) return absl::InternalError(absl::StrCat("installing ", crd_path, ": HTTP ", applied->status));
  kube::ResourceRef ds{"sluice.dev", "v1alpha1", "dataservices", true};
  if (!WaitFor([&] { return client_->List(ds, kNamespace).ok(); }, absl::Seconds(30))) {
    return absl::DeadlineExceededError("the DataService CRD was not served within 30 s");
  }
  json ns = {{"apiVersion", "v1"}, {"kind", "Namespace"}, {"metadata", {{"name", kNamespace}}}};
  if (auto made = client_->Create(kube::resources::Namespaces(), "", ns); !made.ok() && !absl::IsAlreadyExists(made.status())) {
    return made.status();
  }
  absl::Time next = absl::Now();
  for (int i = 0; i < o_.dataservices; ++i) {
    if (auto made = client_->Create(ds, kNamespace, DataServiceManifest(i, o_.workers)); !made.ok()) return made.status();
    if (auto made = client_->Create(kube::resources::Pods(), kNamespace, PodManifest(i, "dispatcher", 0)); !made.ok()) {
      return made.status();
    }
    for (int w = 0; w < o_.workers; ++w) {
      if (auto made = client_->Create(kube::resources::Pods(), kNamespace, PodManifest(i, "worker", w)); !made.ok()) {
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
  bool all = WaitFor([&] {
    auto list = client_->ListAll(kube::resources::Pods(), kNamespace);
    if (!list.ok()) return false;
    ready = 0;
    for (const json& p : (*list)["items"]) ready += PodReady(p);
    return ready == pods;
  }, absl::Seconds(o_.timeout_seconds), absl::Seconds(2));
  if (!all) return absl::DeadlineExceededError(absl::StrCat("only ", ready, " of ", pods, " pods became Ready"));
  Say(absl::StrFormat("%d pods Ready on %d simulated nodes", pods, o_.nodes));
  return absl::OkStatus();
}

absl::Status BenchRun::StartPrometheus() {
  std::string port_file = work_dir_ + "/prometheus.port";
  auto p = ChildProcess::Start({o_.python, source_dir_ + "/bench/autoscaler/fake_prometheus.py", "--port-file", port_file,
                                "--dataservices", absl::StrCat(o_.dataservices), "--namespace", kNamespace, "--workers",
                                absl::StrCat(o_.workers)},
                               source_dir_, work_dir_ + "/prometheus.log", {"PYTHONDONTWRITEBYTECODE=1"});
  if (!p.ok()) return p.status();
  prometheus_ = *std::move(p);
  int port = 0;
  bool up = WaitFor([&] {
    return absl::SimpleAtoi(absl::StripAsciiWhitespace(ReadFile(port_file)), &port) && port > 0;
  }, absl::Seconds(30));
  if (!up || !prometheus_->Alive()) return absl::UnavailableError(absl::StrCat("the fake Prometheus did not start:\n", prometheus_->LogTail()));
  prometheus_url_ = absl::StrCat("http://127.0.0.1:", port);
  return absl::OkStatus();
}

absl::StatusOr<int> BenchRun::CountDecided() {
  kube::ResourceRef ds{"sluice.dev", "v1alpha1", "dataservices", true};
  auto list = client_->ListAll(ds, kNamespace);
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
  Say(absl::StrCat("autoscaler benchmark: ", o_.dataservices, " autoscaled DataServices x ", o_.workers,
                   " workers, period ", o_.period_seconds, " s (work dir ", work_dir_, ")"));
  if (absl::Status s = StartServer(); !s.ok()) return s;
  if (absl::Status s = StartNodes(); !s.ok()) return s;
  if (absl::Status s = CreateObjects(); !s.ok()) return s;
  if (absl::Status s = StartPrometheus(); !s.ok()) return s;

  // The autoscaler with its default client settings and sources; Prometheus for every DataService.
  const std::string period = absl::StrCat(o_.period_seconds, "s");
  const std::string window = absl::StrCat(std::max(60.0, o_.period_seconds), "s");
  const std::string max_age = absl::StrCat(std::max(120.0, 4 * o_.period_seconds), "s");
  auto started = ChildProcess::Start({binary_, "--kubeconfig", kubeconfig_, "--metrics-address", "127.0.0.1:0",
                                      "--health-address", "off", "--period", period, "--window", window,
                                      "--max-signal-age", max_age, "--prometheus-url", prometheus_url_, "--keda", "off",
                                      "--log-level", "warning"},
                                     "", work_dir_ + "/autoscaler.log");
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
                        o_.dataservices, static_cast<double>(ProcStatusKib(ReadFile(proc + "/status"), "VmRSS")) / 1024));
    absl::SleepFor(absl::Seconds(3));
  }
  result.seconds_to_all_decided = absl::ToDoubleSeconds(absl::Now() - t0);
  Say(absl::StrFormat("all %d decided after %.1f s; measuring %d periods", o_.dataservices,
                      result.seconds_to_all_decided, o_.windows));

  // Steady state: CPU per wall second over each period, RSS at its end; the API requests over all of them.
  if (auto reset = client_->RequestJson("POST", "/_admin/stats/reset"); !reset.ok()) return reset.status();
  const double tick = static_cast<double>(sysconf(_SC_CLK_TCK));
  result.load_before = LoadAverage();
  for (int w = 0; w < o_.windows; ++w) {
    const int64_t c0 = ProcStatCpuTicks(ReadFile(proc + "/stat"));
    const absl::Time w0 = absl::Now();
    absl::SleepFor(absl::Seconds(o_.period_seconds));
    if (!autoscaler_->Alive()) return absl::InternalError(absl::StrCat("sluice-autoscaler exited:\n", autoscaler_->LogTail()));
    const int64_t c1 = ProcStatCpuTicks(ReadFile(proc + "/stat"));
    const double wall = absl::ToDoubleSeconds(absl::Now() - w0);
    if (c0 < 0 || c1 < 0) return absl::InternalError("cannot read the autoscaler's /proc/<pid>/stat");
    result.cpu_core_fraction.push_back(static_cast<double>(c1 - c0) / tick / wall);
    result.rss_mib.push_back(static_cast<double>(ProcStatusKib(ReadFile(proc + "/status"), "VmRSS")) / 1024);
    Say(absl::StrFormat("period %d/%d: cpu %.2f%% of a core, rss %.1f MiB", w + 1, o_.windows,
                        100 * result.cpu_core_fraction.back(), result.rss_mib.back()));
  }
  result.load_after = LoadAverage();
  result.peak_rss_mib = static_cast<double>(ProcStatusKib(ReadFile(proc + "/status"), "VmHWM")) / 1024;
  auto stats = client_->RequestJson("GET", "/_admin/stats");
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
  result.machine = MachineName();
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
