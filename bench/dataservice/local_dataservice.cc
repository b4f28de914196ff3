#include "bench/dataservice/local_dataservice.h"

#include <grpcpp/grpcpp.h>

#include <thread>

#include "absl/strings/str_cat.h"
#include "dataplane/rpc/credentials.h"

namespace sluice::bench {

absl::StatusOr<std::unique_ptr<LocalDataService>> LocalDataService::Start(LocalDataServiceOptions options) {
  std::unique_ptr<LocalDataService> ds(new LocalDataService(std::move(options)));
  const LocalDataServiceOptions& o = ds->options_;
  std::vector<std::string> argv = {o.bin_dir + "/sluice-dispatcher",
                                   "--listen_host=127.0.0.1",
                                   "--port=0",
                                   "--metrics_port=-1",
                                   absl::StrCat("--heartbeat_interval_ms=", o.heartbeat_interval_ms)};
  argv.insert(argv.end(), o.dispatcher_args.begin(), o.dispatcher_args.end());
  auto dispatcher = BenchProcess::Start(argv, o.log_dir + "/dispatcher.log");
  if (!dispatcher.ok()) return dispatcher.status();
  ds->dispatcher_ = *std::move(dispatcher);
  auto line = ds->dispatcher_->WaitForLogLine("msg=listening", o.start_timeout);
  if (!line.ok()) return line.status();
  auto port = IntFromLogLine(*line, "port");
  if (!port.ok()) return port.status();
  ds->dispatcher_address_ = absl::StrCat("127.0.0.1:", *port);
  ds->worker_dispatcher_address_ = ds->dispatcher_address_;
  ds->stub_ = service::Dispatcher::NewStub(
      grpc::CreateCustomChannel(ds->dispatcher_address_, grpc::InsecureChannelCredentials(), rpc::MakeChannelArguments()));
  return ds;
}

LocalDataService::~LocalDataService() {
  // Workers first, so they deregister from a dispatcher that is still there.
  for (auto& w : workers_) w->Stop(absl::Seconds(3));
  workers_.clear();
  if (dispatcher_) dispatcher_->Stop(absl::Seconds(3));
}

absl::Status LocalDataService::AddWorker(const std::function<absl::Status(pid_t)>& after_start) {
  const LocalDataServiceOptions& o = options_;
  const int index = workers_started_++;
  std::vector<std::string> argv = {o.bin_dir + "/sluice-worker",
                                   "--listen_host=127.0.0.1",
                                   "--port=0",
                                   "--metrics_port=-1",
                                   "--dispatcher_address=" + worker_dispatcher_address_,
                                   absl::StrCat("--heartbeat_interval_ms=", o.heartbeat_interval_ms)};
  argv.insert(argv.end(), o.worker_args.begin(), o.worker_args.end());
  auto worker = BenchProcess::Start(argv, absl::StrCat(o.log_dir, "/worker-", index, ".log"));
  if (!worker.ok()) return worker.status();
  if (after_start) {
    if (absl::Status s = after_start((*worker)->pid()); !s.ok()) {
      (*worker)->Stop();
      return s;
    }
  }
  auto registered = (*worker)->WaitForLogLine("registered with the dispatcher", o.start_timeout);
  if (!registered.ok()) return registered.status();
  workers_.push_back(*std::move(worker));
  return absl::OkStatus();
}

absl::Status LocalDataService::StopWorkers() {
  for (auto& w : workers_) w->Stop(absl::Seconds(3));
  workers_.clear();
  return WaitForWorkers(0, options_.start_timeout);
}

absl::StatusOr<service::GetStateResponse> LocalDataService::GetState() {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  service::GetStateResponse response;
  grpc::Status status = stub_->GetState(&context, service::GetStateRequest(), &response);
  if (!status.ok()) return rpc::ToAbsl(status);
  return response;
}

absl::Status LocalDataService::WaitForWorkers(int n, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  int seen = -1;
  while (true) {
    auto state = GetState();
    if (state.ok()) {
      seen = 0;
      for (const auto& w : state->workers()) seen += w.draining() ? 0 : 1;
      if (seen == n && state->workers_size() == n) return absl::OkStatus();
    }
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(absl::StrCat("the dispatcher lists ", seen, " workers, not ", n, ", after ",
                                                      absl::FormatDuration(timeout), "; see ", options_.log_dir));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

absl::Status LocalDataService::WaitForJobsFinished(absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (true) {
    auto state = GetState();
    if (!state.ok()) return state.status();
    int64_t running = 0;
    for (const auto& j : state->jobs()) running += j.finished() ? 0 : 1;
    if (running == 0) break;
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(absl::StrCat(running, " jobs did not finish within ", absl::FormatDuration(timeout),
                                                      " (is the dispatcher's --job_gc_grace_ms small?)"));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  absl::SleepFor(absl::Milliseconds(2 * options_.heartbeat_interval_ms));
  return absl::OkStatus();
}

}  // namespace sluice::bench
