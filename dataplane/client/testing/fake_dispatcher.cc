#include "dataplane/client/testing/fake_dispatcher.h"

#include <algorithm>
#include <chrono>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "dataplane/pipeline/spec_parser.h"

namespace sluice::client::testing {
namespace {

// The first JobSpec field where `a` and `b` differ, or "" when they agree.
std::string DifferingField(const service::JobSpec& a, const service::JobSpec& b) {
  if (a.dataset_id() != b.dataset_id()) return absl::StrCat("dataset_id '", a.dataset_id(), "', request has '", b.dataset_id(), "'");
  if (a.sharding() != b.sharding()) {
    return absl::StrCat("sharding ", service::ShardingPolicy_Name(a.sharding()), ", request has ",
                        service::ShardingPolicy_Name(b.sharding()));
  }
  if (a.num_consumers() != b.num_consumers()) {
    return absl::StrCat("num_consumers ", a.num_consumers(), ", request has ", b.num_consumers());
  }
  if (a.num_epochs() != b.num_epochs()) return absl::StrCat("num_epochs ", a.num_epochs(), ", request has ", b.num_epochs());
  return "";
}

}  // namespace

void FakeDispatcher::SetTasks(std::vector<service::TaskInfo> tasks) {
  absl::MutexLock l(&mu_);
  tasks_ = std::move(tasks);
}
void FakeDispatcher::AddTask(service::TaskInfo task) {
  absl::MutexLock l(&mu_);
  tasks_.push_back(std::move(task));
}
void FakeDispatcher::RemoveTask(int64_t task_id) {
  absl::MutexLock l(&mu_);
  tasks_.erase(std::remove_if(tasks_.begin(), tasks_.end(), [&](const auto& t) { return t.task_id() == task_id; }),
               tasks_.end());
}
void FakeDispatcher::SetJobFinished(bool finished) {
  absl::MutexLock l(&mu_);
  job_finished_ = finished;
}
void FakeDispatcher::SetJobFinishedFunction(std::function<bool(int64_t)> fn) {
  absl::MutexLock l(&mu_);
  job_finished_fn_ = std::move(fn);
}
void FakeDispatcher::SetHeartbeatError(grpc::Status status) {
  absl::MutexLock l(&mu_);
  heartbeat_error_ = std::move(status);
}
void FakeDispatcher::SetJobCreatedHook(JobCreatedHook hook) {
  absl::MutexLock l(&mu_);
  job_created_ = std::move(hook);
}
void FakeDispatcher::SetIterationsOver(int64_t up_to) {
  absl::MutexLock l(&mu_);
  iterations_over_ = up_to;
}

void FakeDispatcher::KnowJobClient(int64_t job_client_id) {
  absl::MutexLock l(&mu_);
  job_clients_[job_client_id] = 1;
  next_job_client_id_ = std::max(next_job_client_id_, job_client_id + 1);
}

std::string FakeDispatcher::SetDefaultPipeline(const pipeline::PipelineDef& def) {
  const std::string id = pipeline::Fingerprint(def);
  absl::MutexLock l(&mu_);
  datasets_[id] = def;
  default_dataset_id_ = id;
  return id;
}

int64_t FakeDispatcher::heartbeats() const {
  absl::MutexLock l(&mu_);
  return heartbeats_;
}
service::ClientHeartbeatRequest FakeDispatcher::last_heartbeat() const {
  absl::MutexLock l(&mu_);
  return last_heartbeat_;
}
int64_t FakeDispatcher::max_reported_round() const {
  absl::MutexLock l(&mu_);
  return max_round_;
}
std::vector<service::GetOrCreateJobRequest> FakeDispatcher::job_requests() const {
  absl::MutexLock l(&mu_);
  return job_requests_;
}
std::vector<service::RegisterDatasetRequest> FakeDispatcher::register_requests() const {
  absl::MutexLock l(&mu_);
  return register_requests_;
}
std::vector<int64_t> FakeDispatcher::released() const {
  absl::MutexLock l(&mu_);
  return released_;
}

grpc::Status FakeDispatcher::RegisterDataset(grpc::ServerContext*, const service::RegisterDatasetRequest* req,
                                             service::RegisterDatasetResponse* resp) {
  pipeline::PipelineDef def = req->pipeline();
  if (auto s = pipeline::Canonicalize(def); !s.ok()) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, absl::StrCat("pipeline: ", s.message()));
  }
  const std::string id = pipeline::Fingerprint(def);
  absl::MutexLock l(&mu_);
  register_requests_.push_back(*req);
  datasets_[id] = def;
  resp->set_dataset_id(id);
  return grpc::Status::OK;
}

grpc::Status FakeDispatcher::GetOrCreateJob(grpc::ServerContext*, const service::GetOrCreateJobRequest* req,
                                            service::GetOrCreateJobResponse* resp) {
  JobCreatedHook hook;
  pipeline::PipelineDef def;
  int64_t created = 0;
  {
    absl::MutexLock l(&mu_);
    job_requests_.push_back(*req);
    service::JobSpec spec = req->spec();
    if (spec.dataset_id().empty()) {
      if (default_dataset_id_.empty()) {
        return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                            "dataset_id is empty and this dispatcher serves no default pipeline (start it with --pipeline)");
      }
      spec.set_dataset_id(default_dataset_id_);
    }
    auto ds = datasets_.find(spec.dataset_id());
    if (ds == datasets_.end()) {
      return grpc::Status(grpc::StatusCode::NOT_FOUND, absl::StrCat("dataset_id '", spec.dataset_id(), "' is not known"));
    }
    if (req->iteration() > 0 && req->iteration() <= iterations_over_) {
      resp->set_iteration(req->iteration());
      resp->set_dataset_id(spec.dataset_id());
      resp->set_job_finished(true);
      return grpc::Status::OK;
    }
    int64_t job_id;
    if (!spec.job_name().empty() && named_jobs_.count(spec.job_name())) {
      const Job& job = named_jobs_[spec.job_name()];
      if (std::string diff = DifferingField(job.spec, spec); !diff.empty()) {
        return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                            absl::StrCat("job '", spec.job_name(), "' exists with ", diff));
      }
      job_id = job.id;
    } else {
      job_id = next_job_id_++;
      if (!spec.job_name().empty()) named_jobs_[spec.job_name()] = Job{job_id, spec};
      created = job_id;
      hook = job_created_;
      def = ds->second;
    }
    const int64_t client_id = next_job_client_id_++;
    job_clients_[client_id] = job_id;
    resp->set_job_id(job_id);
    resp->set_job_client_id(client_id);
    resp->set_dataset_id(spec.dataset_id());
  }
  if (hook && created != 0) {
    service::JobSpec resolved = req->spec();
    resolved.set_dataset_id(resp->dataset_id());
    hook(created, resolved, def);
  }
  return grpc::Status::OK;
}

grpc::Status FakeDispatcher::ClientHeartbeat(grpc::ServerContext*, const service::ClientHeartbeatRequest* req,
                                             service::ClientHeartbeatResponse* resp) {
  std::function<bool(int64_t)> finished_fn;
  int64_t job_id = 0;
  {
    absl::MutexLock l(&mu_);
    if (!heartbeat_error_.ok()) return heartbeat_error_;
    auto it = job_clients_.find(req->job_client_id());
    if (it == job_clients_.end()) {
      return grpc::Status(grpc::StatusCode::NOT_FOUND, absl::StrCat("job_client_id ", req->job_client_id(), " is not known"));
    }
    job_id = it->second;
    resp->set_job_id(job_id);
    finished_fn = job_finished_fn_;
  }
  const bool fn_finished = finished_fn ? finished_fn(job_id) : false;
  absl::MutexLock l(&mu_);
  ++heartbeats_;
  last_heartbeat_ = *req;
  max_round_ = std::max(max_round_, req->current_round());
  for (const auto& t : tasks_) {
    if (t.job_id() == job_id) *resp->add_tasks() = t;
  }
  resp->set_job_finished(finished_fn ? fn_finished : job_finished_);
  return grpc::Status::OK;
}

grpc::Status FakeDispatcher::ReleaseJobClient(grpc::ServerContext*, const service::ReleaseJobClientRequest* req,
                                              service::ReleaseJobClientResponse*) {
  absl::MutexLock l(&mu_);
  if (!job_clients_.erase(req->job_client_id())) {
    return grpc::Status(grpc::StatusCode::NOT_FOUND, absl::StrCat("job_client_id ", req->job_client_id(), " is not known"));
  }
  released_.push_back(req->job_client_id());
  return grpc::Status::OK;
}

std::unique_ptr<TestServer> TestServer::Start(const std::vector<grpc::Service*>& services, int port) {
  auto server = std::unique_ptr<TestServer>(new TestServer());
  grpc::ServerBuilder builder;
  builder.AddListeningPort(absl::StrCat("127.0.0.1:", port), grpc::InsecureServerCredentials(), &server->port_);
  for (grpc::Service* s : services) builder.RegisterService(s);
  server->server_ = builder.BuildAndStart();
  if (!server->server_ || server->port_ == 0) return nullptr;
  return server;
}

void TestServer::Stop() {
  if (!server_) return;
  server_->Shutdown(std::chrono::system_clock::now() + std::chrono::milliseconds(200));
  server_->Wait();
  server_.reset();
}

bool WaitUntil(const std::function<bool()>& condition, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (!condition()) {
    if (absl::Now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

service::TaskInfo MakeTask(int64_t task_id, const std::string& worker_address, const std::string& worker_host,
                           int64_t starting_round) {
  service::TaskInfo t;
  t.set_task_id(task_id);
  t.set_job_id(1);
  t.set_worker_address(worker_address);
  t.set_worker_host(worker_host.empty() ? worker_address.substr(0, worker_address.rfind(':')) : worker_host);
  t.set_starting_round(starting_round);
  return t;
}

}  // namespace sluice::client::testing
