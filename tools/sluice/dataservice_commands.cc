#include "tools/sluice/dataservice_commands.h"

#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <memory>
#include <optional>
#include <set>
#include <thread>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "autoscaler/local/demo_workload.h"
#include "autoscaler/local/local_autoscaler.h"
#include "autoscaler/local/stepped_consumer.h"
#include "common/log.h"
#include "dataplane/client/data_service_client.h"
#include "dataplane/pipeline/spec_parser.h"
#include "dataplane/rpc/credentials.h"
#include "dataservice.grpc.pb.h"
#include "local/local_dataservice.h"
#include "tools/sluice/trainer_process.h"
#include "google/protobuf/util/json_util.h"

namespace sluice::cli {
namespace {

namespace fs = std::filesystem;

constexpr char kJobName[] = "sluice-up";

absl::StatusOr<service::ShardingPolicy> ParseSharding(const std::string& text) {
  const std::string t = absl::AsciiStrToLower(text);
  if (t == "off") return service::SHARDING_OFF;
  if (t == "dynamic") return service::SHARDING_DYNAMIC;
  if (t == "file") return service::SHARDING_FILE;
  if (t == "data") return service::SHARDING_DATA;
  return absl::InvalidArgumentError(absl::StrCat("--sharding: expected off, dynamic, file or data; got '", text, "'"));
}

// Takes SIGINT and SIGTERM for the lifetime of the object: blocks them in the calling thread (and
// so in every thread it starts afterwards) and receives them on a thread of its own with
// sigtimedwait. The previous signal mask is restored on destruction.
class SignalWatcher {
 public:
  SignalWatcher() {
    sigemptyset(&signals_);
    sigaddset(&signals_, SIGINT);
    sigaddset(&signals_, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &signals_, &previous_);
    thread_ = std::thread([this] { Loop(); });
  }
  ~SignalWatcher() {
    {
      absl::MutexLock lock(&mu_);
      stopping_ = true;
    }
    thread_.join();
    pthread_sigmask(SIG_SETMASK, &previous_, nullptr);
  }
  SignalWatcher(const SignalWatcher&) = delete;
  SignalWatcher& operator=(const SignalWatcher&) = delete;

  // Called (on the watcher's thread) when a signal arrives; also at once if one already came.
  void SetCallback(std::function<void()> callback) {
    absl::MutexLock lock(&mu_);
    callback_ = std::move(callback);
    if (signal_ != 0 && callback_) callback_();
  }
  int signal() const {
    absl::MutexLock lock(&mu_);
    return signal_;
  }
  // Waits until a signal came (true) or `timeout` passed (false).
  bool Wait(absl::Duration timeout) {
    absl::MutexLock lock(&mu_);
    auto came = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return signal_ != 0; };
    return mu_.AwaitWithTimeout(absl::Condition(&came), timeout);
  }

 private:
  void Loop() {
    const timespec poll{0, 100 * 1000 * 1000};
    while (true) {
      {
        absl::MutexLock lock(&mu_);
        if (stopping_) return;
      }
      const int s = sigtimedwait(&signals_, nullptr, &poll);
      if (s <= 0) continue;
      absl::MutexLock lock(&mu_);
      if (signal_ == 0) signal_ = s;
      if (callback_) callback_();
    }
  }

  sigset_t signals_;
  sigset_t previous_;
  mutable absl::Mutex mu_;
  int signal_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::function<void()> callback_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;
};

bool IsExecutable(const std::string& path) { return ::access(path.c_str(), X_OK) == 0; }

std::string MakeLogDir() {
  const char* tmp = std::getenv("TMPDIR");
  std::string pattern = absl::StrCat(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp", "/sluice-up-XXXXXX");
  if (::mkdtemp(pattern.data()) == nullptr) return "";
  return pattern;
}

double Ratio(double wait, double step) { return step > 0 ? wait / step : 0; }

}  // namespace

std::optional<std::string> FindProjectFile(const std::string& relative, const std::string& bin_dir) {
  std::error_code ec;
  for (const fs::path& candidate : {fs::path(relative), fs::path(bin_dir) / "../.." / relative,
                                    fs::path(bin_dir) / "../share/sluice" / relative}) {
    if (fs::exists(candidate, ec)) return candidate.lexically_normal().string();
  }
  return std::nullopt;
}

std::string DefaultPipelinePath(const std::string& bin_dir) {
  const std::string relative = "examples/pipelines/fashion_mnist.yaml";
  return FindProjectFile(relative, bin_dir).value_or(relative);
}

std::string FormatUpReport(const UpReport& r) {
  std::string out;
  const double mb = static_cast<double>(r.bytes) / 1e6;
  const double secs = std::max(r.seconds, 1e-9);
  absl::StrAppend(&out, absl::StrFormat("read %d elements (%.1f MB) in %.2f s: %.1f elements/s, %.1f MB/s%s\n",
                                        r.elements, mb, r.seconds, static_cast<double>(r.elements) / secs, mb / secs,
                                        r.interrupted ? " (interrupted)" : (r.finished ? "" : " (stopped early)")));
  absl::StrAppend(&out, absl::StrFormat("stall ratio %.3f (the client waited %.2f s of %.2f s of steps)\n",
                                        Ratio(r.wait_seconds, r.step_seconds), r.wait_seconds, r.step_seconds));
  if (r.splits_total > 0) {
    absl::StrAppend(&out, absl::StrFormat("splits handed out %d of %d\n", r.splits_served, r.splits_total));
  }
  int64_t produced = 0;
  for (const auto& [address, n] : r.worker_elements) {
    absl::StrAppend(&out, absl::StrFormat("worker %-21s produced %d elements\n", address, n));
    produced += n;
  }
  if (!r.worker_elements.empty()) {
    absl::StrAppend(&out, absl::StrFormat("workers produced %d elements in all\n", produced));
  }
  return out;
}

std::string FormatDispatcherState(const service::GetStateResponse& state) {
  std::string out = absl::StrFormat("workers: %d\n", state.workers_size());
  if (state.workers_size() > 0) {
    absl::StrAppend(&out, absl::StrFormat("  %-22s %-16s %-9s %-10s %-6s %s\n", "ADDRESS", "HOST", "PLACEMENT",
                                          "HEARTBEAT", "TASKS", "DRAINING"));
  }
  for (const auto& w : state.workers()) {
    const std::string placement = w.placement() == service::PLACEMENT_LOCAL    ? "local"
                                  : w.placement() == service::PLACEMENT_REMOTE ? "remote"
                                                                               : "-";
    absl::StrAppend(&out, absl::StrFormat("  %-22s %-16s %-9s %-10s %-6d %s\n", w.address(), w.host(), placement,
                                          absl::StrCat(w.last_heartbeat_ms_ago(), " ms ago"), w.task_ids_size(),
                                          w.draining() ? "yes" : "no"));
  }
  absl::StrAppend(&out, absl::StrFormat("jobs: %d\n", state.jobs_size()));
  if (state.jobs_size() > 0) {
    absl::StrAppend(&out, absl::StrFormat("  %-5s %-16s %-5s %-8s %-8s %-8s %-12s %-10s %s\n", "ID", "NAME", "ITER",
                                          "SHARDING", "CLIENTS", "FINISHED", "SPLITS", "ELEMENTS", "STALL"));
  }
  for (const auto& j : state.jobs()) {
    std::string sharding = service::ShardingPolicy_Name(j.spec().sharding());
    if (absl::StartsWith(sharding, "SHARDING_")) sharding = absl::AsciiStrToLower(sharding.substr(9));
    const std::string splits = j.splits_total() > 0 ? absl::StrCat(j.splits_served(), "/", j.splits_total()) : "-";
    absl::StrAppend(&out, absl::StrFormat("  %-5d %-16s %-5d %-8s %-8d %-8s %-12s %-10d %.3f\n", j.job_id(),
                                          j.spec().job_name().empty() ? "(anonymous)" : j.spec().job_name(),
                                          std::max<int64_t>(1, j.iteration()), sharding,
                                          j.num_clients(), j.finished() ? "yes" : "no", splits,
                                          j.metrics().elements_total(),
                                          Ratio(j.metrics().wait_seconds_total(), j.metrics().step_seconds_total())));
  }
  if (!state.default_dataset_id().empty()) {
    absl::StrAppend(&out, "default pipeline: dataset ", state.default_dataset_id(), " (jobs without a dataset_id read it)\n");
  }
  return out;
}

int RunDispatcherState(const std::string& address, bool json, const rpc::TlsOptions& tls, std::ostream& out,
                       std::ostream& err) {
  auto channel = rpc::MakeChannel(address, tls);
  if (!channel.ok()) {
    err << "sluice dispatcher-state: " << channel.status().message() << "\n";
    return 1;
  }
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
  service::GetStateResponse state;
  const grpc::Status status = service::Dispatcher::NewStub(*channel)->GetState(&ctx, service::GetStateRequest(), &state);
  if (!status.ok()) {
    err << "sluice dispatcher-state: GetState from " << address << " failed: " << status.error_message() << "\n";
    return 1;
  }
  if (json) {
    std::string text;
    google::protobuf::util::JsonPrintOptions options;
    options.add_whitespace = true;
    options.preserve_proto_field_names = true;
    (void)google::protobuf::util::MessageToJsonString(state, &text, options);
    out << text;
  } else {
    out << FormatDispatcherState(state);
  }
  return 0;
}

namespace {

int RunUpStatic(const UpOptions& options, std::ostream& out, std::ostream& err) {
  auto fail = [&](const std::string& message) {
    err << "sluice up: " << message << "\n";
    return 1;
  };
  const int workers = options.workers == 0 ? 2 : options.workers;
  if (workers < 1) return fail("--workers must be at least 1");
  auto sharding = ParseSharding(options.sharding);
  if (!sharding.ok()) return fail(std::string(sharding.status().message()));
  const std::string bin_dir = options.bin_dir.empty() ? local::ExecutableDir() : options.bin_dir;
  for (const char* binary : {"sluice-dispatcher", "sluice-worker"}) {
    const std::string path = absl::StrCat(bin_dir, "/", binary);
    if (!IsExecutable(path)) {
      return fail(absl::StrCat(path, " is missing: build it (ninja ", binary, ") next to the sluice binary"));
    }
  }
  const std::string pipeline_path = options.pipeline.empty() ? DefaultPipelinePath(bin_dir) : options.pipeline;
  auto def = pipeline::ParsePipelineSpecFile(pipeline_path);
  if (!def.ok()) return fail(std::string(def.status().message()));
  const std::string log_dir = options.log_dir.empty() ? MakeLogDir() : options.log_dir;
  std::error_code ec;
  if (log_dir.empty() || (!fs::is_directory(log_dir, ec) && !fs::create_directories(log_dir, ec))) {
    return fail(absl::StrCat("cannot create the log directory '", log_dir, "'"));
  }

  log::SetComponent("sluice-up");
  log::SetMinLevel(log::Level::kWarning);  // the consumer's informational lines would mix with the report
  SignalWatcher signals;  // from here on Ctrl-C tears everything down cleanly
  local::LocalDataServiceOptions service_options;
  service_options.bin_dir = bin_dir;
  service_options.log_dir = log_dir;
  service_options.dataservice = "local";
  service_options.worker_flags = {"--placement=local"};
  service_options.heartbeat_interval_ms = 200;  // a prompt end of the job on a small local run
  local::LocalDataService service(service_options);
  int rc = 0;
  auto stop = [&]() {
    if (absl::Status s = service.StopGracefully(absl::Seconds(5)); !s.ok()) {
      err << "sluice up: shutdown: " << s.message() << " (logs in " << log_dir << ")\n";
      if (rc == 0) rc = 1;
    }
    return rc;
  };

  if (absl::Status s = service.StartDispatcher(); !s.ok()) {
    rc = fail(absl::StrCat("the dispatcher did not start (logs in ", log_dir, "): ", s.message()));
    return stop();
  }
  out << "dispatcher  " << service.dispatcher_address() << "  (metrics http://127.0.0.1:"
      << service.dispatcher().metrics_port << "/metrics, pid " << service.dispatcher().process->pid() << ")\n";
  for (int i = 0; i < workers && signals.signal() == 0; ++i) {
    auto added = service.AddWorker();
    if (!added.ok()) {
      rc = fail(absl::StrCat("worker ", i, " did not start (logs in ", log_dir, "): ", added.status().message()));
      return stop();
    }
    const local::ServiceProcess& w = service.worker(*added);
    out << "worker      " << w.address << "  (metrics http://127.0.0.1:" << w.metrics_port << "/metrics, pid "
        << w.process->pid() << ")\n";
  }
  if (signals.signal() == 0) {
    if (absl::Status s = service.WaitForWorkers(workers, absl::Seconds(60)); !s.ok()) {
      rc = fail(absl::StrCat(s.message(), " (logs in ", log_dir, ")"));
      return stop();
    }
  }
  out << "logs        " << log_dir << "\n" << std::flush;

  UpReport report;
  if (options.take != 0 && signals.signal() == 0) {
    client::DataServiceClientOptions co;
    co.dispatcher_address = service.dispatcher_address();
    co.pipeline = *def;
    co.job_name = kJobName;
    co.sharding = *sharding;
    co.heartbeat_interval = absl::Milliseconds(200);
    auto created = client::DataServiceClient::Create(co);
    if (!created.ok()) {
      rc = fail(absl::StrCat("the consumer could not start: ", created.status().message()));
      return stop();
    }
    std::unique_ptr<client::DataServiceClient> consumer = *std::move(created);
    signals.SetCallback([c = consumer.get()] { c->Cancel(); });
    out << "reading     " << pipeline_path << " (sharding " << absl::AsciiStrToLower(options.sharding)
        << ", job '" << kJobName << "')\n"
        << std::flush;

    const bool tty = ::isatty(STDERR_FILENO) == 1;
    const absl::Duration interval =
        absl::Seconds(options.progress_interval_seconds) * (tty ? 1 : 4);  // fewer lines into a log
    const absl::Time start = absl::Now();
    absl::Time last_progress = start;
    absl::Time last_element = start;
    auto progress = [&](bool final) {
      if (!options.progress) return;
      const client::ClientStats s = consumer->stats();
      const double secs = std::max(absl::ToDoubleSeconds(absl::Now() - start), 1e-9);
      err << (tty ? "\r" : "")
          << absl::StrFormat("progress: %d elements  %.1f elem/s  %.1f MB/s  stall %.3f  %.1fs", s.elements_total,
                             static_cast<double>(s.elements_total) / secs,
                             static_cast<double>(s.bytes_total) / 1e6 / secs,
                             Ratio(s.wait_seconds_total, s.step_seconds_total), secs)
          << (tty && !final ? "" : "\n") << std::flush;
    };
    while (true) {
      if (signals.signal() != 0) break;
      if (options.take > 0 && report.elements >= options.take) break;
      if (options.seconds > 0 && absl::Now() - start >= absl::Seconds(options.seconds)) break;
      auto next = consumer->GetNext(absl::Milliseconds(200));
      if (absl::Now() - last_progress >= interval) {
        progress(false);
        last_progress = absl::Now();
      }
      if (!next.ok()) {
        if (absl::IsDeadlineExceeded(next.status())) continue;
        if (signals.signal() != 0) break;
        rc = fail(absl::StrCat("reading failed: ", next.status().message(), " (logs in ", log_dir, ")"));
        break;
      }
      if (!next->has_value()) {
        report.finished = true;
        break;
      }
      ++report.elements;
      last_element = absl::Now();
      if (options.step_ms > 0) {  // a stand-in training step (-1: none)
        client::StepScope step(*consumer);
        absl::SleepFor(absl::Milliseconds(options.step_ms));
      }
    }
    // Throughput up to the last element (noticing the end of the job takes a heartbeat or two).
    report.seconds = absl::ToDoubleSeconds((report.finished ? last_element : absl::Now()) - start);
    report.interrupted = signals.signal() != 0;
    progress(true);
    const client::ClientStats stats = consumer->stats();
    report.bytes = stats.bytes_total;
    report.wait_seconds = stats.wait_seconds_total;
    report.step_seconds = stats.step_seconds_total;
    signals.SetCallback(nullptr);
    consumer.reset();  // releases the job client
  }
  for (int i = 0; i < service.num_workers(); ++i) {
    auto samples = service.ScrapeWorker(i);
    report.worker_elements.emplace_back(
        service.worker(i).address,
        samples.ok() ? static_cast<int64_t>(local::SumSamples(*samples, "sluice_worker_elements_produced_total")) : -1);
  }
  if (auto state = service.GetState(); state.ok()) {
    for (const auto& job : state->jobs()) {
      if (job.spec().job_name() == kJobName) {
        report.splits_served = job.splits_served();
        report.splits_total = job.splits_total();
      }
    }
  }
  if (options.take != 0) out << FormatUpReport(report) << std::flush;

  if (options.keep_running && signals.signal() == 0) {
    out << "serving     dispatcher at " << service.dispatcher_address() << " with " << service.num_workers()
        << " workers; Ctrl-C stops it. Try:\n"
        << "            sluice dispatcher-state " << service.dispatcher_address() << "\n"
        << std::flush;
    while (!signals.Wait(absl::Milliseconds(500))) {
      for (int i = 0; i < service.num_workers(); ++i) {
        if (service.worker(i).process->Exited()) {
          rc = fail(absl::StrCat(service.worker(i).name, " exited (logs in ", log_dir, ")"));
          break;
        }
      }
      if (service.dispatcher().process->Exited()) rc = fail(absl::StrCat("the dispatcher exited (logs in ", log_dir, ")"));
      if (rc != 0) break;
    }
  }
  out << "stopping    dispatcher and " << service.num_workers() << " workers\n" << std::flush;
  stop();
  if (rc == 0 && report.interrupted) rc = 130;
  return rc;
}

}  // namespace

std::string FormatAutoscaledUpReport(const AutoscaledUpReport& r, double target_stall) {
  std::string out;
  const double secs = std::max(r.seconds, 1e-9);
  absl::StrAppend(&out, absl::StrFormat("read %d elements in %.1f s: %.1f elements/s%s\n", r.elements, r.seconds,
                                        static_cast<double>(r.elements) / secs, r.interrupted ? " (interrupted)" : ""));
  absl::StrAppend(&out, absl::StrFormat("decisions %d: %d scale-ups, %d scale-downs, %d held on missing data\n",
                                        r.decisions, r.scale_ups, r.scale_downs, r.holds_on_missing_data));
  absl::StrAppend(&out, absl::StrFormat("workers: started with 1, peak %d, now %d; %.1f worker-seconds\n",
                                        r.peak_workers, r.final_workers, r.worker_seconds));
  auto stall = [](double v) { return v < 0 ? std::string("unknown") : absl::StrFormat("%.3f", v); };
  absl::StrAppend(&out, absl::StrFormat("stall (target %.3f): %s at the peak's end, %s after the drop\n", target_stall,
                                        stall(r.high_stall), stall(r.low_stall)));
  if (r.decisions_to_no_stall >= 0) {
    absl::StrAppend(&out, absl::StrFormat("decisions from the stall's onset to a stall under target: %d\n",
                                          r.decisions_to_no_stall));
  } else {
    absl::StrAppend(&out, "decisions from the stall's onset to a stall under target: not reached\n");
  }
  absl::StrAppend(&out, absl::StrFormat("scale-downs on missing data: %d\n", r.scale_downs_on_missing_data));
  absl::StrAppend(&out, absl::StrFormat("elements lost on scale-down: %d\n", r.elements_lost));
  return out;
}

namespace {

// One line of the live view for a decision, with the consumer's throughput and stall over the period.
std::string LiveLine(const autoscaler::LocalDecision& d, double t, double throughput, double stall) {
  const autoscaler::Decision& x = d.decision;
  std::string line = absl::StrFormat("%6.1fs  workers %d  %7.1f elem/s  stall %5.3f  ", t, d.workers_after, throughput,
                                     stall);
  std::vector<std::string> reasons;
  for (const auto& n : x.reasons) reasons.push_back(autoscaler::ReasonName(n.reason));
  if (x.direction == autoscaler::Direction::kUp || x.direction == autoscaler::Direction::kDown) {
    absl::StrAppend(&line, x.direction == autoscaler::Direction::kUp ? "+ " : "- ", d.workers_before, " -> ",
                    d.workers_after, " workers: ");
    for (size_t i = 0; i < x.reasons.size(); ++i) {
      absl::StrAppend(&line, i == 0 ? "" : "; ", autoscaler::ReasonName(x.reasons[i].reason), ": ",
                      x.reasons[i].message);
    }
    const autoscaler::Arithmetic& a = x.arithmetic;
    if (a.needed_exact && a.capacity_per_worker && a.true_demand) {
      absl::StrAppend(&line, absl::StrFormat(" (wants %.0f elem/s, %.0f per worker: %.2f workers)", *a.true_demand,
                                             *a.capacity_per_worker, *a.needed_exact));
    }
  } else {
    absl::StrAppend(&line, absl::StrJoin(reasons, ", "));
    if (x.holding || !d.source_errors.empty()) {
      absl::StrAppend(&line, ": ", x.reasons.empty() ? "" : x.reasons.front().message);
    }
  }
  // Removals (also those of an earlier decision whose drain finished only now).
  if (!d.removed.empty()) {
    absl::StrAppend(&line, "; drained and stopped ", absl::StrJoin(d.removed, ", "), ", ", d.elements_lost,
                    " elements lost");
  }
  if (!d.action_error.empty()) absl::StrAppend(&line, " [", d.action_error, "]");
  return line;
}

int RunUpAutoscaled(const UpOptions& options, std::ostream& out, std::ostream& err) {
  auto fail = [&](const std::string& message) {
    err << "sluice up: " << message << "\n";
    return 1;
  };
  const int initial = options.workers == 0 ? 1 : options.workers;
  if (initial < 1) return fail("--workers must be at least 1");
  if (options.max_workers < initial) return fail("--max-workers must be at least --workers");
  if (options.cpus_per_worker < 0 || options.cpus_per_worker > 64) return fail("--cpus-per-worker must be in [0, 64]");
  if (options.target_stall <= 0 || options.target_stall >= 1) return fail("--target-stall must be in (0, 1)");
  if (options.period_seconds < 0.2 || options.window_seconds < 2 * options.period_seconds) {
    return fail("--period must be at least 0.2 s and --window at least two periods");
  }
  auto sharding = ParseSharding(options.sharding);
  if (!sharding.ok()) return fail(std::string(sharding.status().message()));
  const std::string bin_dir = options.bin_dir.empty() ? local::ExecutableDir() : options.bin_dir;
  for (const char* binary : {"sluice-dispatcher", "sluice-worker"}) {
    const std::string path = absl::StrCat(bin_dir, "/", binary);
    if (!IsExecutable(path)) {
      return fail(absl::StrCat(path, " is missing: build it (ninja ", binary, ") next to the sluice binary"));
    }
  }
  autoscaler::DemoWorkload workload;
  workload.image_size = options.image_size;
  const bool with_trainer = !options.trainer.empty();
  std::string trainer_script;
  std::string pipeline_path = options.pipeline;
  if (with_trainer) {
    absl::StatusOr<std::string> script = tools::TrainerScriptPath(options.trainer, bin_dir);
    if (!script.ok()) return fail(std::string(script.status().message()));
    trainer_script = *script;
    if (options.train_seconds <= 0 || options.eval_seconds < 0) {
      return fail("--train-seconds must be > 0 and --eval-seconds >= 0");
    }
    if (pipeline_path.empty()) {
      pipeline_path = (fs::path(trainer_script).parent_path() / "../pipelines/fashion_mnist_augmented.yaml")
                          .lexically_normal()
                          .string();
    }
  }
  absl::StatusOr<pipeline::PipelineDef> def =
      pipeline_path.empty() ? autoscaler::DemoPipeline(workload) : pipeline::ParsePipelineSpecFile(pipeline_path);
  if (!def.ok()) return fail(std::string(def.status().message()));
  const std::string log_dir = options.log_dir.empty() ? MakeLogDir() : options.log_dir;
  std::error_code ec;
  if (log_dir.empty() || (!fs::is_directory(log_dir, ec) && !fs::create_directories(log_dir, ec))) {
    return fail(absl::StrCat("cannot create the log directory '", log_dir, "'"));
  }
  const double high_step_ms = options.step_ms < 0 ? 4 : options.step_ms;

  log::SetComponent("sluice-up");
  log::SetMinLevel(log::Level::kWarning);
  SignalWatcher signals;
  local::LocalDataServiceOptions service_options;
  service_options.bin_dir = bin_dir;
  service_options.log_dir = log_dir;
  service_options.dataservice = "local";
  service_options.worker_flags = autoscaler::DemoWorkerFlags();
  service_options.worker_flags.push_back("--placement=local");
  service_options.stop_timeout = absl::Seconds(autoscaler::kDemoWorkerStopSeconds);
  service_options.heartbeat_interval_ms = 200;
  service_options.worker_cpus = options.cpus_per_worker;
  service_options.cpu_quota_group = absl::StrCat("sluice-up-", ::getpid());
  // The trainer leaves its job when its training ends: the job then ends 5 s later rather than
  // after the default 5 minutes, and with it what its workers still buffer (nobody will read it),
  // so that the workers removed during the eval phase drain at once.
  if (with_trainer) service_options.dispatcher_flags.push_back("--job_gc_grace_ms=5000");
  local::LocalDataService service(service_options);
  int rc = 0;
  auto stop = [&]() {
    if (absl::Status s = service.StopGracefully(absl::Seconds(5)); !s.ok()) {
      err << "sluice up: shutdown: " << s.message() << " (logs in " << log_dir << ")\n";
      if (rc == 0) rc = 1;
    }
    return rc;
  };
  if (absl::Status s = service.StartDispatcher(); !s.ok()) {
    rc = fail(absl::StrCat("the dispatcher did not start (logs in ", log_dir, "): ", s.message()));
    return stop();
  }
  out << "dispatcher  " << service.dispatcher_address() << "  (metrics http://127.0.0.1:"
      << service.dispatcher().metrics_port << "/metrics, pid " << service.dispatcher().process->pid() << ")\n";
  std::set<std::string> shown;
  auto show_new_workers = [&]() {
    for (const local::WorkerStatus& w : service.ListWorkers()) {
      if (shown.insert(w.name).second) {
        out << "worker      " << w.name << " " << w.address << "  (metrics http://127.0.0.1:" << w.metrics_port
            << "/metrics, pid " << w.pid << ")\n";
      }
    }
  };
  if (auto added = service.AddWorkers(initial); !added.ok()) {
    rc = fail(absl::StrCat("the first worker did not start (logs in ", log_dir, "): ", added.status().message()));
    return stop();
  }
  show_new_workers();
  if (absl::Status s = service.WaitForWorkers(initial, absl::Seconds(60)); !s.ok()) {
    rc = fail(absl::StrCat(s.message(), " (logs in ", log_dir, ")"));
    return stop();
  }
  if (const local::CpuQuota* quota = service.cpu_quota()) {
    out << "cpu quota   " << quota->Describe() << "\n";
    for (const std::string& note : quota->notes()) out << "            (" << note << ")\n";
  }
  std::ofstream decision_log(absl::StrCat(log_dir, "/autoscaler.log"), std::ios::app);
  absl::Mutex log_mu;

  autoscaler::LocalAutoscalerOptions ao;
  ao.period = absl::Seconds(options.period_seconds);
  ao.window = absl::Seconds(options.window_seconds);
  ao.recent_window = std::max(absl::Seconds(3), 3 * ao.period);
  ao.prometheus_url = options.prometheus_url;
  ao.prometheus.namespace_label = "";
  ao.policy.target_stall_ratio = options.target_stall;
  ao.policy.min_replicas = 1;
  ao.policy.max_replicas = options.max_workers;
  ao.policy.scale_down.stabilization_window = absl::Seconds(options.scale_down_window_seconds);
  ao.policy.settle_time = ao.period;
  ao.policy.max_signal_age = 5 * ao.period;
  ao.log_sink = [&](const std::string& line) {
    absl::MutexLock lock(&log_mu);
    decision_log << line << "\n" << std::flush;
  };
  // The reader: the simulated consumer (a C++ client stepping at a set compute time per element),
  // or a real trainer process (its train phase is the peak, its eval phase the drop).
  absl::StatusOr<std::unique_ptr<autoscaler::SteppedConsumer>> consumer = std::unique_ptr<autoscaler::SteppedConsumer>();
  std::unique_ptr<tools::TrainerProcess> trainer;
  if (with_trainer) {
    tools::TrainerOptions to;
    to.name = options.trainer;
    to.script = trainer_script;
    to.python_path = (fs::path(bin_dir) / "../python").lexically_normal().string();
    to.dispatcher = service.dispatcher_address();
    to.pipeline = pipeline_path;
    to.job_name = kJobName;
    to.train_seconds = options.train_seconds;
    to.eval_seconds = options.eval_seconds;
    to.log_dir = log_dir;
    auto started = tools::TrainerProcess::Start(to);
    if (!started.ok()) {
      rc = fail(absl::StrCat("the trainer could not start: ", started.status().message()));
      return stop();
    }
    trainer = *std::move(started);
    signals.SetCallback([t = trainer.get()] { t->Stop(); });
  } else {
    autoscaler::SteppedConsumerOptions co;
    co.client.dispatcher_address = service.dispatcher_address();
    co.client.pipeline = *def;
    co.client.job_name = kJobName;
    co.client.sharding = *sharding;
    co.client.heartbeat_interval = absl::Milliseconds(200);
    co.client.max_buffered_bytes = autoscaler::kDemoClientBufferBytes;
    co.step_time = absl::Milliseconds(high_step_ms);
    consumer = autoscaler::SteppedConsumer::Start(co);
    if (!consumer.ok()) {
      rc = fail(absl::StrCat("the consumer could not start: ", consumer.status().message()));
      return stop();
    }
    signals.SetCallback([c = consumer->get()] { c->Stop(); });
  }
  // The reader's counters now (the trainer's from its newest progress line).
  tools::TrainerProgress last_progress;
  auto reader_stats = [&]() {
    client::ClientStats s;
    if (trainer == nullptr) return (*consumer)->stats();
    if (std::optional<tools::TrainerProgress> p = trainer->Latest()) last_progress = *p;
    s.elements_total = last_progress.elements;
    s.wait_seconds_total = last_progress.wait_seconds;
    s.step_seconds_total = last_progress.step_seconds;
    return s;
  };
  auto reader_done = [&]() {
    if (trainer != nullptr) return trainer->Exited();
    return (*consumer)->finished() || !(*consumer)->status().ok();
  };
  out << "logs        " << log_dir << "  (decisions: " << log_dir << "/autoscaler.log"
      << (trainer ? absl::StrCat(", trainer: ", trainer->log_file()) : std::string()) << ")\n";
  out << "reading     "
      << (pipeline_path.empty() ? std::string("the demo workload (synthetic images, resized)") : pipeline_path)
      << ", job '" << kJobName << "'; the autoscaler decides every " << options.period_seconds
      << " s (target stall " << options.target_stall << ", " << options.window_seconds << " s window, "
      << (options.prometheus_url.empty() ? std::string("direct scrape") : "Prometheus " + options.prometheus_url)
      << ")\n";
  if (trainer) {
    out << absl::StrFormat("== train: %s (%s) for %.0f s, from %d worker%s\n", options.trainer, trainer_script,
                           options.train_seconds, initial, initial == 1 ? "" : "s")
        << std::flush;
  } else {
    out << absl::StrFormat("== demand up: %.1f ms of compute per element (%.0f elements/s wanted), from %d worker%s\n",
                           high_step_ms, high_step_ms > 0 ? 1000 / high_step_ms : 0.0, initial,
                           initial == 1 ? "" : "s")
        << std::flush;
  }

  autoscaler::LocalAutoscaler scaler(&service, ao);
  scaler.Start();
  AutoscaledUpReport report;
  const absl::Time start = absl::Now();
  int64_t shown_decisions = 0;
  client::ClientStats prev_stats = reader_stats();
  absl::Time prev_at = start;
  enum class Phase { kHigh, kLow, kDone } phase = Phase::kHigh;
  absl::Time phase_start = start;
  int64_t phase_first_decision = 1;
  int good_in_a_row = 0;  // decisions with the stall under target (high phase) / settled (low phase)
  int64_t stall_onset = -1;
  std::vector<double> phase_stalls;
  while (phase != Phase::kDone) {
    if (signals.Wait(absl::Milliseconds(100))) break;
    if (reader_done()) break;
    if (options.seconds > 0 && absl::Now() - start >= absl::Seconds(options.seconds)) break;
    std::vector<autoscaler::LocalDecision> ds = scaler.decisions();
    for (const autoscaler::LocalDecision& d : ds) {
      if (d.number <= shown_decisions) continue;
      shown_decisions = d.number;
      const client::ClientStats now_stats = reader_stats();
      const absl::Time now = absl::Now();
      const double dt = std::max(absl::ToDoubleSeconds(now - prev_at), 1e-3);
      const double throughput = static_cast<double>(now_stats.elements_total - prev_stats.elements_total) / dt;
      const double step = now_stats.step_seconds_total - prev_stats.step_seconds_total;
      const double stall = step > 0 ? (now_stats.wait_seconds_total - prev_stats.wait_seconds_total) / step : 0;
      prev_stats = now_stats;
      prev_at = now;
      show_new_workers();
      out << LiveLine(d, absl::ToDoubleSeconds(now - start), throughput, stall) << "\n" << std::flush;
      report.peak_workers = std::max(report.peak_workers, d.workers_after);
      const bool under = stall <= options.target_stall;
      if (d.number < phase_first_decision) continue;
      phase_stalls.push_back(stall);
      if (phase == Phase::kHigh) {
        // From the stall's onset (the first decision that saw the trainer stall above target).
        if (!under && stall_onset < 0) stall_onset = d.number;
        if (under && stall_onset >= 0 && report.decisions_to_no_stall < 0) {
          report.decisions_to_no_stall = d.number - stall_onset;
        }
        good_in_a_row = under && d.signals.stall_ratio.known() && d.decision.direction == autoscaler::Direction::kNone
                            ? good_in_a_row + 1
                            : 0;
      } else {
        const auto& x = d.decision;
        // Settled also means no removal still draining (it is reported by a later decision).
        const bool waiting = x.Has(autoscaler::Reason::kScaleDownStabilized) ||
                             x.Has(autoscaler::Reason::kHeldUntilSettled) || x.holding ||
                             x.direction != autoscaler::Direction::kNone || !d.still_draining.empty();
        const bool window_after_drop =
            absl::Seconds(options.period_seconds) * static_cast<double>(d.number - phase_first_decision) >
            absl::Seconds(options.window_seconds + options.scale_down_window_seconds);
        good_in_a_row = !waiting && window_after_drop ? good_in_a_row + 1 : 0;
      }
    }
    // The trainer's own phases end its peak and its drop; the simulated consumer's end once the
    // decisions settled (or at the phase limit).
    bool phase_over = false;
    if (trainer != nullptr) {
      reader_stats();  // refreshes last_progress
      phase_over = phase == Phase::kHigh && !last_progress.phase.empty() && last_progress.phase != "train";
    } else {
      phase_over = good_in_a_row >= 3 || absl::Now() - phase_start >= absl::Seconds(options.phase_limit_seconds);
    }
    if (!phase_over) continue;
    auto tail_stall = [&phase_stalls]() {
      if (phase_stalls.empty()) return -1.0;
      const size_t n = std::min<size_t>(3, phase_stalls.size());
      double sum = 0;
      for (size_t i = phase_stalls.size() - n; i < phase_stalls.size(); ++i) sum += phase_stalls[i];
      return sum / static_cast<double>(n);
    };
    if (phase == Phase::kHigh) {
      report.high_stall = tail_stall();
      phase = Phase::kLow;
      if (trainer) {
        out << "== eval: the trainer evaluates on the test set and reads nothing (demand 0)\n" << std::flush;
      } else {
        (*consumer)->set_step_time(absl::Milliseconds(options.low_step_ms));
        out << absl::StrFormat("== demand drop: %.1f ms of compute per element (%.0f elements/s wanted)\n",
                               options.low_step_ms, options.low_step_ms > 0 ? 1000 / options.low_step_ms : 0.0)
            << std::flush;
      }
    } else {
      report.low_stall = tail_stall();
      phase = Phase::kDone;
    }
    phase_start = absl::Now();
    phase_first_decision = shown_decisions + 1;
    good_in_a_row = 0;
    phase_stalls.clear();
  }
  report.interrupted = signals.signal() != 0;
  if (trainer != nullptr && phase == Phase::kLow) report.low_stall = -1;  // the trainer reads nothing then
  scaler.Stop();
  const client::ClientStats final_stats = reader_stats();
  std::optional<tools::TrainerResult> trainer_result;
  absl::Status consumer_status;
  if (trainer != nullptr) {
    if (!trainer->Exited()) trainer->Stop();
    absl::StatusOr<tools::TrainerResult> result = trainer->Result();
    if (result.ok()) {
      trainer_result = *result;
    } else {
      consumer_status = result.status();
    }
  } else {
    consumer_status = (*consumer)->status();
    (*consumer)->Stop();
  }
  signals.SetCallback(nullptr);
  if (consumer.ok()) consumer->reset();
  if (!consumer_status.ok() && !report.interrupted) {
    rc = fail(absl::StrCat("reading failed: ", consumer_status.message(), " (logs in ", log_dir, ")"));
  }
  const autoscaler::LocalAutoscalerStats st = scaler.stats();
  report.elements = final_stats.elements_total;
  report.seconds = absl::ToDoubleSeconds(absl::Now() - start);
  report.decisions = st.decisions;
  report.scale_ups = st.scale_ups;
  report.scale_downs = st.scale_downs;
  report.holds_on_missing_data = st.holds_on_missing_data;
  report.scale_downs_on_missing_data = st.scale_downs_on_missing_data;
  report.elements_lost = st.elements_lost;
  report.final_workers = st.workers;
  report.worker_seconds = st.worker_seconds;
  out << "== summary\n" << FormatAutoscaledUpReport(report, options.target_stall);
  if (trainer_result) {
    out << absl::StrFormat("trainer: %d batches in %.1f s of training, stall %.3f, final loss %.3f, test accuracy %s\n",
                           trainer_result->elements, trainer_result->train_seconds, trainer_result->stall,
                           trainer_result->final_loss,
                           trainer_result->test_accuracy < 0 ? std::string("not measured")
                                                             : absl::StrFormat("%.3f", trainer_result->test_accuracy));
  }
  out << "stopping    dispatcher and " << st.workers << " workers\n" << std::flush;
  stop();
  if (rc == 0 && report.interrupted) rc = 130;
  return rc;
}

}  // namespace

int RunUp(const UpOptions& options, std::ostream& out, std::ostream& err) {
  return options.autoscale ? RunUpAutoscaled(options, out, err) : RunUpStatic(options, out, err);
}

void AddDataServiceCommands(CLI::App& app, int& rc) {
  auto up_options = std::make_shared<UpOptions>();
  auto* up = app.add_subcommand(
      "up", "Run the data service locally, autoscaled: a dispatcher, one worker, the local autoscaler and a consumer "
            "whose demand rises then falls (--no-autoscale: N fixed workers)");
  auto no_autoscale = std::make_shared<bool>(false);
  up->add_flag("--no-autoscale", *no_autoscale, "a fixed number of workers (--workers, default 2), no autoscaler");
  up->add_option("--workers", up_options->workers,
                 "worker processes (with --no-autoscale; default 2), or to start with (autoscaled; default 1)")
      ->check(CLI::Range(1, 64));
  up->add_option("--max-workers", up_options->max_workers, "autoscaled: most workers (default 6)")
      ->check(CLI::Range(1, 64));
  up->add_option("--cpus-per-worker", up_options->cpus_per_worker,
                 "autoscaled: each worker's CPU quota, in CPUs (default 0.25; 0: none)")
      ->check(CLI::Range(0.0, 64.0));
  up->add_option("--low-step-ms", up_options->low_step_ms,
                 "autoscaled: compute per element after the demand drop, in ms (default 40)")
      ->check(CLI::NonNegativeNumber);
  up->add_option("--target-stall", up_options->target_stall, "autoscaled: the stall ratio to stay under (default 0.1)");
  up->add_option("--period", up_options->period_seconds, "autoscaled: seconds between decisions (default 1)");
  up->add_option("--window", up_options->window_seconds, "autoscaled: seconds of the rate window (default 8)");
  up->add_option("--scale-down-window", up_options->scale_down_window_seconds,
                 "autoscaled: seconds of the scale-down stabilization window (default 8)")
      ->check(CLI::NonNegativeNumber);
  up->add_option("--phase-limit", up_options->phase_limit_seconds,
                 "autoscaled: each demand phase ends after at most this many seconds (default 120)")
      ->check(CLI::PositiveNumber);
  up->add_option("--image-size", up_options->image_size,
                 "autoscaled: the demo workload's image side (its CPU per element; default 768)")
      ->check(CLI::Range(32, 2048));
  up->add_option("--prometheus-url", up_options->prometheus_url,
                 "autoscaled: read the signals from this Prometheus instead of scraping the processes");
  up->add_option("--trainer", up_options->trainer,
                 "autoscaled: a real trainer instead of the simulated consumer: fashion-mnist-cnn (a small PyTorch CNN "
                 "through the Python client; its train phase is the peak, its eval phase the drop)");
  up->add_option("--train-seconds", up_options->train_seconds, "with --trainer: seconds of training (default 60)")
      ->check(CLI::PositiveNumber);
  up->add_option("--eval-seconds", up_options->eval_seconds,
                 "with --trainer: seconds of evaluation, nothing read (default 45)")
      ->check(CLI::NonNegativeNumber);
  up->add_option("--pipeline", up_options->pipeline,
                 "pipeline spec to read (default: examples/pipelines/fashion_mnist.yaml)");
  up->add_option("--sharding", up_options->sharding, "off | dynamic | file | data");
  up->add_option("--take", up_options->take,
                 "static mode (implies --no-autoscale): stop reading after N elements (0: start the service only)");
  up->add_option("--seconds", up_options->seconds, "stop reading after S seconds")->check(CLI::NonNegativeNumber);
  up->add_option("--step-ms", up_options->step_ms,
                 "simulated training step per element, in ms (autoscaled: the demand peak, default 4; static: 0)")
      ->check(CLI::NonNegativeNumber);
  up->add_flag("--keep-running", up_options->keep_running,
               "static mode (implies --no-autoscale): after reading, keep serving until Ctrl-C (other consumers "
               "can use the printed address)");
  up->add_option("--log-dir", up_options->log_dir, "where the processes' logs go (default: a new temp directory)");
  up->add_option("--bin-dir", up_options->bin_dir, "where sluice-dispatcher and sluice-worker are (default: next to sluice)");
  auto quiet = std::make_shared<bool>(false);
  up->add_flag("--quiet", *quiet, "no progress line");
  up->callback([up_options, quiet, no_autoscale, &rc] {
    up_options->progress = !*quiet;
    // Reading a number of elements, or serving other consumers, is the static mode's.
    up_options->autoscale = !*no_autoscale && up_options->take == -1 && !up_options->keep_running;
    rc = RunUp(*up_options, std::cout, std::cerr);
  });

  auto address = std::make_shared<std::string>();
  auto json = std::make_shared<bool>(false);
  auto* state = app.add_subcommand("dispatcher-state", "Print a dispatcher's workers and jobs (GetState)");
  state->add_option("address", *address, "the dispatcher's host:port")->required();
  state->add_flag("--json", *json, "print the GetState answer as JSON");
  auto tls = std::make_shared<rpc::TlsOptions>();
  state->add_option("--tls_ca", tls->ca_file, "PEM CA to verify the dispatcher with (TLS)");
  state->add_option("--tls_cert", tls->cert_file, "PEM client certificate (mutual TLS)");
  state->add_option("--tls_key", tls->key_file, "PEM private key for --tls_cert");
  state->add_option("--tls_server_name", tls->server_name_override, "expected name in the dispatcher's certificate");
  state->callback([address, json, tls, &rc] { rc = RunDispatcherState(*address, *json, *tls, std::cout, std::cerr); });
}

}  // namespace sluice::cli
