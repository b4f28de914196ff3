// The Prometheus route of the local autoscaler against a real Prometheus server (Debian's
// `prometheus`), started by the test on loopback with a generated configuration that scrapes a
// real dispatcher and real workers (file-based discovery, rewritten as workers come and go):
//  - PrometheusSource reads every signal the policy needs from it; stopped, it says so and every
//    signal is missing (never zero);
//  - the closed loop: a demand step makes workers appear; with Prometheus stopped (and the demand
//    dropped) the autoscaler holds — no scale-down — and says why; restarted on the same storage,
//    it resumes and scales down.
// Skipped (with a warning) where /usr/bin/prometheus is not installed.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "autoscaler/local/demo_workload.h"
#include "autoscaler/local/local_autoscaler.h"
#include "autoscaler/local/stepped_consumer.h"
#include "local/child_process.h"
#include "testing/test_util.h"

namespace sluice::autoscaler {
namespace {

constexpr char kPrometheus[] = "/usr/bin/prometheus";
constexpr double kTarget = 0.10;

int FreePort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  socklen_t len = sizeof(a);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

bool WaitFor(const std::function<bool()>& cond, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (absl::Now() < deadline) {
    if (cond()) return true;
    absl::SleepFor(absl::Milliseconds(200));
  }
  return cond();
}

// A Prometheus server on loopback scraping the supervisor's processes every second.
class Prometheus {
 public:
  Prometheus(const std::string& dir, const local::LocalDataService* service) : dir_(dir), service_(service) {
    port_ = FreePort();
    std::filesystem::create_directories(dir_ + "/data");
    std::ofstream(dir_ + "/prometheus.yml") << "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
                                            << "scrape_configs:\n  - job_name: sluice\n    file_sd_configs:\n"
                                            << "      - files: ['" << dir_ << "/targets.json']\n"
                                            << "        refresh_interval: 1s\n";
    SyncTargets();
  }
  std::string url() const { return absl::StrCat("http://127.0.0.1:", port_); }
  // The dispatcher's and every running worker's admin address.
  void SyncTargets() {
    std::vector<std::string> targets = {
        absl::StrCat("\"127.0.0.1:", service_->dispatcher().metrics_port, "\"")};
    for (const local::WorkerStatus& w : service_->ListWorkers()) {
      if (!w.exited && w.metrics_port > 0) targets.push_back(absl::StrCat("\"127.0.0.1:", w.metrics_port, "\""));
    }
    const std::string text = absl::StrCat("[{\"targets\": [", absl::StrJoin(targets, ", "), "]}]\n");
    if (text == last_targets_) return;
    last_targets_ = text;
    const std::string tmp = dir_ + "/targets.json.tmp";
    std::ofstream(tmp) << text;
    std::filesystem::rename(tmp, dir_ + "/targets.json");  // atomic: Prometheus never reads half a file
  }
  void Start() {
    local::ChildProcessOptions o;
    o.argv = {kPrometheus, "--config.file=" + dir_ + "/prometheus.yml", "--storage.tsdb.path=" + dir_ + "/data",
              absl::StrCat("--web.listen-address=127.0.0.1:", port_), "--log.level=warn"};
    o.log_file = dir_ + "/prometheus.log";
    auto p = local::ChildProcess::Start(o);
    REQUIRE(p.ok());
    process_ = *std::move(p);
  }
  void Stop() {
    process_->Signal(SIGTERM);
    REQUIRE(process_->Wait(absl::Seconds(30)).ok());
    process_.reset();
  }

 private:
  std::string dir_;
  const local::LocalDataService* service_;
  int port_ = 0;
  std::string last_targets_;
  std::unique_ptr<local::ChildProcess> process_;
};

local::LocalDataServiceOptions ServiceOptions(const std::string& log_dir, double cpus) {
  local::LocalDataServiceOptions o;
  o.bin_dir = sluice::testing::BinaryDir() + "/bin";
  o.heartbeat_interval_ms = 200;
  o.worker_timeout_ms = 10000;
  o.dataservice = "local";
  o.worker_cpus = cpus;
  o.worker_flags = DemoWorkerFlags();
  o.stop_timeout = absl::Seconds(kDemoWorkerStopSeconds);
  o.log_dir = log_dir;
  std::filesystem::create_directories(log_dir);
  return o;
}

std::unique_ptr<SteppedConsumer> StartConsumer(const local::LocalDataService& service, absl::Duration step) {
  DemoWorkload w;
  auto def = DemoPipeline(w);
  REQUIRE(def.ok());
  SteppedConsumerOptions co;
  co.client.dispatcher_address = service.dispatcher_address();
  co.client.pipeline = *def;
  co.client.job_name = "train";
  co.client.sharding = service::SHARDING_DYNAMIC;
  co.client.heartbeat_interval = absl::Milliseconds(200);
  co.client.max_buffered_bytes = kDemoClientBufferBytes;
  co.step_time = step;
  auto c = SteppedConsumer::Start(co);
  REQUIRE(c.ok());
  return *std::move(c);
}

TEST_CASE("PrometheusSource reads a real dispatcher's and workers' signals through a real Prometheus") {
  if (!std::filesystem::exists(kPrometheus)) {
    WARN("Debian's prometheus is not installed (scripts/setup.sh installs it): skipped");
    return;
  }
  sluice::testing::TempDir tmp;
  local::LocalDataService service(ServiceOptions(tmp.File("logs"), 0));
  REQUIRE(service.StartDispatcher().ok());
  REQUIRE(service.AddWorkers(2).ok());
  REQUIRE(service.WaitForWorkers(2, absl::Seconds(60)).ok());
  auto consumer = StartConsumer(service, absl::Milliseconds(5));
  Prometheus prometheus(tmp.File("prom"), &service);
  prometheus.Start();

  PrometheusOptions po;
  po.namespace_label = "";
  po.window = absl::Seconds(10);
  po.cache_for = absl::ZeroDuration();
  PrometheusSource source(po);
  Observation obs;
  const bool complete = WaitFor(
      [&] {
        obs = source.Observe({prometheus.url(), "", "local", {}}, absl::Now());
        const Signals& s = obs.signals;
        return obs.errors.empty() && s.stall_ratio.known() && s.demand.known() && *s.demand > 0 &&
               s.supply.known() && *s.supply > 0 && s.worker_cpu.known() && s.workers.known() &&
               *s.workers == 2 && s.churn.known() && s.buffered.known() && s.compute_per_element.known();
      },
      absl::Seconds(120));
  INFO(absl::StrJoin(obs.errors, "; ") << " demand " << obs.signals.demand.missing << " stall "
                                       << obs.signals.stall_ratio.missing << " workers " << obs.signals.workers.missing);
  REQUIRE(complete);
  CHECK(*obs.signals.stall_ratio >= 0);
  CHECK(*obs.signals.stall_ratio <= 1);
  CHECK(*obs.signals.churn == 0);
  CHECK(absl::Now() - obs.signals.at < absl::Seconds(30));  // fresh: the dispatcher's last scrape

  // Stopped: an error naming the server, and nothing known.
  prometheus.Stop();
  const Observation down = source.Observe({prometheus.url(), "", "local", {}}, absl::Now());
  CHECK_FALSE(down.errors.empty());
  CHECK_FALSE(down.signals.stall_ratio.known());
  CHECK_FALSE(down.signals.demand.known());
  CHECK_FALSE(down.signals.workers.known());
  consumer->Stop();
}

TEST_CASE("closed loop through Prometheus: scales up, holds while Prometheus is stopped, resumes once restarted") {
  if (!std::filesystem::exists(kPrometheus)) {
    WARN("Debian's prometheus is not installed (scripts/setup.sh installs it): skipped");
    return;
  }
  sluice::testing::TempDir tmp;
  local::LocalDataService service(ServiceOptions(tmp.File("logs"), 0.25));
  REQUIRE(service.StartDispatcher().ok());
  REQUIRE(service.AddWorkers(1).ok());
  REQUIRE(service.WaitForWorkers(1, absl::Seconds(60)).ok());
  Prometheus prometheus(tmp.File("prom"), &service);
  prometheus.Start();
  LocalAutoscalerOptions o;
  o.period = absl::Seconds(1);
  o.window = absl::Seconds(8);
  o.prometheus_url = prometheus.url();
  o.prometheus.namespace_label = "";
  o.policy.target_stall_ratio = kTarget;
  o.policy.max_replicas = 6;
  o.policy.scale_down.stabilization_window = absl::Seconds(6);
  o.policy.settle_time = absl::Seconds(2);
  o.policy.max_signal_age = absl::Seconds(6);
  o.log_sink = [](const std::string&) {};
  LocalAutoscaler scaler(&service, o);
  auto consumer = StartConsumer(service, absl::Milliseconds(4));
  scaler.Start();
  auto history = [&] {
    std::string out;
    for (const LocalDecision& d : scaler.decisions()) absl::StrAppend(&out, DecisionLogfmt(d), "\n");
    return out;
  };
  // Scale up on Prometheus' signals (the discovery file follows the workers).
  const bool up = WaitFor(
      [&] {
        prometheus.SyncTargets();
        return scaler.stats().scale_ups >= 1 && scaler.stats().workers > 1;
      },
      absl::Minutes(3));
  INFO(history());
  REQUIRE(up);
  // Let the new workers be scraped, then stop Prometheus and drop the demand.
  REQUIRE(WaitFor(
      [&] {
        prometheus.SyncTargets();
        auto ds = scaler.decisions();
        return !ds.empty() && ds.back().signals.workers.known() &&
               *ds.back().signals.workers == scaler.stats().workers;
      },
      absl::Minutes(2)));
  const int32_t before = scaler.stats().workers;
  const int64_t downs = scaler.stats().scale_downs;
  prometheus.Stop();
  consumer->set_step_time(absl::Milliseconds(40));
  const int64_t first = scaler.stats().decisions + 2;
  REQUIRE(WaitFor([&] { return scaler.stats().decisions >= first + 20; }, absl::Minutes(3)));
  CHECK(scaler.stats().scale_downs == downs);
  CHECK(scaler.stats().workers == before);
  int held = 0;
  for (const LocalDecision& d : scaler.decisions()) {
    if (d.number < first || d.number > first + 20) continue;
    CHECK(d.removed.empty());
    CHECK_FALSE(d.source_errors.empty());
    if (d.decision.Has(Reason::kHeldOnMissingData) && d.decision.holding) ++held;
  }
  CHECK(held >= 15);

  // Restarted (same storage, same port): fresh data again, and the scale-down follows.
  prometheus.Start();
  const bool resumed = WaitFor(
      [&] {
        prometheus.SyncTargets();
        return scaler.stats().scale_downs > downs && scaler.stats().workers < before;
      },
      absl::Minutes(3));
  INFO(history());
  CHECK(resumed);
  CHECK(scaler.stats().elements_lost == 0);
  CHECK(scaler.stats().scale_downs_on_missing_data == 0);
  scaler.Stop();
  consumer->Stop();
  prometheus.Stop();
}

}  // namespace
}  // namespace sluice::autoscaler
