#include "bench/kubecluster/bench_cluster.h"

#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "bench/common/bench_util.h"
#include "kube/config.h"
#include "kube/resource.h"
#include "nlohmann/json.hpp"

namespace sluice::bench {
namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

// Waits until `port_file` holds a port (the Python servers write it once they listen).
absl::StatusOr<int> WaitForPortFile(const std::string& port_file, BenchChild& child, const std::string& what) {
  int port = 0;
  bool up = WaitUntil(
      [&] { return absl::SimpleAtoi(absl::StripAsciiWhitespace(ReadTextFile(port_file)), &port) && port > 0; },
      absl::Seconds(30));
  if (!up || !child.Alive()) return absl::UnavailableError(absl::StrCat(what, " did not start:\n", child.LogTail()));
  return port;
}

}  // namespace

bool HasTrueCondition(const json& object, const std::string& type) {
  if (!object.contains("status") || !object["status"].is_object()) return false;
  const json conditions = object["status"].value("conditions", json::array());
  if (!conditions.is_array()) return false;
  for (const json& c : conditions) {
    if (c.is_object() && c.value("type", "") == type) return c.value("status", "") == "True";
  }
  return false;
}

double LoadAverage1() {
  double load = -1;
  std::istringstream in(ReadTextFile("/proc/loadavg"));
  if (!(in >> load)) return -1;
  return load;
}

BenchClusterOptions ControllerBenchClusterOptions(const std::string& benchmark, const std::string& ns, int nodes,
                                                  int dataservices, int pods_per_dataservice) {
  BenchClusterOptions options;
  options.temp_prefix = absl::StrCat("sluice-bench-", benchmark);
  options.nodes = nodes;
  options.pods = static_cast<int64_t>(dataservices) * pods_per_dataservice;
  options.kubeconfig_namespace = ns;
  return options;
}

std::string FindSluiceBinary(const std::string& explicit_path, const std::string& name, const std::string& built_path) {
  if (!explicit_path.empty()) return explicit_path;
  std::vector<std::string> candidates;
  std::error_code ec;
  fs::path self = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) candidates.push_back((self.parent_path() / name).string());
  if (const char* dir = std::getenv("SLUICE_BINARY_DIR")) candidates.push_back(absl::StrCat(dir, "/bin/", name));
  candidates.push_back(built_path);
  for (const std::string& c : candidates) {
    if (!c.empty() && access(c.c_str(), X_OK) == 0) return c;
  }
  return "";
}

std::string FindSourceDir(const std::string& explicit_dir, const std::string& built_dir) {
  if (!explicit_dir.empty()) return explicit_dir;
  if (const char* dir = std::getenv("SLUICE_SOURCE_DIR"); dir != nullptr && *dir != '\0') return dir;
  return built_dir;
}

// ------------------------------------------------------------------------------- BenchChild

absl::StatusOr<std::unique_ptr<BenchChild>> BenchChild::Start(const std::vector<std::string>& argv,
                                                               const std::string& cwd, const std::string& log_path,
                                                               const std::vector<std::string>& env) {
  if (argv.empty()) return absl::InvalidArgumentError("BenchChild::Start: no program");
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  const pid_t parent = getpid();
  const pid_t pid = fork();
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
  auto child = std::unique_ptr<BenchChild>(new BenchChild());
  child->pid_ = pid;
  child->log_ = log_path;
  return child;
}

bool BenchChild::Alive() {
  if (pid_ <= 0) return false;
  int status = 0;
  if (waitpid(pid_, &status, WNOHANG) == pid_) {
    pid_ = -1;
    return false;
  }
  return true;
}

void BenchChild::Stop(absl::Duration grace) {
  if (pid_ <= 0) return;
  const pid_t pid = pid_;
  kill(-pid, SIGTERM);
  WaitUntil([&] { return !Alive(); }, grace);
  kill(-pid, SIGKILL);
  if (pid_ > 0) {
    waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }
}

std::string BenchChild::LogTail(size_t bytes) const {
  std::string text = ReadTextFile(log_);
  return text.size() > bytes ? text.substr(text.size() - bytes) : text;
}

// ------------------------------------------------------------------------------- BenchCluster

absl::StatusOr<std::unique_ptr<BenchCluster>> BenchCluster::Start(const BenchClusterOptions& options) {
  if (options.nodes < 1) return absl::InvalidArgumentError(absl::StrCat("nodes must be >= 1, got ", options.nodes));
  if (options.source_dir.empty() || !fs::exists(fs::path(options.source_dir) / "e2e" / "apiserver" / "__main__.py")) {
    return absl::NotFoundError(absl::StrCat("the repository (with e2e/apiserver) was not found at '",
                                            options.source_dir, "'; pass --source-dir or set $SLUICE_SOURCE_DIR"));
  }
  auto cluster = std::unique_ptr<BenchCluster>(new BenchCluster(options));
  if (absl::Status s = cluster->MakeWorkDir(); !s.ok()) return s;
  if (absl::Status s = cluster->StartServer(); !s.ok()) return s;
  if (absl::Status s = cluster->StartNodes(); !s.ok()) return s;
  return cluster;
}

BenchCluster::~BenchCluster() {
  nodes_.clear();
  server_.reset();
  if (own_work_dir_ && !work_dir_.empty()) {
    std::error_code ec;
    fs::remove_all(work_dir_, ec);
  }
}

absl::Status BenchCluster::MakeWorkDir() {
  if (o_.work_dir.empty()) {
    std::string pattern = (fs::temp_directory_path() / (o_.temp_prefix + "-XXXXXX")).string();
    if (mkdtemp(pattern.data()) == nullptr) return absl::InternalError("cannot create a temporary directory");
    work_dir_ = pattern;
    own_work_dir_ = true;
    return absl::OkStatus();
  }
  work_dir_ = o_.work_dir;
  std::error_code ec;
  fs::create_directories(work_dir_, ec);
  if (ec) return absl::InvalidArgumentError(absl::StrCat("--work-dir ", work_dir_, ": ", ec.message()));
  return absl::OkStatus();
}

absl::Status BenchCluster::StartServer() {
  const std::string port_file = work_dir_ + "/apiserver.port";
  auto server = BenchChild::Start({o_.python, "-m", "e2e.apiserver", "--port", "0", "--port-file", port_file},
                                  o_.source_dir, work_dir_ + "/apiserver.log",
                                  {"PYTHONPATH=" + o_.source_dir, "PYTHONDONTWRITEBYTECODE=1"});
  if (!server.ok()) return server.status();
  server_ = *std::move(server);
  absl::StatusOr<int> port = WaitForPortFile(port_file, *server_, "the test API server");
  if (!port.ok()) return port.status();
  url_ = absl::StrCat("http://127.0.0.1:", *port);
  kubeconfig_ = work_dir_ + "/kubeconfig";
  std::ofstream(kubeconfig_) << "apiVersion: v1\nkind: Config\ncurrent-context: bench\n"
                             << "clusters: [{name: bench, cluster: {server: \"" << url_ << "\"}}]\n"
                             << "users: [{name: bench, user: {}}]\n"
                             << "contexts: [{name: bench, context: {cluster: bench, user: bench, namespace: "
                             << o_.kubeconfig_namespace << "}}]\n";
  kube::Config config;
  config.server = url_;
  kube::ClientOptions client_options;
  client_options.qps = 0;
  client_options.user_agent = "sluice-bench/0.1";
  auto client = kube::Client::Create(config, client_options);
  if (!client.ok()) return client.status();
  client_ = *std::move(client);
  return absl::OkStatus();
}

absl::Status BenchCluster::StartNodes() {
  const int64_t per_node = o_.pods / o_.nodes + 64;
  for (int i = 0; i < o_.nodes; ++i) {
    const std::string name = absl::StrCat("sim-", i);
    const std::string dir = absl::StrCat(work_dir_, "/", name);
    fs::create_directories(dir);
    // Simulated pods bind nothing; distinct address ranges keep the reported pod IPs unique.
    const std::string ip_base = absl::StrCat("127.", 250 + i / 4, ".", 64 * (i % 4), ".2");
    auto node = BenchChild::Start(
        {o_.python, "-m", "e2e.processnode", "--kubeconfig", kubeconfig_, "--node-name", name, "--cpu", "100000",
         "--memory", "100000Gi", "--pods", absl::StrCat(per_node), "--simulated", "--schedule", "--ip-base", ip_base,
         "--log-dir", dir + "/logs", "--work-dir", dir + "/work"},
        o_.source_dir, dir + "/processnode.log", {"PYTHONPATH=" + o_.source_dir, "PYTHONDONTWRITEBYTECODE=1"});
    if (!node.ok()) return node.status();
    nodes_.push_back(*std::move(node));
  }
  for (int i = 0; i < o_.nodes; ++i) {
    const std::string name = absl::StrCat("sim-", i);
    BenchChild& node = *nodes_[static_cast<size_t>(i)];
    bool ready = WaitUntil(
        [&] {
          if (!node.Alive()) return true;
          auto got = client_->Get(kube::resources::Nodes(), "", name);
          return got.ok() && HasTrueCondition(*got, "Ready");
        },
        absl::Seconds(60));
    if (!ready || !node.Alive()) {
      return absl::UnavailableError(absl::StrCat("process node ", name, " did not become Ready:\n", node.LogTail()));
    }
  }
  return absl::OkStatus();
}

absl::Status BenchCluster::InstallDataServiceCrd(const std::string& ns) {
  const std::string crd_path = o_.source_dir + "/crds/dataservices.sluice.dev.yaml";
  // The CRD is YAML; the API server takes it as an apply body (YAML is JSON's superset there).
  absl::StatusOr<kube::HttpResponse> applied = client_->Send(
      "PATCH", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/dataservices.sluice.dev?fieldManager=bench",
      ReadTextFile(crd_path), "application/apply-patch+yaml");
  if (!applied.ok()) return applied.status();
  if (applied->status >= 300) {
    return absl::InternalError(absl::StrCat("installing ", crd_path, ": HTTP ", applied->status, " ", applied->body));
  }
  bool established = WaitUntil(
      [&] {
        auto crd = client_->Get(kube::resources::CustomResourceDefinitions(), "", "dataservices.sluice.dev");
        return crd.ok() && HasTrueCondition(*crd, "Established");
      },
      absl::Seconds(30));
  if (!established) return absl::DeadlineExceededError("the DataService CRD was not Established within 30 s");
  json namespace_object = {{"apiVersion", "v1"}, {"kind", "Namespace"}, {"metadata", {{"name", ns}}}};
  if (auto made = client_->Create(kube::resources::Namespaces(), "", namespace_object);
      !made.ok() && !absl::IsAlreadyExists(made.status())) {
    return made.status();
  }
  return absl::OkStatus();
}

}  // namespace sluice::bench
