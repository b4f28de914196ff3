#include "dataplane/worker/task_runner.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/log.h"
#include "dataplane/pipeline/plugin.h"
#include "dataplane/pipeline/spec_parser.h"
#include "dataplane/worker/encoded_cache.h"
#include "dataplane/worker/response_encoder.h"

namespace sluice::worker {
namespace {

constexpr size_t kMaxRememberedRounds = 4096;

std::string TaskName(const service::TaskDef& task) { return absl::StrCat("task_id ", task.task_id()); }

absl::Status Annotate(const absl::Status& status, const service::TaskDef& task, absl::string_view what) {
  return absl::Status(status.code(), absl::StrCat(TaskName(task), ": ", what, ": ", status.message()));
}

absl::Status ValidateTask(const service::TaskDef& task) {
  const std::string name = TaskName(task);
  if (!service::ShardingPolicy_IsValid(task.sharding())) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": sharding: unknown value ", task.sharding()));
  }
  if (task.sharding() == service::SHARDING_FILE || task.sharding() == service::SHARDING_DATA) {
    if (task.num_workers() < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat(name, ": num_workers must be >= 1 for static sharding, got ", task.num_workers()));
    }
    if (task.worker_index() < 0 || task.worker_index() >= task.num_workers()) {
      return absl::InvalidArgumentError(absl::StrCat(name, ": worker_index ", task.worker_index(),
                                                     " is out of range [0, num_workers ", task.num_workers(), ")"));
    }
  }
  if (task.num_consumers() < 0) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": num_consumers must be >= 0, got ", task.num_consumers()));
  }
  if (task.num_epochs() < -1) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, ": num_epochs must be -1 (forever), 0 (default: 1) or positive, got ", task.num_epochs()));
  }
  if (task.cross_job_sharing() && task.sharding() != service::SHARDING_OFF) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": cross_job_sharing needs sharding SHARDING_OFF, task has ",
                                                   service::ShardingPolicy_Name(task.sharding())));
  }
  if (!service::Compression_IsValid(task.compression())) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": compression: unknown value ", task.compression()));
  }
  return absl::OkStatus();
}

int64_t NumEpochs(const service::TaskDef& task) { return task.num_epochs() == 0 ? 1 : task.num_epochs(); }

// Runs the task's own pipeline, epoch after epoch.
class PipelineProducer : public ElementProducer {
 public:
  // `cached_passes`: set when `pipeline` is the head of an EncodedCachePlan (the passes over its
  // cached elements per epoch); nullopt to run `pipeline` as it is.
  PipelineProducer(const service::TaskDef& task, const TaskRunnerEnv& env, std::unique_ptr<pipeline::Pipeline> pipeline,
                   std::vector<pipeline::Split> all_splits, std::optional<int64_t> cached_passes)
      : task_(task),
        metrics_(env.metrics),
        pipeline_(std::move(pipeline)),
        all_splits_(std::move(all_splits)),
        num_epochs_(NumEpochs(task)) {
    if (cached_passes.has_value()) {
      cache_ = std::make_unique<Cache>();
      cache_->passes = *cached_passes;
    }
    if (task.sharding() == service::SHARDING_DYNAMIC) {
      dynamic_ = std::make_shared<DispatcherSplitProvider>(env.dispatcher, task.task_id(), env.worker_address,
                                                           env.options.splits);
    }
  }
  ~PipelineProducer() override {
    Cancel();
    iterator_.reset();
  }

  absl::StatusOr<std::optional<EncodedElementPtr>> Next() override {
    while (true) {
      if (cancel_.cancelled()) return absl::CancelledError(absl::StrCat(TaskName(task_), ": cancelled"));
      if (!in_epoch_) {
        if (num_epochs_ >= 0 && epoch_ >= num_epochs_) return std::optional<EncodedElementPtr>();
        if (epoch_ > 0 && dynamic_ != nullptr) {
          if (auto s = dynamic_->Reset(); !s.ok()) return s;
        }
        if (auto s = StartEpoch(); !s.ok()) return s;
        in_epoch_ = true;
        produced_in_epoch_ = 0;
        epoch_start_ = absl::Now();
        if (metrics_ != nullptr) metrics_->AddPipelineRun();
      }
      auto next = NextInEpoch();
      if (!next.ok()) {
        if (cancel_.cancelled()) return absl::CancelledError(absl::StrCat(TaskName(task_), ": cancelled"));
        return next.status();
      }
      if (next->has_value()) {
        ++produced_in_epoch_;
        if (metrics_ != nullptr) metrics_->AddProduced(1, static_cast<int64_t>((**next)->size()));
        return next;
      }
      in_epoch_ = false;
      if (dynamic_ != nullptr) LogDynamicEpoch();
      ++epoch_;
      // Input handed back (a drained worker): what was read is produced, no further epoch here.
      if (dynamic_ != nullptr && dynamic_->releasing()) return std::optional<EncodedElementPtr>();
      if (produced_in_epoch_ > 0) {
        empty_epoch_backoff_ = absl::Milliseconds(10);
        continue;
      }
      // An epoch without elements. Static input would be empty forever: stop. Under dynamic sharding
      // other workers may have read every split; with endless epochs, pace the next attempt.
      if (dynamic_ == nullptr) return std::optional<EncodedElementPtr>();
      if (num_epochs_ < 0) {
        if (cancel_.WaitFor(empty_epoch_backoff_)) continue;
        empty_epoch_backoff_ = std::min(empty_epoch_backoff_ * 2, absl::Seconds(1));
      }
    }
  }

  void Cancel() override {
    cancel_.Cancel();
    if (dynamic_ != nullptr) dynamic_->Cancel();
  }

  std::vector<uint64_t> TakeUnreportedStarts() override {
    return dynamic_ != nullptr ? dynamic_->TakeUnreportedStarts() : std::vector<uint64_t>();
  }
  void ReleaseInput() override {
    if (dynamic_ != nullptr) dynamic_->RequestRelease();
  }
  bool Releasing() const override { return dynamic_ != nullptr && dynamic_->releasing(); }
  void RestoreUnreportedStarts(const std::vector<uint64_t>& indices) override {
    if (dynamic_ != nullptr) dynamic_->RestoreUnreportedStarts(indices);
  }

 private:
  // The elements of the encoded cache (encoded_cache.h): filled by the first pass of the first epoch
  // that reads the head pipeline, then handed out `passes` times per epoch.
  struct Cache {
    int64_t passes = 1;
    std::vector<EncodedElementPtr> elements;
    uint64_t bytes = 0;
    bool complete = false;
  };

  absl::Status StartEpoch() {
    pass_ = 0;
    replay_index_ = 0;
    // A complete cache replays without reading input, as the pipeline's cache does; no passes at
    // all read nothing either.
    if (cache_ != nullptr && (cache_->complete || cache_->passes == 0)) return absl::OkStatus();
    auto iterator = pipeline_->MakeIterator(SplitsForEpoch());
    if (!iterator.ok()) return Annotate(iterator.status(), task_, "pipeline");
    iterator_ = *std::move(iterator);
    return absl::OkStatus();
  }

  // The epoch's next element; nullopt at its end.
  absl::StatusOr<std::optional<EncodedElementPtr>> NextInEpoch() {
    if (iterator_ != nullptr) {
      auto next = iterator_->Next();
      if (!next.ok()) return Annotate(next.status(), task_, "pipeline");
      if (next->has_value()) {
        auto encoded = encoder_.Encode(**next, task_.compression());
        if (!encoded.ok()) return Annotate(encoded.status(), task_, "encoding an element");
        if (cache_ != nullptr) {
          cache_->elements.push_back(*encoded);
          cache_->bytes += (*encoded)->size();
        }
        return std::optional<EncodedElementPtr>(*std::move(encoded));
      }
      iterator_.reset();
      if (cache_ == nullptr) return std::optional<EncodedElementPtr>();
      cache_->complete = true;
      pass_ = 1;  // the pass that filled it
      SLUICE_LOG(Info, "task cache kept encoded")
          .With("task_id", task_.task_id())
          .With("elements", static_cast<int64_t>(cache_->elements.size()))
          .With("bytes", static_cast<int64_t>(cache_->bytes))
          .With("passes", cache_->passes);
    }
    if (cache_ == nullptr || !cache_->complete) return std::optional<EncodedElementPtr>();
    const std::vector<EncodedElementPtr>& elements = cache_->elements;
    if (elements.empty()) return std::optional<EncodedElementPtr>();  // an empty pass ends the repeats
    if (replay_index_ == elements.size()) {
      ++pass_;
      replay_index_ = 0;
    }
    if (cache_->passes >= 0 && pass_ >= cache_->passes) return std::optional<EncodedElementPtr>();
    return std::optional<EncodedElementPtr>(elements[replay_index_++]);
  }

  // One line per epoch under dynamic sharding: how long it took and where the split provider's
  // reader waited (what `sluice bench sharding` reads to explain DYNAMIC vs OFF).
  void LogDynamicEpoch() {
    const SplitProviderStats now = dynamic_->stats();
    SLUICE_LOG(Info, "dynamic sharding epoch done")
        .With("task_id", task_.task_id())
        .With("epoch", epoch_)
        .With("elements", produced_in_epoch_)
        .With("seconds", absl::ToDoubleSeconds(absl::Now() - epoch_start_))
        .With("splits", now.splits_started - last_stats_.splits_started)
        .With("rpcs", now.rpcs - last_stats_.rpcs)
        .With("rpc_seconds", now.rpc_seconds - last_stats_.rpc_seconds)
        .With("wait_first_split_seconds", now.wait_first_split_seconds - last_stats_.wait_first_split_seconds)
        .With("wait_split_seconds", now.wait_split_seconds - last_stats_.wait_split_seconds)
        .With("wait_end_seconds", now.wait_end_seconds - last_stats_.wait_end_seconds)
        .With("wait_ack_seconds", now.wait_ack_seconds - last_stats_.wait_ack_seconds)
        .With("wait_lease_seconds", now.wait_lease_seconds - last_stats_.wait_lease_seconds)
        .With("wait_epoch_end_seconds", now.wait_epoch_end_seconds - last_stats_.wait_epoch_end_seconds);
    last_stats_ = now;
  }

  std::shared_ptr<pipeline::SplitProvider> SplitsForEpoch() {
    switch (task_.sharding()) {
      case service::SHARDING_DYNAMIC: return dynamic_;
      case service::SHARDING_FILE:
        return std::make_shared<pipeline::ListSplitProvider>(all_splits_, task_.num_workers(), task_.worker_index());
      default: return nullptr;  // all of the source's splits
    }
  }

  const service::TaskDef task_;
  WorkerMetrics* const metrics_;
  std::unique_ptr<pipeline::Pipeline> pipeline_;
  const std::vector<pipeline::Split> all_splits_;
  const int64_t num_epochs_;
  std::shared_ptr<DispatcherSplitProvider> dynamic_;
  CancelToken cancel_;
  std::unique_ptr<pipeline::PipelineIterator> iterator_;
  std::unique_ptr<Cache> cache_;  // set when the task's cached tail is served encoded
  bool in_epoch_ = false;
  int64_t pass_ = 0;              // the encoded cache's pass within the epoch
  size_t replay_index_ = 0;       // and its next element
  int64_t epoch_ = 0;
  int64_t produced_in_epoch_ = 0;
  absl::Time epoch_start_;
  SplitProviderStats last_stats_;
  absl::Duration empty_epoch_backoff_ = absl::Milliseconds(10);
  WireEncoder encoder_;
};

// Reads the shared run of the task's dataset, one run per epoch.
class SharedProducer : public ElementProducer {
 public:
  SharedProducer(const service::TaskDef& task, std::string dataset_id, pipeline::PipelineDef def,
                 SharedPipelineRegistry* registry)
      : task_(task), dataset_id_(std::move(dataset_id)), def_(std::move(def)), registry_(registry),
        num_epochs_(NumEpochs(task)) {}
  ~SharedProducer() override { Leave(); }

  absl::StatusOr<std::optional<EncodedElementPtr>> Next() override {
    while (true) {
      if (cancel_.cancelled()) return absl::CancelledError(absl::StrCat(TaskName(task_), ": cancelled"));
      if (!membership_) {
        if (num_epochs_ >= 0 && epoch_ >= num_epochs_) return std::optional<EncodedElementPtr>();
        auto membership = registry_->Join(dataset_id_, def_);
        if (!membership.ok()) return Annotate(membership.status(), task_, "shared pipeline");
        membership_ = *std::move(membership);
        produced_in_epoch_ = 0;
      }
      auto next = membership_->run->Next(membership_->reader, &cancel_);
      if (!next.ok()) return Annotate(next.status(), task_, "shared pipeline");
      if (next->has_value()) {
        ++produced_in_epoch_;
        return next;
      }
      Leave();
      ++epoch_;
      if (produced_in_epoch_ == 0) return std::optional<EncodedElementPtr>();
    }
  }

  void Cancel() override { cancel_.Cancel(); }

 private:
  void Leave() {
    if (membership_) membership_->run->RemoveReader(membership_->reader);
    membership_.reset();
  }

  const service::TaskDef task_;
  const std::string dataset_id_;
  const pipeline::PipelineDef def_;
  SharedPipelineRegistry* const registry_;
  const int64_t num_epochs_;
  CancelToken cancel_;
  std::optional<SharedPipelineRegistry::Membership> membership_;
  int64_t epoch_ = 0;
  int64_t produced_in_epoch_ = 0;
};

// A task that could not be set up: every reader gets the reason.
class FailedTaskRunner : public TaskRunner {
 public:
  FailedTaskRunner(service::TaskDef def, absl::Status status) : TaskRunner(std::move(def)), status_(std::move(status)) {}
  absl::StatusOr<ElementBuffer::Batch> GetNextBatch(size_t, size_t, CancelToken*) override { return status_; }
  absl::StatusOr<RoundElement> GetRoundElement(int64_t, int64_t, bool, CancelToken*) override { return status_; }
  void BeginDrain() override {}
  void Stop(absl::Status) override {}
  TaskProgressSnapshot Progress() const override { return TaskProgressSnapshot{true, 0, 0}; }

 private:
  const absl::Status status_;
};

}  // namespace

absl::StatusOr<pipeline::PipelineDef> TaskPipelineDef(const service::TaskDef& task) {
  pipeline::PipelineDef def = task.pipeline();
  if (task.sharding() == service::SHARDING_DATA && task.num_workers() > 1) {
    pipeline::StepDef* shard = def.add_steps();
    shard->set_kind("shard");
    auto add_int = [&](const char* name, int64_t value) {
      pipeline::NamedValue* entry = shard->mutable_args()->add_entries();
      entry->set_name(name);
      entry->mutable_value()->set_int_value(value);
    };
    add_int("num_shards", task.num_workers());
    add_int("index", task.worker_index());
  }
  if (auto s = pipeline::Canonicalize(def); !s.ok()) return Annotate(s, task, "pipeline");
  return def;
}

absl::StatusOr<std::unique_ptr<ElementProducer>> MakeElementProducer(const service::TaskDef& task,
                                                                     const TaskRunnerEnv& env) {
  if (auto s = ValidateTask(task); !s.ok()) return s;
  if (task.pipeline().plugins_size() > 0) {
    // Checked before the pipeline is canonicalized (which loads the plugins).
    auto dirs = pipeline::ResolvePluginDirs(env.options.plugin_dirs, "--plugin_dir");
    if (!dirs.ok()) return Annotate(absl::FailedPreconditionError(dirs.status().message()), task, "pipeline");
    if (auto s = pipeline::CheckPipelinePlugins(task.pipeline(), *dirs, "--plugin_dir"); !s.ok()) {
      return Annotate(s, task, "pipeline");
    }
  }
  auto def = TaskPipelineDef(task);
  if (!def.ok()) return def.status();
  if (task.cross_job_sharing() && env.sharing != nullptr) {
    std::string dataset_id = task.dataset_id().empty() ? pipeline::Fingerprint(*def) : task.dataset_id();
    return std::unique_ptr<ElementProducer>(new SharedProducer(task, std::move(dataset_id), *std::move(def), env.sharing));
  }
  if (task.sharding() == service::SHARDING_DYNAMIC && env.dispatcher == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(TaskName(task), ": dynamic sharding needs a dispatcher"));
  }
  // A cached tail is served from encoded elements: only the steps before the cache run here.
  std::optional<EncodedCachePlan> cached = PlanEncodedCache(*def, task.sharding());
  std::optional<int64_t> cached_passes;
  if (cached.has_value()) {
    cached_passes = cached->passes;
    *def = std::move(cached->head);
  }
  auto pipeline = pipeline::Pipeline::Create(*std::move(def), env.options.runtime);
  if (!pipeline.ok()) return Annotate(pipeline.status(), task, "pipeline");
  std::vector<pipeline::Split> splits;
  if (task.sharding() == service::SHARDING_FILE) {
    auto listed = (*pipeline)->ListSplits();
    if (!listed.ok()) return Annotate(listed.status(), task, "listing splits");
    splits = *std::move(listed);
  }
  return std::unique_ptr<ElementProducer>(new PipelineProducer(task, env, *std::move(pipeline), std::move(splits), cached_passes));
}

std::unique_ptr<TaskRunner> CreateTaskRunner(const service::TaskDef& task, const TaskRunnerEnv& env) {
  auto producer = MakeElementProducer(task, env);
  if (!producer.ok()) {
    SLUICE_LOG(Error, "task cannot run").With("task_id", task.task_id()).With("error", producer.status().ToString());
    return std::make_unique<FailedTaskRunner>(task, producer.status());
  }
  if (task.num_consumers() > 0) return std::make_unique<RoundRobinTaskRunner>(task, *std::move(producer), env.options);
  return std::make_unique<StreamingTaskRunner>(task, *std::move(producer), env.options);
}

// ---------------------------------------------------------------- StreamingTaskRunner

StreamingTaskRunner::StreamingTaskRunner(service::TaskDef def, std::unique_ptr<ElementProducer> producer,
                                         const TaskRunnerOptions& options)
    : TaskRunner(std::move(def)),
      producer_(std::move(producer)),
      buffer_(options.buffer_elements, options.buffer_bytes, options.buffer_min_bytes),
      max_undelivered_(options.max_undelivered_elements) {
  thread_ = std::thread([this] { ProduceLoop(); });
}

StreamingTaskRunner::~StreamingTaskRunner() {
  Stop(absl::NotFoundError(absl::StrCat("task_id ", task_id(), " was deleted")));
  thread_.join();
}

void StreamingTaskRunner::Stop(absl::Status reason) {
  stopped_ = true;
  buffer_.Abort(std::move(reason));
  stop_.Cancel();
  producer_->Cancel();
}

void StreamingTaskRunner::SetDelivered(int64_t elements) {
  absl::MutexLock lock(&delivery_mu_);
  delivered_ = std::max(delivered_, elements);
}

bool StreamingTaskRunner::WaitForDeliveryRoom() {
  if (max_undelivered_ <= 0) return true;
  {
    absl::MutexLock lock(&delivery_mu_);
    if (produced_.load() - delivered_ < max_undelivered_) return true;
  }
  // Registered before taking delivery_mu_ (lock order: the token's mutex, then ours).
  CancelCallback wake(&stop_, [this] {
    absl::MutexLock lock(&delivery_mu_);
    delivery_wait_stopped_ = true;
  });
  absl::MutexLock lock(&delivery_mu_);
  auto room = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(delivery_mu_) {
    return delivery_wait_stopped_ || produced_.load() - delivered_ < max_undelivered_;
  };
  delivery_mu_.Await(absl::Condition(&room));
  return !delivery_wait_stopped_;
}

void StreamingTaskRunner::ProduceLoop() {
  while (true) {
    if (!WaitForDeliveryRoom()) return;  // stopped or draining: the buffer is closed already
    auto next = producer_->Next();
    if (!next.ok()) {
      if (!absl::IsCancelled(next.status()) || !stop_.cancelled()) {
        SLUICE_LOG(Error, "task failed").With("task_id", task_id()).With("error", next.status().ToString());
      }
      buffer_.Close(next.status());
      return;
    }
    if (!next->has_value()) {
      buffer_.Close(absl::OkStatus());
      return;
    }
    if (!buffer_.Push(**std::move(next), &stop_)) return;
    ++produced_;
  }
}

absl::StatusOr<ElementBuffer::Batch> StreamingTaskRunner::GetNextBatch(size_t max_elements, size_t max_bytes,
                                                                       CancelToken* cancel) {
  return buffer_.Pop(max_elements, max_bytes, cancel);
}

absl::StatusOr<RoundElement> StreamingTaskRunner::GetRoundElement(int64_t, int64_t, bool, CancelToken*) {
  return absl::FailedPreconditionError(absl::StrCat("task_id ", task_id(),
                                                    " is not a coordinated-read task (num_consumers 0): use GetElements"));
}

bool StreamingTaskRunner::HandBackDone() const {
  if (!producer_->Releasing() || stopped_.load()) return true;
  return buffer_.closed() && buffer_.size() == 0;
}

void StreamingTaskRunner::BeginDrain() {
  draining_ = true;
  buffer_.Close(absl::UnavailableError(
      absl::StrCat("the worker is shutting down; task_id ", task_id(), " produces no more elements here")));
  stop_.Cancel();
  producer_->Cancel();
}

TaskProgressSnapshot StreamingTaskRunner::Progress() const {
  TaskProgressSnapshot out;
  out.elements_produced = produced_.load();
  out.buffered_elements = static_cast<int64_t>(buffer_.size());
  out.finished = !draining_.load() && !stopped_.load() && buffer_.closed() && out.buffered_elements == 0;
  return out;
}

// ---------------------------------------------------------------- RoundRobinTaskRunner

RoundRobinTaskRunner::RoundRobinTaskRunner(service::TaskDef def, std::unique_ptr<ElementProducer> producer,
                                           const TaskRunnerOptions& options)
    : TaskRunner(std::move(def)),
      producer_(std::move(producer)),
      num_consumers_(def_.num_consumers()),
      starting_round_(def_.starting_round()),
      round_timeout_(options.round_timeout),
      max_prepared_rounds_(std::max<size_t>(1, options.buffer_elements / static_cast<size_t>(std::max<int64_t>(1, def_.num_consumers())))) {
  thread_ = std::thread([this] { ProduceLoop(); });
}

RoundRobinTaskRunner::~RoundRobinTaskRunner() {
  Stop(absl::NotFoundError(absl::StrCat("task_id ", task_id(), " was deleted")));
  thread_.join();
}

void RoundRobinTaskRunner::Stop(absl::Status reason) {
  {
    absl::MutexLock lock(&mu_);
    if (!aborted_) {
      const bool finished = done_ && status_.ok() && prepared_.empty() && current_round_ < 0;
      aborted_ = true;
      stopped_ = true;
      done_ = true;
      if (!finished) status_ = std::move(reason);  // a finished task's readers still see the end
      prepared_.clear();
      current_.clear();
      current_round_ = -1;
      ++version_;
    }
  }
  producer_->Cancel();
}

void RoundRobinTaskRunner::ProduceLoop() {
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      auto room = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stopped_ || prepared_.size() < max_prepared_rounds_; };
      mu_.Await(absl::Condition(&room));
      if (stopped_) return;
    }
    std::vector<EncodedElementPtr> round;
    round.reserve(static_cast<size_t>(num_consumers_));
    while (static_cast<int64_t>(round.size()) < num_consumers_) {
      auto next = producer_->Next();
      absl::MutexLock lock(&mu_);
      if (stopped_) return;
      if (!next.ok() || !next->has_value()) {
        if (!round.empty()) {
          SLUICE_LOG(Info, "dropping a partial last round").With("task_id", task_id())
              .With("elements", static_cast<int64_t>(round.size())).With("num_consumers", num_consumers_);
        }
        done_ = true;
        if (!next.ok()) status_ = next.status();
        ++version_;
        return;
      }
      round.push_back(**std::move(next));
    }
    absl::MutexLock lock(&mu_);
    prepared_.push_back(std::move(round));
    produced_ += num_consumers_;
    ++version_;
  }
}

void RoundRobinTaskRunner::BindRound(int64_t round) {
  current_round_ = round;
  current_ = std::move(prepared_.front());
  prepared_.pop_front();
  taken_.assign(static_cast<size_t>(num_consumers_), false);
  taken_count_ = 0;
  ++version_;
}

void RoundRobinTaskRunner::CompleteRound() {
  last_completed_round_ = current_round_;
  current_round_ = -1;
  current_.clear();
  round_deadlines_.erase(round_deadlines_.begin(), round_deadlines_.upper_bound(last_completed_round_));
  ++version_;
}

void RoundRobinTaskRunner::SkipRound(int64_t round) {
  skipped_.insert(round);
  while (skipped_.size() > kMaxRememberedRounds) skipped_.erase(skipped_.begin());
  round_deadlines_.erase(round);
  ++version_;
}

absl::StatusOr<RoundElement> RoundRobinTaskRunner::GetRoundElement(int64_t round, int64_t consumer_index,
                                                                   bool allow_skip, CancelToken* cancel) {
  if (consumer_index < 0 || consumer_index >= num_consumers_) {
    return absl::InvalidArgumentError(absl::StrCat("consumer_index ", consumer_index, " is out of range: task_id ",
                                                   task_id(), " has num_consumers ", num_consumers_));
  }
  if (round < 0) return absl::InvalidArgumentError(absl::StrCat("round must be >= 0, got ", round));
  if (round < starting_round_) {
    return absl::FailedPreconditionError(absl::StrCat("round ", round, " is before task_id ", task_id(),
                                                      "'s starting_round ", starting_round_,
                                                      "; an earlier worker serves it"));
  }
  CancelCallback wake(cancel, [this] { absl::MutexLock lock(&mu_); });
  absl::MutexLock lock(&mu_);
  std::optional<absl::Time> deadline;
  if (allow_skip) {
    if (round_deadlines_.size() >= kMaxRememberedRounds) round_deadlines_.erase(round_deadlines_.begin());
    deadline = round_deadlines_.emplace(round, absl::Now() + round_timeout_).first->second;  // shared by all consumers
  }
  while (true) {
    if (skipped_.count(round) > 0) return RoundElement{nullptr, true, false};
    if (current_round_ == round) {
      const size_t c = static_cast<size_t>(consumer_index);
      RoundElement out{current_[c], false, false};
      if (!taken_[c]) {
        taken_[c] = true;
        if (++taken_count_ == num_consumers_) CompleteRound();
      }
      return out;
    }
    if (round <= last_completed_round_ || (current_round_ >= 0 && round < current_round_)) {
      return absl::FailedPreconditionError(absl::StrCat(
          "round ", round, " of task_id ", task_id(), " was already served (the task is at round ",
          std::max(current_round_, last_completed_round_), ")"));
    }
    if (current_round_ < 0) {
      if (draining_) {
        return absl::UnavailableError(absl::StrCat("the worker is shutting down; task_id ", task_id(),
                                                   " serves no new rounds"));
      }
      if (!prepared_.empty()) {
        BindRound(round);
        continue;
      }
      if (done_) {
        if (!status_.ok()) return status_;
        return RoundElement{nullptr, false, true};
      }
    }
    // Wait for the bound round to complete, for data, or for the round's deadline. Cancellation only
    // ends a wait: with a token cancelled beforehand this is a non-blocking attempt.
    if (IsCancelled(cancel)) return absl::CancelledError("GetElement cancelled");
    const uint64_t seen = version_;
    auto changed = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return version_ != seen || IsCancelled(cancel); };
    if (deadline.has_value()) {
      if (!mu_.AwaitWithDeadline(absl::Condition(&changed), *deadline) && current_round_ != round) {
        SkipRound(round);
        SLUICE_LOG(Debug, "round skipped").With("task_id", task_id()).With("round", round);
        return RoundElement{nullptr, true, false};
      }
    } else {
      mu_.Await(absl::Condition(&changed));
    }
  }
}

absl::StatusOr<ElementBuffer::Batch> RoundRobinTaskRunner::GetNextBatch(size_t, size_t, CancelToken*) {
  return absl::FailedPreconditionError(absl::StrCat("task_id ", task_id(), " is a coordinated-read task (num_consumers ",
                                                    num_consumers_, "): use GetElement with a round"));
}

void RoundRobinTaskRunner::BeginDrain() {
  {
    absl::MutexLock lock(&mu_);
    draining_ = true;
    stopped_ = true;
    ++version_;
  }
  producer_->Cancel();
}

bool RoundRobinTaskRunner::WaitForRoundToComplete(absl::Time deadline) {
  absl::MutexLock lock(&mu_);
  auto complete = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return current_round_ < 0; };
  return mu_.AwaitWithDeadline(absl::Condition(&complete), deadline);
}

TaskProgressSnapshot RoundRobinTaskRunner::Progress() const {
  absl::MutexLock lock(&mu_);
  TaskProgressSnapshot out;
  out.elements_produced = produced_;
  int64_t remaining = 0;
  if (current_round_ >= 0) remaining = num_consumers_ - taken_count_;
  out.buffered_elements = static_cast<int64_t>(prepared_.size()) * num_consumers_ + remaining;
  out.finished = done_ && !draining_ && !aborted_ && prepared_.empty() && current_round_ < 0;
  return out;
}

}  // namespace sluice::worker
