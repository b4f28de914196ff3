// sluice_fake_dataservice: a test-only stand-in for a dispatcher and its workers, for the Python
// client's tests (the real dispatcher and worker are tested against the client separately).
//
// It serves a FakeDispatcher and N FakeWorkers on free ports of 127.0.0.1 and prints one line
//   listening dispatcher=127.0.0.1:P workers=127.0.0.1:A,127.0.0.1:B
// When a job is created, every worker gets one task that runs the registered pipeline for real:
// SHARDING_OFF => the whole pipeline on every worker; DYNAMIC and FILE => worker i reads the splits
// with index % n == i; DATA => worker i keeps elements at position % n == i. num_epochs repeats the
// pass (-1 is treated as 1 here). The job finishes when every task has handed out its end.
// Coordinated jobs (num_consumers > 0) are answered without the pipeline: round r of consumer c
// yields {round, consumer, task, value = r * num_consumers + c} until --rounds, then the end.
//
// Commands on stdin, one per line: "state" prints a JSON line of what the clients sent (heartbeat
// metrics, job specs, releases, elements sent); "finish" declares the job finished; "quit" (or end
// of input) shuts everything down.
#include <atomic>
#include <iostream>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "dataplane/client/testing/fake_dispatcher.h"
#include "dataplane/client/testing/fake_worker.h"
#include "dataplane/pipeline/pipeline.h"

namespace sluice::client::testing {
namespace {

struct Options {
  int workers = 2;
  std::vector<std::string> worker_hosts;  // default: 127.0.0.1 for each
  int64_t rounds = 8;
  bool corrupt_first = false;  // worker 0 sends a malformed element before its data
};

absl::Status Usage(const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat(
      what, "\nusage: sluice_fake_dataservice [--workers N] [--worker_hosts h1,h2] [--rounds R] [--corrupt_first]"));
}

absl::StatusOr<Options> ParseArgs(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&]() -> absl::StatusOr<std::string> {
      if (i + 1 >= argc) return Usage(absl::StrCat(arg, " needs a value"));
      return std::string(argv[++i]);
    };
    if (arg == "--workers" || arg == "--rounds") {
      auto v = value();
      if (!v.ok()) return v.status();
      int64_t n = 0;
      if (!absl::SimpleAtoi(*v, &n) || n < 0) return Usage(absl::StrCat(arg, ": expected a count, got '", *v, "'"));
      if (arg == "--workers") {
        o.workers = static_cast<int>(n);
      } else {
        o.rounds = n;
      }
    } else if (arg == "--worker_hosts") {
      auto v = value();
      if (!v.ok()) return v.status();
      o.worker_hosts = absl::StrSplit(*v, ',');
    } else if (arg == "--corrupt_first") {
      o.corrupt_first = true;
    } else {
      return Usage(absl::StrCat("unknown argument '", arg, "'"));
    }
  }
  if (!o.worker_hosts.empty() && static_cast<int>(o.worker_hosts.size()) != o.workers) {
    return Usage("--worker_hosts must name one host per worker");
  }
  return o;
}

class FakeService {
 public:
  explicit FakeService(Options options) : options_(std::move(options)) {}

  absl::Status Start() {
    dispatcher_server_ = TestServer::Start({&dispatcher_});
    if (!dispatcher_server_) return absl::UnavailableError("cannot start the fake dispatcher");
    for (int i = 0; i < options_.workers; ++i) {
      workers_.push_back(std::make_unique<FakeWorker>());
      auto server = TestServer::Start({workers_.back().get()});
      if (!server) return absl::UnavailableError("cannot start a fake worker");
      worker_servers_.push_back(std::move(server));
    }
    dispatcher_.SetJobCreatedHook([this](int64_t job_id, const service::JobSpec& spec, const pipeline::PipelineDef& def) {
      OnJobCreated(job_id, spec, def);
    });
    dispatcher_.SetJobFinishedFunction([this](int64_t job_id) {
      absl::MutexLock l(&mu_);
      auto it = stream_tasks_.find(job_id);
      if (it == stream_tasks_.end()) return false;  // coordinated jobs end by end_of_sequence
      for (const auto& [w, task] : it->second) {
        if (!workers_[static_cast<size_t>(w)]->EndSent(task)) return false;
      }
      return true;
    });
    return absl::OkStatus();
  }

  std::string ListeningLine() const {
    std::vector<std::string> addrs;
    for (const auto& s : worker_servers_) addrs.push_back(s->address());
    return absl::StrCat("listening dispatcher=", dispatcher_server_->address(), " workers=", absl::StrJoin(addrs, ","));
  }

  nlohmann::json State() const {
    nlohmann::json j;
    j["heartbeats"] = dispatcher_.heartbeats();
    const auto hb = dispatcher_.last_heartbeat();
    j["metrics"] = {{"wait_seconds_total", hb.metrics().wait_seconds_total()},
                    {"step_seconds_total", hb.metrics().step_seconds_total()},
                    {"elements_total", hb.metrics().elements_total()},
                    {"bytes_total", hb.metrics().bytes_total()}};
    j["max_round"] = dispatcher_.max_reported_round();
    j["released"] = dispatcher_.released();
    nlohmann::json jobs = nlohmann::json::array();
    for (const auto& r : dispatcher_.job_requests()) {
      const auto& s = r.spec();
      jobs.push_back({{"job_name", s.job_name()},
                      {"dataset_id", s.dataset_id()},
                      {"sharding", service::ShardingPolicy_Name(s.sharding())},
                      {"num_consumers", s.num_consumers()},
                      {"cross_job_sharing", s.cross_job_sharing()},
                      {"num_epochs", s.num_epochs()},
                      {"compression", service::Compression_Name(s.compression())},
                      {"target_workers", service::TargetWorkers_Name(s.target_workers())},
                      {"client_host", r.client_host()},
                      {"iteration", r.iteration()}});
    }
    j["jobs"] = jobs;
    nlohmann::json sent = nlohmann::json::array();
    nlohmann::json codecs = nlohmann::json::object();
    for (const auto& w : workers_) {
      sent.push_back(w->elements_sent());
      for (const auto& [codec, n] : w->codecs_sent()) {
        const std::string name = service::Compression_Name(codec);
        codecs[name] = codecs.value(name, int64_t{0}) + n;
      }
    }
    j["elements_sent"] = sent;
    j["codecs"] = codecs;
    return j;
  }

  // Declares every job finished whatever its tasks did.
  void FinishJob() {
    dispatcher_.SetJobFinishedFunction(nullptr);
    dispatcher_.SetJobFinished(true);
  }

  void Stop() {
    for (auto& w : workers_) w->Shutdown();
    for (auto& s : worker_servers_) s->Stop();
    if (dispatcher_server_) dispatcher_server_->Stop();
    std::vector<std::thread> producers;
    {
      absl::MutexLock l(&mu_);
      producers.swap(producers_);
    }
    for (auto& t : producers) t.join();
  }

 private:
  void OnJobCreated(int64_t job_id, const service::JobSpec& spec, const pipeline::PipelineDef& def) {
    const int n = options_.workers;
    for (int i = 0; i < n; ++i) {
      const int64_t task_id = job_id * 100 + i;
      const std::string host = options_.worker_hosts.empty() ? "127.0.0.1" : options_.worker_hosts[static_cast<size_t>(i)];
      service::TaskInfo info = MakeTask(task_id, worker_servers_[static_cast<size_t>(i)]->address(), host);
      info.set_job_id(job_id);
      FakeWorker* worker = workers_[static_cast<size_t>(i)].get();
      if (spec.num_consumers() > 0) {
        const int64_t rounds = options_.rounds;
        const int64_t consumers = spec.num_consumers();
        worker->SetRoundFunction([rounds, consumers](int64_t task, int64_t round, int64_t consumer) {
          FakeWorker::RoundReply r;
          if (round >= rounds) {
            r.kind = FakeWorker::RoundReply::Kind::kEnd;
            return r;
          }
          r.element.Set("round", pipeline::Tensor::Scalar(round));
          r.element.Set("consumer", pipeline::Tensor::Scalar(consumer));
          r.element.Set("task", pipeline::Tensor::Scalar(task));
          r.element.Set("value", pipeline::Tensor::Scalar(round * consumers + consumer));
          return r;
        });
        dispatcher_.AddTask(info);
        continue;
      }
      worker->AddTask(task_id);
      if (options_.corrupt_first && i == 0) {
        service::ElementData bad;
        bad.set_data("definitely not an element");
        bad.set_uncompressed_size(bad.data().size());
        bad.set_compression(service::COMPRESSION_NONE);
        worker->PushRaw(task_id, bad);
      }
      dispatcher_.AddTask(info);
      absl::MutexLock l(&mu_);
      stream_tasks_[job_id].push_back({i, task_id});
      producers_.emplace_back([worker, task_id, spec, def, i, n] { Produce(worker, task_id, spec, def, i, n); });
    }
  }

  static void Produce(FakeWorker* worker, int64_t task_id, service::JobSpec spec, pipeline::PipelineDef def, int index,
                      int n) {
    auto fail = [&](const absl::Status& s) {
      worker->PushError(task_id, grpc::Status(grpc::StatusCode::INTERNAL, std::string(s.message())));
    };
    auto p = pipeline::Pipeline::Create(def);
    if (!p.ok()) return fail(p.status());
    const int64_t epochs = spec.num_epochs() > 0 ? spec.num_epochs() : 1;
    for (int64_t epoch = 0; epoch < epochs; ++epoch) {
      std::shared_ptr<pipeline::SplitProvider> splits;
      if (spec.sharding() == service::SHARDING_DYNAMIC || spec.sharding() == service::SHARDING_FILE) {
        auto list = (*p)->ListSplits();
        if (!list.ok()) return fail(list.status());
        splits = std::make_shared<pipeline::ListSplitProvider>(*std::move(list), n, index);
      }
      auto it = (*p)->MakeIterator(splits);
      if (!it.ok()) return fail(it.status());
      for (int64_t position = 0;; ++position) {
        auto next = (*it)->Next();
        if (!next.ok()) return fail(next.status());
        if (!next->has_value()) break;
        if (spec.sharding() == service::SHARDING_DATA && position % n != index) continue;
        worker->PushElement(task_id, std::move(**next));
      }
    }
    worker->PushEnd(task_id);
  }

  const Options options_;
  FakeDispatcher dispatcher_;
  std::unique_ptr<TestServer> dispatcher_server_;
  std::vector<std::unique_ptr<FakeWorker>> workers_;
  std::vector<std::unique_ptr<TestServer>> worker_servers_;
  mutable absl::Mutex mu_;
  std::map<int64_t, std::vector<std::pair<int, int64_t>>> stream_tasks_ ABSL_GUARDED_BY(mu_);  // job -> (worker, task)
  std::vector<std::thread> producers_ ABSL_GUARDED_BY(mu_);
};

int Main(int argc, char** argv) {
  auto options = ParseArgs(argc, argv);
  if (!options.ok()) {
    std::cerr << options.status().message() << std::endl;
    return 2;
  }
  FakeService service(*options);
  if (auto s = service.Start(); !s.ok()) {
    std::cerr << s.message() << std::endl;
    service.Stop();
    return 1;
  }
  std::cout << service.ListeningLine() << std::endl;
  std::string line;
  while (std::getline(std::cin, line)) {
    if (line == "quit") break;
    if (line == "state") {
      std::cout << service.State().dump() << std::endl;
    } else if (line == "finish") {
      service.FinishJob();
      std::cout << nlohmann::json{{"ok", true}}.dump() << std::endl;
    } else if (!line.empty()) {
      std::cout << nlohmann::json{{"error", "unknown command: " + line}}.dump() << std::endl;
    }
  }
  service.Stop();
  return 0;
}

}  // namespace
}  // namespace sluice::client::testing

int main(int argc, char** argv) { return sluice::client::testing::Main(argc, argv); }
