#include "local/local_dataservice.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <stdexcept>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "common/log.h"
#include "dataservice.grpc.pb.h"
#include "local/worker_drain.h"

namespace sluice::local {
namespace {

constexpr char kWorkerPrefix[] = "worker-";

std::string WorkerName(int index) { return absl::StrCat(kWorkerPrefix, index); }

// The pause between two polls of the dispatcher: a fraction of a heartbeat (registration and
// drain progress show with heartbeats), within [5 ms, 250 ms].
absl::Duration PollInterval(int64_t heartbeat_interval_ms) {
  return absl::Milliseconds(std::clamp<int64_t>(heartbeat_interval_ms / 5, 5, 250));
}

// A supervisor-wide counter for default cgroup names (several supervisors may live in one process).
std::atomic<int> next_instance{0};

}  // namespace

const char* WorkerStateName(WorkerState state) {
  switch (state) {
    case WorkerState::kRunning: return "running";
    case WorkerState::kDraining: return "draining";
    case WorkerState::kStopping: return "stopping";
    case WorkerState::kStopped: return "stopped";
  }
  return "unknown";
}

std::string ExecutableDir() {
  std::error_code ec;
  std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) return ".";
  return self.parent_path().string();
}

LocalDataService::LocalDataService(LocalDataServiceOptions options) : options_(std::move(options)) {
  if (!options_.worker_dispatcher_address.empty()) worker_dispatcher_address_ = options_.worker_dispatcher_address;
  if (options_.worker_cpus > 0) (void)QuotaFor(options_.worker_cpus);  // set up now: cpu_quota() reports it at once
}

LocalDataService::~LocalDataService() {
  std::map<int, std::unique_ptr<Slot>> workers;
  Slot dispatcher;
  {
    absl::MutexLock lock(&mu_);
    workers.swap(workers_);
    std::swap(dispatcher, dispatcher_);
  }
  // Workers first, so none logs a burst of reconnect errors while the dispatcher is gone. Each
  // ChildProcess destructor SIGKILLs its group and reaps it.
  workers.clear();
  dispatcher.runs.clear();
  // The cgroups are empty now (every limited process was reaped): the quota removes them.
  absl::MutexLock quota_lock(&quota_mu_);
  quota_.reset();
}

// ------------------------------------------------------------------------------- processes

absl::StatusOr<CpuQuota*> LocalDataService::QuotaFor(double cpus) {
  absl::MutexLock lock(&quota_mu_);  // serialises the cgroup set-up only; mu_ is not held
  if (quota_ == nullptr) {
    const std::string group = options_.cpu_quota_group.empty()
                                  ? absl::StrCat("sluice-local-", ::getpid(), "-", next_instance++)
                                  : options_.cpu_quota_group;
    quota_ = CpuQuota::Create(options_.worker_cpus > 0 ? options_.worker_cpus : cpus, group,
                              options_.cpu_quota_cgroups);
    if (quota_->mechanism() == QuotaMechanism::kTaskset) {
      SLUICE_LOG(Warning, "worker CPU limits: no usable cgroup, every limited worker is pinned to one CPU instead "
                          "(no per-worker fraction)")
          .With("why", absl::StrJoin(quota_->notes(), "; "));
    } else {
      SLUICE_LOG(Info, "worker CPU limits").With("how", quota_->Describe());
    }
  }
  return quota_.get();
}

const CpuQuota* LocalDataService::cpu_quota() const {
  absl::MutexLock lock(&quota_mu_);
  return quota_.get();
}

void LocalDataService::RemoveQuota(int index) {
  CpuQuota* quota = nullptr;
  {
    absl::MutexLock lock(&quota_mu_);
    quota = quota_.get();
  }
  if (quota != nullptr) quota->Remove(index);  // CpuQuota is thread-safe; it lives as long as we do
}

absl::StatusOr<std::unique_ptr<ChildProcess>> LocalDataService::Spawn(const std::string& name,
                                                                      const std::string& binary,
                                                                      std::vector<std::string> flags,
                                                                      const std::string& working_dir, int quota_index,
                                                                      double cpus) {
  ChildProcessOptions child;
  child.argv.push_back(absl::StrCat(options_.bin_dir, "/", binary));
  if (::access(child.argv[0].c_str(), X_OK) != 0) {
    return absl::NotFoundError(absl::StrCat(child.argv[0], " is not an executable file (", std::strerror(errno),
                                            "): build it, or point the bin directory (--bin_dir) at the one holding it"));
  }
  for (auto& f : flags) child.argv.push_back(std::move(f));
  child.working_dir = working_dir;
  if (!options_.log_dir.empty()) child.log_file = absl::StrCat(options_.log_dir, "/", name, ".log");
  if (options_.echo_logs) child.echo_prefix = absl::StrCat("[", name, "] ");
  if (cpus > 0) {
    auto quota = QuotaFor(cpus);
    if (!quota.ok()) return quota.status();
    child.before_exec = [quota = *quota, quota_index, cpus](pid_t pid) { return quota->Apply(pid, quota_index, cpus); };
  }
  return spawner_.Start(std::move(child));
}

absl::StatusOr<std::unique_ptr<ServiceProcess>> LocalDataService::AwaitListening(const std::string& name,
                                                                                 std::unique_ptr<ChildProcess> process,
                                                                                 bool wait_until_registered) {
  auto p = std::make_unique<ServiceProcess>();
  p->name = name;
  auto line = process->WaitForLine("msg=listening", options_.start_timeout);
  if (!line.ok()) {
    return absl::Status(line.status().code(), absl::StrCat(name, " did not start: ", line.status().message(),
                                                           "\n--- its output ---\n", process->Output()));
  }
  auto port = LogfmtInt(*line, "port");
  if (!port.ok()) return absl::DataLossError(absl::StrCat(name, ": the \"listening\" line: ", port.status().message()));
  auto metrics_port = LogfmtInt(*line, "metrics_port");
  if (!metrics_port.ok()) {
    return absl::DataLossError(absl::StrCat(name, ": the \"listening\" line: ", metrics_port.status().message()));
  }
  p->port = static_cast<int>(*port);
  p->metrics_port = static_cast<int>(*metrics_port);
  p->address = absl::StrCat(options_.listen_host, ":", p->port);
  if (std::optional<std::string> advertised = LogfmtField(*line, "worker_address")) p->address = *advertised;
  if (wait_until_registered) {
    auto registered = process->WaitForLine("registered with the dispatcher", options_.start_timeout);
    if (!registered.ok()) {
      return absl::Status(registered.status().code(),
                          absl::StrCat(name, " did not register with the dispatcher: ", registered.status().message(),
                                       "\n--- its output ---\n", process->Output()));
    }
  }
  p->process = std::move(process);
  return p;
}

std::optional<std::string> LocalDataService::Terminate(const ServiceProcess& p, absl::Duration timeout) {
  ChildProcess& child = *p.process;
  if (!child.Exited()) child.Signal(SIGTERM);
  auto status = child.Wait(timeout);
  if (!status.ok()) {
    child.KillGroup();
    return absl::StrCat(p.name, " did not exit within ", absl::FormatDuration(timeout), " of SIGTERM (killed)");
  }
  if ((WIFEXITED(*status) && WEXITSTATUS(*status) == 0) || (WIFSIGNALED(*status) && WTERMSIG(*status) == SIGKILL)) {
    return std::nullopt;  // a clean exit, or killed on purpose earlier
  }
  return absl::StrCat(p.name, " ended with ", DescribeWaitStatus(*status));
}

// ------------------------------------------------------------------------------- dispatcher

absl::Status LocalDataService::StartDispatcher() {
  int port = 0;
  {
    absl::MutexLock lock(&mu_);
    if (dispatcher_.busy) return absl::FailedPreconditionError("the dispatcher is being started or stopped");
    if (!dispatcher_.runs.empty() && !dispatcher_.runs.back()->process->Exited()) {
      return absl::FailedPreconditionError("the dispatcher is already running");
    }
    dispatcher_.busy = true;
    port = dispatcher_port_;
  }
  std::vector<std::string> flags = {
      absl::StrCat("--port=", port),
      options_.admin_servers ? "--metrics_port=0" : "--metrics_port=-1",
      absl::StrCat("--listen_host=", options_.listen_host),
      absl::StrCat("--heartbeat_interval_ms=", options_.heartbeat_interval_ms),
  };
  if (options_.worker_timeout_ms > 0) flags.push_back(absl::StrCat("--worker_timeout_ms=", options_.worker_timeout_ms));
  if (!options_.journal_dir.empty()) flags.push_back(absl::StrCat("--journal_dir=", options_.journal_dir));
  if (!options_.dataservice.empty()) flags.push_back(absl::StrCat("--dataservice=", options_.dataservice));
  flags.insert(flags.end(), options_.dispatcher_flags.begin(), options_.dispatcher_flags.end());
  absl::StatusOr<std::unique_ptr<ServiceProcess>> started;
  auto spawned = Spawn("dispatcher", "sluice-dispatcher", std::move(flags), options_.dispatcher_working_dir, 0, 0);
  if (spawned.ok()) {
    started = AwaitListening("dispatcher", *std::move(spawned), false);
  } else {
    started = spawned.status();
  }
  absl::MutexLock lock(&mu_);
  dispatcher_.busy = false;
  if (!started.ok()) return started.status();
  dispatcher_port_ = (*started)->port;
  dispatcher_address_ = (*started)->address;
  dispatcher_.runs.push_back(*std::move(started));
  dispatcher_.state = WorkerState::kRunning;
  return absl::OkStatus();
}

void LocalDataService::KillDispatcher() {
  absl::MutexLock lock(&mu_);
  if (!dispatcher_.runs.empty()) dispatcher_.runs.back()->process->KillGroup();
}

absl::Status LocalDataService::StopDispatcher() {
  const ServiceProcess* run = nullptr;
  {
    absl::MutexLock lock(&mu_);
    if (dispatcher_.runs.empty()) return absl::FailedPreconditionError("the dispatcher was never started");
    if (dispatcher_.busy) return absl::FailedPreconditionError("the dispatcher is being started or stopped");
    dispatcher_.busy = true;
    dispatcher_.state = WorkerState::kStopping;
    run = dispatcher_.runs.back().get();
  }
  std::optional<std::string> problem = Terminate(*run, options_.stop_timeout);
  absl::MutexLock lock(&mu_);
  dispatcher_.busy = false;
  dispatcher_.state = WorkerState::kStopped;
  return problem ? absl::InternalError(*problem) : absl::OkStatus();
}

std::string LocalDataService::dispatcher_address() const {
  absl::MutexLock lock(&mu_);
  return dispatcher_address_;
}

const ServiceProcess& LocalDataService::dispatcher() const {
  static const ServiceProcess* const kNotStarted = new ServiceProcess();
  absl::MutexLock lock(&mu_);
  return dispatcher_.runs.empty() ? *kNotStarted : *dispatcher_.runs.back();
}

// ------------------------------------------------------------------------------- workers

LocalDataService::Slot* LocalDataService::FindWorker(int index) {
  auto it = workers_.find(index);
  return it == workers_.end() || it->second->runs.empty() ? nullptr : it->second.get();
}

const LocalDataService::Slot* LocalDataService::FindWorker(int index) const {
  auto it = workers_.find(index);
  return it == workers_.end() || it->second->runs.empty() ? nullptr : it->second.get();
}

std::string LocalDataService::WorkerDispatcherAddress() const {
  return worker_dispatcher_address_.empty() ? dispatcher_address_ : worker_dispatcher_address_;
}

void LocalDataService::set_worker_dispatcher_address(std::string address) {
  absl::MutexLock lock(&mu_);
  worker_dispatcher_address_ = std::move(address);
}

double LocalDataService::LimitOf(const WorkerOptions& worker) const {
  return worker.cpus.has_value() ? *worker.cpus : options_.worker_cpus;
}

std::vector<std::string> LocalDataService::WorkerFlags(int port, const WorkerOptions& worker) const {
  std::string dispatcher;
  {
    absl::MutexLock lock(&mu_);
    dispatcher = WorkerDispatcherAddress();
  }
  std::vector<std::string> flags = {
      absl::StrCat("--port=", port),
      options_.admin_servers ? "--metrics_port=0" : "--metrics_port=-1",
      absl::StrCat("--listen_host=", options_.listen_host),
      absl::StrCat("--dispatcher_address=", dispatcher),
      absl::StrCat("--heartbeat_interval_ms=", options_.heartbeat_interval_ms),
  };
  if (!options_.dataservice.empty()) flags.push_back(absl::StrCat("--dataservice=", options_.dataservice));
  flags.insert(flags.end(), options_.worker_flags.begin(), options_.worker_flags.end());
  flags.insert(flags.end(), worker.extra_flags.begin(), worker.extra_flags.end());
  return flags;
}

absl::StatusOr<std::vector<int>> LocalDataService::StartWorkers(int count, const WorkerOptions& worker) {
  if (count < 0) return absl::InvalidArgumentError(absl::StrCat("cannot start ", count, " workers"));
  const double cpus = LimitOf(worker);
  if (cpus < 0) return absl::InvalidArgumentError(absl::StrCat("worker CPU limit ", cpus, " is negative"));
  std::vector<int> indices;
  {
    absl::MutexLock lock(&mu_);
    if (dispatcher_address_.empty()) return absl::FailedPreconditionError("start the dispatcher first");
    for (int i = 0; i < count; ++i) {
      const int index = next_worker_index_++;
      auto slot = std::make_unique<Slot>();
      slot->start = worker;
      slot->cpus = cpus;
      slot->busy = true;
      workers_[index] = std::move(slot);
      indices.push_back(index);
    }
  }
  // Fork them all, then wait for each: their start-ups overlap.
  std::vector<absl::StatusOr<std::unique_ptr<ChildProcess>>> spawned;
  for (int index : indices) {
    spawned.push_back(Spawn(WorkerName(index), "sluice-worker", WorkerFlags(0, worker), worker.working_dir, index, cpus));
  }
  std::vector<absl::StatusOr<std::unique_ptr<ServiceProcess>>> started;
  for (size_t i = 0; i < indices.size(); ++i) {
    if (!spawned[i].ok()) {
      started.push_back(spawned[i].status());
    } else {
      started.push_back(AwaitListening(WorkerName(indices[i]), *std::move(spawned[i]), worker.wait_until_registered));
    }
  }
  absl::Status first_error;
  absl::MutexLock lock(&mu_);
  for (size_t i = 0; i < indices.size(); ++i) {
    const int index = indices[i];
    if (started[i].ok()) {
      Slot& slot = *workers_.at(index);
      slot.runs.push_back(*std::move(started[i]));
      slot.busy = false;
      continue;
    }
    if (first_error.ok()) first_error = started[i].status();
    workers_.erase(index);  // a failed start leaves no worker (and no index, when it was the last)
  }
  while (next_worker_index_ > 0 && workers_.count(next_worker_index_ - 1) == 0) --next_worker_index_;
  if (!first_error.ok()) return first_error;
  return indices;
}

absl::StatusOr<int> LocalDataService::AddWorker(const std::vector<std::string>& extra_flags,
                                                const std::string& working_dir) {
  WorkerOptions worker;
  worker.extra_flags = extra_flags;
  worker.working_dir = working_dir;
  return AddWorker(worker);
}

absl::StatusOr<int> LocalDataService::AddWorker(const WorkerOptions& worker) {
  auto started = StartWorkers(1, worker);
  if (!started.ok()) return started.status();
  return started->front();
}

absl::StatusOr<std::vector<std::string>> LocalDataService::AddWorkers(int count, const WorkerOptions& worker) {
  auto started = StartWorkers(count, worker);
  if (!started.ok()) return started.status();
  std::vector<std::string> names;
  for (int index : *started) names.push_back(WorkerName(index));
  return names;
}

absl::Status LocalDataService::RestartWorker(int index) {
  WorkerOptions worker;
  double cpus = 0;
  int port = 0;
  {
    absl::MutexLock lock(&mu_);
    Slot* slot = FindWorker(index);
    if (slot == nullptr) return absl::NotFoundError(absl::StrCat("no worker with index ", index));
    if (slot->busy) return absl::FailedPreconditionError(absl::StrCat(WorkerName(index), " is being started or stopped"));
    if (!slot->runs.back()->process->Exited()) {
      return absl::FailedPreconditionError(absl::StrCat(WorkerName(index), " is still running"));
    }
    slot->busy = true;
    worker = slot->start;
    cpus = slot->cpus;
    port = slot->runs.back()->port;
  }
  absl::StatusOr<std::unique_ptr<ServiceProcess>> started;
  auto spawned = Spawn(WorkerName(index), "sluice-worker", WorkerFlags(port, worker), worker.working_dir, index, cpus);
  if (spawned.ok()) {
    started = AwaitListening(WorkerName(index), *std::move(spawned), worker.wait_until_registered);
  } else {
    started = spawned.status();
  }
  absl::MutexLock lock(&mu_);
  Slot& slot = *workers_.at(index);
  slot.busy = false;
  if (!started.ok()) return started.status();
  slot.runs.push_back(*std::move(started));
  slot.state = WorkerState::kRunning;
  return absl::OkStatus();
}

void LocalDataService::KillWorker(int index) {
  absl::MutexLock lock(&mu_);
  if (Slot* slot = FindWorker(index)) slot->runs.back()->process->KillGroup();
}

absl::Status LocalDataService::StopWorker(int index) {
  const ServiceProcess* run = nullptr;
  {
    absl::MutexLock lock(&mu_);
    Slot* slot = FindWorker(index);
    if (slot == nullptr) return absl::NotFoundError(absl::StrCat("no worker with index ", index));
    if (slot->busy) return absl::FailedPreconditionError(absl::StrCat(WorkerName(index), " is being started or stopped"));
    slot->busy = true;
    slot->state = WorkerState::kStopping;
    run = slot->runs.back().get();
  }
  std::optional<std::string> problem = Terminate(*run, options_.stop_timeout);
  {
    absl::MutexLock lock(&mu_);
    Slot& slot = *workers_.at(index);
    slot.busy = false;
    slot.state = WorkerState::kStopped;
  }
  RemoveQuota(index);
  return problem ? absl::InternalError(*problem) : absl::OkStatus();
}

absl::Status LocalDataService::SendDrainWorkers(const std::vector<std::string>& addresses) const {
  const std::string dispatcher = dispatcher_address();
  auto channel = rpc::MakeChannel(dispatcher, options_.client_tls);
  if (!channel.ok()) return channel.status();
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
  service::DrainWorkersRequest request;
  for (const auto& a : addresses) request.add_worker_addresses(a);
  service::DrainWorkersResponse response;
  const grpc::Status status = service::Dispatcher::NewStub(*channel)->DrainWorkers(&ctx, request, &response);
  if (!status.ok()) {
    absl::Status s = rpc::ToAbsl(status);
    return absl::Status(s.code(), absl::StrCat("DrainWorkers at dispatcher ", dispatcher, ": ", s.message()));
  }
  return absl::OkStatus();
}

absl::Status LocalDataService::DrainAndStopWorkers(const std::vector<std::string>& names, absl::Duration timeout) {
  return DrainAndStopWorkers(names, timeout, nullptr);
}

absl::Status LocalDataService::DrainAndStopWorkers(const std::vector<std::string>& names, absl::Duration timeout,
                                                   std::vector<StoppedWorker>* stopped) {
  struct Target {
    int index = 0;
    std::string name, address;
    int metrics_port = -1;
    const ServiceProcess* run = nullptr;
    WorkerState previous = WorkerState::kRunning;
    std::vector<WorkerLoad> loads;
    std::string reason;
    bool done = false;
  };
  const absl::Time deadline = absl::Now() + timeout;
  std::vector<Target> targets;
  {
    absl::MutexLock lock(&mu_);
    for (const std::string& name : names) {
      int index = -1;
      if (!absl::StartsWith(name, kWorkerPrefix) || !absl::SimpleAtoi(name.substr(strlen(kWorkerPrefix)), &index) ||
          WorkerName(index) != name || FindWorker(index) == nullptr) {
        return absl::NotFoundError(absl::StrCat("no worker named '", name, "'"));
      }
      for (const Target& t : targets) {
        if (t.index == index) return absl::InvalidArgumentError(absl::StrCat("'", name, "' is named twice"));
      }
      const Slot& slot = *FindWorker(index);
      if (slot.busy) return absl::FailedPreconditionError(absl::StrCat(name, " is being started or stopped"));
      if (slot.state == WorkerState::kStopped || slot.runs.back()->process->Exited()) {
        return absl::FailedPreconditionError(absl::StrCat(name, " is not running (", WorkerStateName(slot.state), ")"));
      }
      Target t;
      t.index = index;
      t.name = name;
      t.run = slot.runs.back().get();
      t.address = t.run->address;
      t.metrics_port = t.run->metrics_port;
      t.previous = slot.state;
      targets.push_back(std::move(t));
    }
    for (const Target& t : targets) {
      Slot& slot = *FindWorker(t.index);
      slot.busy = true;
      slot.state = WorkerState::kDraining;
    }
  }
  std::vector<std::string> addresses;
  for (const Target& t : targets) addresses.push_back(t.address);
  if (absl::Status sent = SendDrainWorkers(addresses); !sent.ok()) {
    absl::MutexLock lock(&mu_);
    for (const Target& t : targets) {
      Slot& slot = *workers_.at(t.index);
      slot.busy = false;
      slot.state = t.previous;
    }
    return sent;
  }
  SLUICE_LOG(Info, "draining workers").With("workers", absl::StrJoin(names, ","));

  std::vector<std::string> problems;
  std::string dispatcher_error;
  while (true) {
    auto state = GetState(std::clamp(deadline - absl::Now(), absl::Milliseconds(100), absl::Seconds(5)));
    if (state.ok()) {
      dispatcher_error.clear();
      std::vector<std::string> not_draining;
      for (Target& t : targets) {
        if (t.done) continue;
        if (t.run->process->Exited()) {  // crashed or killed meanwhile: nothing left to stop
          t.done = true;
          problems.push_back(absl::StrCat(t.name, " exited while draining (",
                                          DescribeWaitStatus(t.run->process->ExitStatus().value_or(0)), ")"));
          continue;
        }
        if (t.metrics_port > 0) {
          auto samples = ScrapeMetrics(options_.listen_host, t.metrics_port, absl::Seconds(2));
          if (samples.ok()) {
            t.loads.push_back({absl::Now(), SumSamples(*samples, "sluice_worker_buffered_elements"),
                               SumSamples(*samples, "sluice_worker_elements_produced_total")});
            // Only the latest scrape is reported.
            if (t.loads.size() > 1) t.loads.erase(t.loads.begin(), t.loads.end() - 1);
          }
        }
        const WorkerDrainStatus verdict = EvaluateWorkerDrain(*state, t.address);
        t.reason = verdict.reason;
        if (!verdict.drained) {
          if (absl::StrContains(verdict.reason, "not list it as draining")) not_draining.push_back(t.address);
          continue;
        }
        SLUICE_LOG(Info, "worker drained, stopping it").With("worker", t.name).With("why", verdict.reason);
        if (stopped != nullptr) {
          stopped->push_back({t.name, t.loads.empty() ? std::nullopt : std::optional<WorkerLoad>(t.loads.back()),
                              verdict.reason});
        }
        if (std::optional<std::string> problem = Terminate(*t.run, options_.stop_timeout)) problems.push_back(*problem);
        t.done = true;
      }
      // A dispatcher restarted without a journal forgot the drain: ask again.
      if (!not_draining.empty()) (void)SendDrainWorkers(not_draining);
    } else {
      dispatcher_error = state.status().ToString();
    }
    const bool all_done = std::all_of(targets.begin(), targets.end(), [](const Target& t) { return t.done; });
    if (all_done || absl::Now() >= deadline) break;
    absl::SleepFor(std::min(PollInterval(options_.heartbeat_interval_ms), std::max(deadline - absl::Now(), absl::ZeroDuration())));
  }

  std::vector<std::string> waiting;
  {
    absl::MutexLock lock(&mu_);
    for (const Target& t : targets) {
      Slot& slot = *workers_.at(t.index);
      slot.busy = false;
      if (t.done) {
        slot.state = WorkerState::kStopped;
      } else {
        waiting.push_back(absl::StrCat(t.name, " (", t.address, "): ", t.reason.empty() ? "no answer yet" : t.reason));
      }
    }
  }
  for (const Target& t : targets) {
    if (t.done) RemoveQuota(t.index);
  }
  if (!waiting.empty()) {
    return absl::DeadlineExceededError(absl::StrCat(
        "not drained within ", absl::FormatDuration(timeout), " (left running, draining): ", absl::StrJoin(waiting, "; "),
        dispatcher_error.empty() ? "" : absl::StrCat("; the dispatcher: ", dispatcher_error)));
  }
  if (!problems.empty()) return absl::InternalError(absl::StrJoin(problems, "; "));
  return absl::OkStatus();
}

std::vector<WorkerStatus> LocalDataService::ListWorkers() const {
  absl::MutexLock lock(&mu_);
  std::vector<WorkerStatus> out;
  for (const auto& [index, slot] : workers_) {
    if (slot->runs.empty()) continue;  // still starting
    const ServiceProcess& run = *slot->runs.back();
    WorkerStatus s;
    s.index = index;
    s.name = WorkerName(index);
    s.address = run.address;
    s.pid = run.process->pid();
    s.metrics_port = run.metrics_port;
    s.state = slot->state;
    s.exited = run.process->Exited();
    if (std::optional<int> status = run.process->ExitStatus()) s.exit_status = DescribeWaitStatus(*status);
    s.cpus = slot->cpus;
    s.runs = static_cast<int>(slot->runs.size());
    out.push_back(std::move(s));
  }
  return out;
}

std::optional<int> LocalDataService::WorkerIndex(const std::string& name) const {
  int index = -1;
  if (!absl::StartsWith(name, kWorkerPrefix) || !absl::SimpleAtoi(name.substr(strlen(kWorkerPrefix)), &index) ||
      WorkerName(index) != name) {
    return std::nullopt;
  }
  absl::MutexLock lock(&mu_);
  if (FindWorker(index) == nullptr) return std::nullopt;
  return index;
}

int LocalDataService::num_workers() const {
  absl::MutexLock lock(&mu_);
  return next_worker_index_;
}

const ServiceProcess& LocalDataService::worker(int index) const {
  absl::MutexLock lock(&mu_);
  const Slot* slot = FindWorker(index);
  if (slot == nullptr) throw std::out_of_range(absl::StrCat("LocalDataService::worker(", index, "): no such worker"));
  return *slot->runs.back();
}

absl::Status LocalDataService::StopGracefully(absl::Duration timeout) {
  std::vector<const ServiceProcess*> workers;
  const ServiceProcess* dispatcher = nullptr;
  {
    absl::MutexLock lock(&mu_);
    for (auto& [index, slot] : workers_) {
      if (slot->runs.empty()) continue;
      workers.push_back(slot->runs.back().get());
      if (!slot->busy) slot->state = WorkerState::kStopping;
    }
    if (!dispatcher_.runs.empty()) dispatcher = dispatcher_.runs.back().get();
  }
  std::vector<std::string> problems;
  // SIGTERM to every worker at once, then wait for each.
  for (const ServiceProcess* w : workers) {
    if (!w->process->Exited()) w->process->Signal(SIGTERM);
  }
  for (const ServiceProcess* w : workers) {
    if (std::optional<std::string> problem = Terminate(*w, timeout)) problems.push_back(*problem);
  }
  if (dispatcher != nullptr) {
    if (std::optional<std::string> problem = Terminate(*dispatcher, timeout)) problems.push_back(*problem);
  }
  {
    absl::MutexLock lock(&mu_);
    for (auto& [index, slot] : workers_) {
      if (!slot->busy && !slot->runs.empty()) slot->state = WorkerState::kStopped;
    }
    if (!dispatcher_.runs.empty()) dispatcher_.state = WorkerState::kStopped;
  }
  if (!problems.empty()) return absl::InternalError(absl::StrJoin(problems, "; "));
  return absl::OkStatus();
}

// ------------------------------------------------------------------------------- observing

absl::StatusOr<service::GetStateResponse> LocalDataService::GetState(absl::Duration timeout) const {
  auto channel = rpc::MakeChannel(dispatcher_address(), options_.client_tls);
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
      last = absl::StrCat(state->workers_size(), " workers, ", state->workers_size() - ready, " of them draining");
    } else {
      last = state.status().ToString();
    }
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(absl::StrCat("the dispatcher did not list ", n, " workers within ",
                                                      absl::FormatDuration(timeout), " (last: ", last, ")",
                                                      options_.log_dir.empty() ? "" : "; logs in " + options_.log_dir));
    }
    // Registration takes one worker heartbeat: ask again after a fraction of it.
    absl::SleepFor(PollInterval(options_.heartbeat_interval_ms));
  }
}

absl::Status LocalDataService::WaitForJobsFinished(absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (true) {
    auto state = GetState(std::max(deadline - absl::Now(), absl::Milliseconds(100)));
    if (!state.ok()) return state.status();
    int64_t running = 0;
    for (const auto& j : state->jobs()) running += j.finished() ? 0 : 1;
    if (running == 0) break;
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(absl::StrCat(running, " jobs did not finish within ", absl::FormatDuration(timeout),
                                                      " (is the dispatcher's --job_gc_grace_ms small?)"));
    }
    absl::SleepFor(PollInterval(options_.heartbeat_interval_ms));
  }
  absl::SleepFor(absl::Milliseconds(2 * options_.heartbeat_interval_ms));
  return absl::OkStatus();
}

absl::StatusOr<std::vector<MetricSample>> LocalDataService::ScrapeDispatcher() const {
  const int port = dispatcher().metrics_port;
  if (port <= 0) {
    return absl::FailedPreconditionError("the dispatcher has no admin server (not started, or admin_servers is off)");
  }
  return ScrapeMetrics(options_.listen_host, port);
}

absl::StatusOr<std::vector<MetricSample>> LocalDataService::ScrapeWorker(int index) const {
  const int port = worker(index).metrics_port;
  if (port <= 0) {
    return absl::FailedPreconditionError(absl::StrCat(WorkerName(index), " has no admin server (admin_servers is off)"));
  }
  return ScrapeMetrics(options_.listen_host, port);
}

std::string LocalDataService::Logs() const {
  absl::MutexLock lock(&mu_);
  std::string out;
  for (size_t i = 0; i < dispatcher_.runs.size(); ++i) {
    absl::StrAppend(&out, i + 1 < dispatcher_.runs.size() ? "--- dispatcher (earlier run) ---\n" : "--- dispatcher ---\n",
                    dispatcher_.runs[i]->process->Output());
  }
  for (const auto& [index, slot] : workers_) {
    for (size_t i = 0; i < slot->runs.size(); ++i) {
      const ServiceProcess& run = *slot->runs[i];
      absl::StrAppend(&out, "--- ", run.name, " (", run.address, ")", i + 1 < slot->runs.size() ? " (earlier run)" : "",
                      " ---\n", run.process->Output());
    }
  }
  return out;
}

}  // namespace sluice::local
