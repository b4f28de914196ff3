#include "bench/operator/operator_bench.h"

#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <memory>
#include <sstream>
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
#include "kube/client.h"
#include "kube/config.h"
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
namespace fs = std::filesystem;

constexpr char kNamespace[] = "bench";
constexpr char kOperatorAgent[] = "sluice-operator";

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Polls `done` until it returns true or `timeout` passes (a deadline, not a timing assumption).
bool WaitFor(const std::function<bool()>& done, absl::Duration timeout, absl::Duration interval = absl::Milliseconds(50)) {
  absl::Time deadline = absl::Now() + timeout;
  while (!done()) {
    if (absl::Now() >= deadline) return false;
    absl::SleepFor(interval);
  }
  return true;
}

// A child process in its own process group with its output in a log file. The kernel kills it if
// this process dies (PR_SET_PDEATHSIG); Stop()/the destructor end the whole group.
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
    child->name_ = argv[0];
    child->log_ = log_path;
    return child;
  }
  ~ChildProcess() { Stop(absl::Seconds(5)); }

  pid_t pid() const { return pid_; }
  const std::string& log_path() const { return log_; }
  bool Alive() {
    if (pid_ <= 0) return false;
    int status = 0;
    pid_t r = waitpid(pid_, &status, WNOHANG);
    if (r == pid_) {
      pid_ = -1;
      return false;
    }
    return true;
  }
  // SIGTERM to the group, SIGKILL after `grace`; reaps the child.
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
  std::string name_;
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

std::string FirstExisting(const std::vector<std::string>& candidates) {
  for (const std::string& c : candidates) {
    if (!c.empty() && access(c.c_str(), X_OK) == 0) return c;
  }
  return "";
}

std::string ResolveOperatorBinary(const OperatorBenchOptions& o) {
  if (!o.operator_binary.empty()) return o.operator_binary;
  std::vector<std::string> candidates;
  std::error_code ec;
  fs::path self = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) candidates.push_back((self.parent_path() / "sluice-operator").string());
  if (const char* dir = std::getenv("SLUICE_BINARY_DIR")) candidates.push_back(absl::StrCat(dir, "/bin/sluice-operator"));
  candidates.push_back(SLUICE_BENCH_OPERATOR_BINARY);
  return FirstExisting(candidates);
}

std::string ResolveSourceDir(const OperatorBenchOptions& o) {
  if (!o.source_dir.empty()) return o.source_dir;
  if (const char* dir = std::getenv("SLUICE_SOURCE_DIR")) return dir;
  return SLUICE_BENCH_SOURCE_DIR;
}

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

bool IsReady(const json& ds) {
  const json* status = ds.contains("status") ? &ds["status"] : nullptr;
  if (status == nullptr || !status->is_object() || !status->contains("conditions")) return false;
  for (const json& c : (*status)["conditions"]) {
    if (c.is_object() && c.value("type", "") == "Ready") return c.value("status", "") == "True";
  }
  return false;
}

// The whole run; every child is stopped when this object goes.
class BenchRun {
 public:
  BenchRun(const OperatorBenchOptions& options, std::ostream* progress) : o_(options), progress_(progress) {}
  ~BenchRun() {
    operator_.reset();
    nodes_.clear();
    server_.reset();
    if (own_work_dir_ && !work_dir_.empty()) {
      std::error_code ec;
      fs::remove_all(work_dir_, ec);
    }
  }

  absl::StatusOr<OperatorBenchResult> Run();

 private:
  void Say(const std::string& line) {
    if (progress_ != nullptr) (*progress_) << line << std::endl;
  }
  absl::Status Prepare();
  absl::Status StartServer();
  absl::Status StartNodes();
  absl::Status CreateDataServices();
  absl::StatusOr<std::unique_ptr<ChildProcess>> StartOperator();

  const OperatorBenchOptions o_;
  std::ostream* progress_;
  std::string source_dir_, operator_binary_, work_dir_, kubeconfig_, url_;
  bool own_work_dir_ = false;
  std::unique_ptr<ChildProcess> server_;
  std::vector<std::unique_ptr<ChildProcess>> nodes_;
  std::unique_ptr<ChildProcess> operator_;
  std::unique_ptr<kube::Client> client_;
};

absl::Status BenchRun::Prepare() {
  if (o_.dataservices < 1) return absl::InvalidArgumentError("--dataservices must be at least 1");
  if (o_.workers < 1 || o_.workers > 256) return absl::InvalidArgumentError("--workers must be in [1, 256]");
  if (o_.nodes < 1 || o_.nodes > 20) return absl::InvalidArgumentError("--nodes must be in [1, 20]");
  operator_binary_ = ResolveOperatorBinary(o_);
  if (operator_binary_.empty()) {
    return absl::NotFoundError("sluice-operator not found next to this binary, in $SLUICE_BINARY_DIR/bin or the build "
                               "tree; build it or pass --operator");
  }
  source_dir_ = ResolveSourceDir(o_);
  if (source_dir_.empty() || !fs::exists(fs::path(source_dir_) / "e2e" / "apiserver" / "__main__.py")) {
    return absl::NotFoundError(absl::StrCat("the repository (with e2e/apiserver) was not found at '", source_dir_,
                                            "'; pass --source-dir or set $SLUICE_SOURCE_DIR"));
  }
  if (o_.work_dir.empty()) {
    std::string pattern = (fs::temp_directory_path() / "sluice-bench-operator-XXXXXX").string();
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
    std::string text = ReadFile(port_file);
    return absl::SimpleAtoi(absl::StripAsciiWhitespace(text), &port) && port > 0;
  }, absl::Seconds(30));
  if (!up || !server_->Alive()) {
    return absl::UnavailableError(absl::StrCat("the test API server did not start:\n", server_->LogTail()));
  }
  url_ = absl::StrCat("http://127.0.0.1:", port);
  kubeconfig_ = work_dir_ + "/kubeconfig";
  std::ofstream(kubeconfig_) << "apiVersion: v1\nkind: Config\ncurrent-context: bench\n"
                             << "clusters: [{name: bench, cluster: {server: \"" << url_ << "\"}}]\n"
                             << "users: [{name: bench, user: {}}]\n"
                             << "contexts: [{name: bench, context: {cluster: bench, user: bench, namespace: "
                             << kNamespace << "}}]\n";
  kube::Config config;
  config.server = url_;
  kube::ClientOptions copts;
  copts.qps = 0;
  copts.user_agent = "sluice-bench/0.1";
  auto client = kube::Client::Create(config, copts);
  if (!client.ok()) return client.status();
  client_ = *std::move(client);
  return absl::OkStatus();
}

absl::Status BenchRun::StartNodes() {
  int64_t pods = static_cast<int64_t>(o_.dataservices) * (o_.workers + 1);
  int64_t per_node = pods / o_.nodes + 64;
  for (int i = 0; i < o_.nodes; ++i) {
    std::string name = absl::StrCat("sim-", i);
    std::string dir = absl::StrCat(work_dir_, "/", name);
    fs::create_directories(dir);
    // Simulated pods bind nothing; distinct address ranges keep the reported pod IPs unique.
    std::string ip_base = absl::StrCat("127.", 250 + i / 4, ".", 64 * (i % 4), ".2");
    auto node = ChildProcess::Start(
        {o_.python, "-m", "e2e.processnode", "--kubeconfig", kubeconfig_, "--node-name", name, "--cpu", "100000",
         "--memory", "100000Gi", "--pods", absl::StrCat(per_node), "--simulated", "--schedule", "--ip-base", ip_base,
         "--log-dir", dir + "/logs", "--work-dir", dir + "/work"},
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

absl::Status BenchRun::CreateDataServices() {
  std::string crd_path = source_dir_ + "/crds/dataservices.sluice.dev.yaml";
  // The CRD is YAML; the API server takes it as an apply body (YAML is JSON's superset there).
  absl::StatusOr<kube::HttpResponse> applied = client_->Send(
      "PATCH", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/dataservices.sluice.dev?fieldManager=bench",
      ReadFile(crd_path), "application/apply-patch+yaml");
  if (!applied.ok()) return applied.status();
  if (applied->status >= 300) {
    return absl::InternalError(absl::StrCat("installing ", crd_path, ": HTTP ", applied->status, " ", applied->body));
  }
  bool established = WaitFor([&] {
    auto crd = client_->Get(kube::resources::CustomResourceDefinitions(), "", "dataservices.sluice.dev");
    if (!crd.ok()) return false;
    for (const json& c : (*crd)["status"].value("conditions", json::array())) {
      if (c.value("type", "") == "Established" && c.value("status", "") == "True") return true;
    }
    return false;
  }, absl::Seconds(30));
  if (!established) return absl::DeadlineExceededError("the DataService CRD was not Established within 30 s");
  json ns = {{"apiVersion", "v1"}, {"kind", "Namespace"}, {"metadata", {{"name", kNamespace}}}};
  if (auto made = client_->Create(kube::resources::Namespaces(), "", ns); !made.ok() && !absl::IsAlreadyExists(made.status())) {
    return made.status();
  }
  kube::ResourceRef ds{"sluice.dev", "v1alpha1", "dataservices", true};
  for (int i = 0; i < o_.dataservices; ++i) {
    auto made = client_->Create(ds, kNamespace, DataServiceManifest(i, o_.workers));
    if (!made.ok()) return made.status();
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<ChildProcess>> BenchRun::StartOperator() {
  return ChildProcess::Start({operator_binary_, "--kubeconfig", kubeconfig_, "--metrics-address", "127.0.0.1:0",
                              "--health-address", "off", "--concurrency", absl::StrCat(o_.concurrency), "--kube-qps",
                              absl::StrCat(o_.kube_qps), "--kube-burst", "1000", "--log-level", "warning"},
                             "", work_dir_ + "/operator.log");
}

absl::StatusOr<OperatorBenchResult> BenchRun::Run() {
  if (absl::Status s = Prepare(); !s.ok()) return s;
  Say(absl::StrCat("operator benchmark: ", o_.dataservices, " DataServices x ", o_.workers, " workers on ", o_.nodes,
                   " simulated nodes (work dir ", work_dir_, ")"));
  if (absl::Status s = StartServer(); !s.ok()) return s;
  if (absl::Status s = StartNodes(); !s.ok()) return s;
  absl::Time created_start = absl::Now();
  if (absl::Status s = CreateDataServices(); !s.ok()) return s;
  Say(absl::StrFormat("created %d DataServices in %.1f s; starting %s", o_.dataservices,
                      absl::ToDoubleSeconds(absl::Now() - created_start), operator_binary_));
  if (auto reset = client_->RequestJson("POST", "/_admin/stats/reset"); !reset.ok()) return reset.status();

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
    hwm_kib = std::max(hwm_kib, ProcStatusKib(ReadFile(proc + "/status"), "VmHWM"));
    cpu_ticks = std::max(cpu_ticks, ProcStatCpuTicks(ReadFile(proc + "/stat")));
    auto list = client_->ListAll(ds_ref, kNamespace);
    if (list.ok()) {
      ready = 0;
      for (const json& item : (*list)["items"]) ready += IsReady(item);
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
  hwm_kib = std::max(hwm_kib, ProcStatusKib(ReadFile(proc + "/status"), "VmHWM"));
  cpu_ticks = std::max(cpu_ticks, ProcStatCpuTicks(ReadFile(proc + "/stat")));
  auto stats = client_->RequestJson("GET", "/_admin/stats");
  if (!stats.ok()) return stats.status();
  if (absl::Status s = FillRequestCounts(stats->dump(), kOperatorAgent, &result); !s.ok()) return s;
  operator_->Stop(absl::Seconds(10));

  result.dataservices = o_.dataservices;
  result.workers = o_.workers;
  result.nodes = o_.nodes;
  result.peak_rss_mib = static_cast<double>(hwm_kib) / 1024.0;
  result.cpu_seconds = static_cast<double>(cpu_ticks) / static_cast<double>(sysconf(_SC_CLK_TCK));
  result.machine = MachineName();
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
