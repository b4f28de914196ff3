// The Kubernetes side of the controller benchmarks (`sluice bench operator`, `sluice bench
// autoscaler`): the project's test API server (e2e/apiserver) and simulated process nodes
// (e2e/processnode --simulated --schedule: pods are bound and reported Running and Ready without
// running anything, like kwok) in a work directory, a kube::Client to it, and the small process
// and file helpers both benchmarks use (the general ones are in bench/common/bench_util.h).
//
// Threading: none of these classes is thread-safe; a benchmark drives them from one thread. Child
// processes die with the process that started them (PR_SET_PDEATHSIG).
#ifndef SLUICE_BENCH_KUBECLUSTER_BENCH_CLUSTER_H_
#define SLUICE_BENCH_KUBECLUSTER_BENCH_CLUSTER_H_

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "kube/client.h"
#include "nlohmann/json.hpp"

namespace sluice::bench {

// Whether a Kubernetes object's status.conditions has `type` with status "True".
bool HasTrueCondition(const nlohmann::json& object, const std::string& type);
// The 1-minute load average (-1 when unreadable).
double LoadAverage1();

// The program to benchmark: `explicit_path` when given, else the first executable of
// <this binary's directory>/<name>, $SLUICE_BINARY_DIR/bin/<name> and `built_path` (the build
// tree's, compiled in). "" when none exists.
std::string FindSluiceBinary(const std::string& explicit_path, const std::string& name, const std::string& built_path);
// The repository: `explicit_dir`, else $SLUICE_SOURCE_DIR, else `built_dir` (compiled in).
std::string FindSourceDir(const std::string& explicit_dir, const std::string& built_dir);

// A child process in its own process group with its output appended to a log file. The kernel
// kills it if this process dies; Stop() and the destructor end the whole group.
class BenchChild {
 public:
  // argv[0] is looked up in PATH; `env` entries (KEY=VALUE) are added to the inherited environment.
  static absl::StatusOr<std::unique_ptr<BenchChild>> Start(const std::vector<std::string>& argv,
                                                           const std::string& cwd, const std::string& log_path,
                                                           const std::vector<std::string>& env = {});
  ~BenchChild() { Stop(absl::Seconds(5)); }
  BenchChild(const BenchChild&) = delete;
  BenchChild& operator=(const BenchChild&) = delete;

  pid_t pid() const { return pid_; }
  const std::string& log_path() const { return log_; }
  // False once it exited (and reaps it then).
  bool Alive();
  // SIGTERM to the group, SIGKILL after `grace`; reaps the child.
  void Stop(absl::Duration grace);
  // The last `bytes` of its log.
  std::string LogTail(size_t bytes = 2000) const;

 private:
  BenchChild() = default;
  pid_t pid_ = -1;
  std::string log_;
};

struct BenchClusterOptions {
  std::string python = "/usr/bin/python3";
  std::string source_dir;        // the repository (e2e/apiserver, e2e/processnode, crds/)
  std::string work_dir;          // empty: a new directory under the system's temporary one, removed with the cluster
  std::string temp_prefix = "sluice-bench";  // that directory's name prefix
  int nodes = 4;
  int64_t pods = 0;              // pods the nodes must hold together (each gets an equal share plus 64)
  std::string kubeconfig_namespace = "bench";  // the kubeconfig context's namespace
};

// The cluster a controller benchmark (`benchmark`: "operator", "autoscaler") runs against: `nodes`
// simulated nodes with room for `dataservices` DataServices of `pods_per_dataservice` pods each (a
// dispatcher and its workers), a temporary directory named sluice-bench-<benchmark>-XXXXXX, and
// `ns` as the kubeconfig's namespace. python, source_dir and work_dir keep their defaults: the
// caller sets them from its own flags.
BenchClusterOptions ControllerBenchClusterOptions(const std::string& benchmark, const std::string& ns, int nodes,
                                                  int dataservices, int pods_per_dataservice);

// The test API server and `nodes` simulated nodes, Ready. Stops them (and removes a work directory
// it made) when destroyed.
class BenchCluster {
 public:
  static absl::StatusOr<std::unique_ptr<BenchCluster>> Start(const BenchClusterOptions& options);
  ~BenchCluster();
  BenchCluster(const BenchCluster&) = delete;
  BenchCluster& operator=(const BenchCluster&) = delete;

  kube::Client& client() { return *client_; }
  const std::string& url() const { return url_; }
  const std::string& kubeconfig() const { return kubeconfig_; }
  const std::string& work_dir() const { return work_dir_; }

  // Applies crds/dataservices.sluice.dev.yaml (server-side apply), waits until it is Established
  // and creates the namespace `ns` (fine when it exists).
  absl::Status InstallDataServiceCrd(const std::string& ns);

 private:
  explicit BenchCluster(BenchClusterOptions options) : o_(std::move(options)) {}
  absl::Status MakeWorkDir();
  absl::Status StartServer();
  absl::Status StartNodes();

  const BenchClusterOptions o_;
  std::string work_dir_, kubeconfig_, url_;
  bool own_work_dir_ = false;
  std::unique_ptr<BenchChild> server_;
  std::vector<std::unique_ptr<BenchChild>> nodes_;
  std::unique_ptr<kube::Client> client_;
};

}  // namespace sluice::bench

#endif  // SLUICE_BENCH_KUBECLUSTER_BENCH_CLUSTER_H_
