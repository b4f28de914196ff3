#include "e2e_dataplane/local_dataservice.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "dataplane/rpc/credentials.h"
#include "dataservice.grpc.pb.h"

namespace sluice::local {
namespace {

absl::StatusOr<int> IntField(const std::string& line, const std::string& key) {
  std::optional<std::string> text = LogfmtField(line, key);
  int value = 0;
  if (!text || !absl::SimpleAtoi(*text, &value)) {
    return absl::DataLossError(absl::StrCat("the \"listening\" line has no integer ", key, "=: ", line));
  }
  return value;
}

}  // namespace

std::string ExecutableDir() {
  std::error_code ec;
  std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) return ".";
  return self.parent_path().string();
}

LocalDataService::LocalDataService(LocalDataServiceOptions options) : options_(std::move(options)) {}

LocalDataService::~LocalDataService() {
  // Workers first, so none logs a burst of reconnect errors while the dispatcher is gone.
  for (auto& w : workers_) w.process.reset();
  dispatcher_.process.reset();
}

absl::StatusOr<ServiceProcess> LocalDataService::Launch(const std::string& name, const std::string& binary,
                                                        std::vector<std::string> flags, const std::string& working_dir) {
  ChildProcessOptions child;
  child.argv.push_back(absl::StrCat(options_.bin_dir, "/", binary));
  for (auto& f : flags) child.argv.push_back(std::move(f));
  child.working_dir = working_dir;
  if (!options_.log_dir.empty()) child.log_file = absl::StrCat(options_.log_dir, "/", name, ".log");
  if (options_.echo_logs) child.echo_prefix = absl::StrCat("[", name, "] ");
  auto started = ChildProcess::Start(std::move(child));
  if (!started.ok()) return started.status();
  ServiceProcess p;
  p.name = name;
  p.process = *std::move(started);
  auto line = p.process->WaitForLine("msg=listening", options_.start_timeout);
  if (!line.ok()) {
    return absl::Status(line.status().code(), absl::StrCat(name, " did not start: ", line.status().message(),
                                                           "\n--- its output ---\n", p.process->Output()));
  }
  auto port = IntField(*line, "port");
  if (!port.ok()) return port.status();
  auto metrics_port = IntField(*line, "metrics_port");
  if (!metrics_port.ok()) return metrics_port.status();
  p.port = *port;
  p.metrics_port = *metrics_port;
  p.address = absl::StrCat(options_.listen_host, ":", p.port);
  if (std::optional<std::string> advertised = LogfmtField(*line, "worker_address")) p.address = *advertised;
  return p;
}

absl::Status LocalDataService::StartDispatcher() {
  if (dispatcher_.process != nullptr && !dispatcher_.process->Exited()) {
    return absl::FailedPreconditionError("the dispatcher is already running");
  }
  std::vector<std::string> flags = {
      absl::StrCat("--port=", dispatcher_port_),
      "--metrics_port=0",
      absl::StrCat("--listen_host=", options_.listen_host),
      absl::StrCat("--worker_timeout_ms=", options_.worker_timeout_ms),
      absl::StrCat("--heartbeat_interval_ms=", options_.heartbeat_interval_ms),
  };
  if (!options_.journal_dir.empty()) flags.push_back(absl::StrCat("--journal_dir=", options_.journal_dir));
  if (!options_.dataservice.empty()) flags.push_back(absl::StrCat("--dataservice=", options_.dataservice));
  flags.insert(flags.end(), options_.dispatcher_flags.begin(), options_.dispatcher_flags.end());
  if (dispatcher_.process != nullptr) retired_.push_back(std::move(dispatcher_.process));
  auto started = Launch("dispatcher", "sluice-dispatcher", std::move(flags), options_.dispatcher_working_dir);
  if (!started.ok()) return started.status();
  dispatcher_ = *std::move(started);
  dispatcher_port_ = dispatcher_.port;
  return absl::OkStatus();
}

absl::StatusOr<int> LocalDataService::AddWorker(const std::vector<std::string>& extra_flags,
                                                const std::string& working_dir) {
  if (dispatcher_.address.empty()) return absl::FailedPreconditionError("start the dispatcher first");
  const int index = static_cast<int>(workers_.size());
  std::vector<std::string> flags = {
      "--port=0",
      "--metrics_port=0",
      absl::StrCat("--listen_host=", options_.listen_host),
      absl::StrCat("--dispatcher_address=", dispatcher_.address),
      absl::StrCat("--heartbeat_interval_ms=", options_.heartbeat_interval_ms),
  };
  if (!options_.dataservice.empty()) flags.push_back(absl::StrCat("--dataservice=", options_.dataservice));
  flags.insert(flags.end(), options_.worker_flags.begin(), options_.worker_flags.end());
  flags.insert(flags.end(), extra_flags.begin(), extra_flags.end());
  auto started = Launch(absl::StrCat("worker-", index), "sluice-worker", std::move(flags), working_dir);
  if (!started.ok()) return started.status();
  workers_.push_back(*std::move(started));
  return index;
}

void LocalDataService::KillDispatcher() {
  if (dispatcher_.process != nullptr) dispatcher_.process->KillGroup();
}

void LocalDataService::KillWorker(int index) {
  ServiceProcess& w = worker(index);
  if (w.process != nullptr) w.process->KillGroup();
}

absl::Status LocalDataService::StopGracefully(absl::Duration timeout) {
  std::vector<std::string> problems;
  auto stop = [&](ServiceProcess& p) {
    if (p.process == nullptr || p.process->Exited()) return;
    p.process->Signal(SIGTERM);
  };
  auto reap = [&](ServiceProcess& p) {
    if (p.process == nullptr) return;
    auto status = p.process->Wait(timeout);
    if (!status.ok()) {
      p.process->KillGroup();
      problems.push_back(absl::StrCat(p.name, " did not exit within ", absl::FormatDuration(timeout), " of SIGTERM"));
    } else if (!(WIFEXITED(*status) && WEXITSTATUS(*status) == 0) &&
               !(WIFSIGNALED(*status) && WTERMSIG(*status) == SIGKILL)) {  // killed earlier on purpose
      problems.push_back(absl::StrCat(p.name, " ended with ", DescribeWaitStatus(*status)));
    }
  };
  for (auto& w : workers_) stop(w);
  for (auto& w : workers_) reap(w);
  stop(dispatcher_);
  reap(dispatcher_);
  if (!problems.empty()) return absl::InternalError(absl::StrJoin(problems, "; "));
  return absl::OkStatus();
}

absl::StatusOr<service::GetStateResponse> LocalDataService::GetState(absl::Duration timeout) const {
  auto channel = rpc::MakeChannel(dispatcher_.address, options_.client_tls);
  if (!channel.ok()) return channel.status();
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  service::GetStateResponse response;
  grpc::Status status = service::Dispatcher::NewStub(*channel)->GetState(&ctx, service::GetStateRequest(), &response);
  if (!status.ok()) return rpc::ToAbsl(status);
  return response;
}

absl::Status LocalDataService::WaitForWorkers(int n, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  std::string last;
  while (true) {
    auto state = GetState(std::max(deadline - absl::Now(), absl::Milliseconds(100)));
    if (state.ok()) {
      int ready = 0;
      for (const auto& w : state->workers()) ready += w.draining() ? 0 : 1;
      if (ready == n && state->workers_size() == n) return absl::OkStatus();
      last = absl::StrCat(state->workers_size(), " workers");
    } else {
      last = state.status().ToString();
    }
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(absl::StrCat("the dispatcher did not list ", n, " workers within ",
                                                      absl::FormatDuration(timeout), " (last: ", last, ")"));
    }
    // Registration takes one worker heartbeat: ask again after a fraction of it.
    absl::SleepFor(absl::Milliseconds(std::max<int64_t>(5, options_.heartbeat_interval_ms / 5)));
  }
}

absl::StatusOr<std::vector<MetricSample>> LocalDataService::ScrapeDispatcher() const {
  return ScrapeMetrics(options_.listen_host, dispatcher_.metrics_port);
}

absl::StatusOr<std::vector<MetricSample>> LocalDataService::ScrapeWorker(int index) const {
  const ServiceProcess& w = workers_.at(static_cast<size_t>(index));
  return ScrapeMetrics(options_.listen_host, w.metrics_port);
}

std::string LocalDataService::Logs() const {
  std::string out;
  for (const auto& p : retired_) absl::StrAppend(&out, "--- dispatcher (earlier run) ---\n", p->Output());
  if (dispatcher_.process != nullptr) absl::StrAppend(&out, "--- dispatcher ---\n", dispatcher_.process->Output());
  for (const auto& w : workers_) {
    if (w.process != nullptr) absl::StrAppend(&out, "--- ", w.name, " (", w.address, ") ---\n", w.process->Output());
  }
  return out;
}

}  // namespace sluice::local
