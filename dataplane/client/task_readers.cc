#include "dataplane/client/task_readers.h"

#include <atomic>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/log.h"
#include "dataplane/client/element_decoder.h"
#include "dataplane/client/job_session.h"
#include "dataplane/client/retry_policy.h"
#include "dataplane/client/task_selection.h"

namespace sluice::client {
namespace {

// The worker's shared-memory ring announced on a stream, or null when it cannot be attached (the
// worker's /dev/shm is not this process's: another container or pod; another user): the worker
// then keeps sending bytes, since it uses the ring only once this side attached. Logged once per
// process at info, later at debug.
std::shared_ptr<rpc::ShmRingReader> AttachShmRing(const std::string& serialized, const std::string& where) {
  static std::atomic<bool> logged{false};
  service::ShmRing ring;
  absl::StatusOr<std::shared_ptr<rpc::ShmRingReader>> reader =
      ring.ParseFromString(serialized) ? rpc::ShmRingReader::Attach(ring.path(), ring.file_bytes(), ring.nonce())
                                       : absl::InvalidArgumentError("shm_ring does not parse");
  if (reader.ok()) return *std::move(reader);
  const char* what = "worker's shared memory not reachable; reading its elements over the socket";
  const std::string error(reader.status().message());
  if (!logged.exchange(true)) {
    SLUICE_LOG(Info, what).With("stream", where).With("error", error);
  } else {
    SLUICE_LOG(Debug, what).With("stream", where).With("error", error);
  }
  return nullptr;
}

}  // namespace

TaskReaderSet::TaskReaderSet(Options options, WorkerRpc* workers, ElementQueue* queue,
                             std::shared_ptr<BufferPool> buffers)
    : opts_(std::move(options)), workers_(workers), queue_(queue), buffers_(std::move(buffers)) {}

TaskReaderSet::~TaskReaderSet() {
  StopAll();
  JoinAll();
}

void TaskReaderSet::Update(const std::vector<service::TaskInfo>& tasks, bool job_finished) {
  std::vector<std::unique_ptr<Reader>> retired;
  {
    absl::MutexLock l(&mu_);
    job_finished_ = job_finished;
    TaskSelectionInput input;
    input.target_workers = opts_.target_workers;
    input.sharding = opts_.sharding;
    input.coordinated = false;
    input.client_host = opts_.client_host;
    const std::vector<int64_t> selected = SelectTasks(tasks, input);
    const std::set<int64_t> wanted(selected.begin(), selected.end());

    for (auto it = readers_.begin(); it != readers_.end();) {
      Reader& r = *it->second;
      // A reader between streams of a finished job can receive nothing more: every task of a
      // finished job has handed out its last element. Nor can a reconnection that has received
      // nothing while its worker's connection is down: it waits for a channel (wait_for_ready) to
      // a worker that may be gone for good, and only a cancel ends that wait. A reconnection on a
      // connection that is up may hold the task's last elements, sent but not read yet: it runs
      // to its end (the worker ends it; a failure is not retried once the job finished).
      const bool idle_after_finish =
          job_finished_ &&
          (!r.stream_open || (r.reconnecting && !workers_->Connected(r.info.worker_address())));
      // A finished job lists no tasks, but a stream still open may carry its task's last elements
      // (popped by the worker before the task reported finished): let it run to end_of_sequence.
      const bool unlisted = !wanted.count(it->first) && !job_finished_;
      if (unlisted || (idle_after_finish && !r.done)) r.stop.Cancel();
      if (unlisted) {
        retired.push_back(std::move(it->second));
        it = readers_.erase(it);
      } else {
        ++it;
      }
    }
    for (const auto& t : tasks) {  // a worker being drained is read first from now on
      if (auto it = readers_.find(t.task_id()); it != readers_.end()) it->second->draining = t.draining();
    }
    if (!stopped_ && !job_finished_ && !queue_->failed()) {
      for (const auto& t : tasks) {
        if (wanted.count(t.task_id()) && !readers_.count(t.task_id()) && !finished_tasks_.count(t.task_id())) {
          StartReaderLocked(t);
        }
      }
    }
    PublishLocked();
  }
  // Readers of tasks no longer read were cancelled; join them outside the lock.
  for (auto& r : retired) {
    if (r->thread.joinable()) r->thread.join();
  }
}

void TaskReaderSet::StopAll() {
  absl::MutexLock l(&mu_);
  stopped_ = true;
  for (auto& [id, r] : readers_) r->stop.Cancel();
  PublishLocked();
}

void TaskReaderSet::JoinAll() {
  std::map<int64_t, std::unique_ptr<Reader>> readers;
  {
    absl::MutexLock l(&mu_);
    stopped_ = true;  // no reader starts any more
    readers.swap(readers_);
  }
  for (auto& [id, r] : readers) {
    if (r->thread.joinable()) r->thread.join();
  }
}

bool TaskReaderSet::EndIfEveryTaskEnded(const std::function<void()>& before_end) {
  absl::MutexLock l(&mu_);
  if (readers_.empty()) return false;
  for (const auto& [id, r] : readers_) {
    if (!r->done || !finished_tasks_.count(id)) return false;
  }
  before_end();
  job_finished_ = true;
  PublishLocked();
  return true;
}

int64_t TaskReaderSet::active_readers() const {
  absl::MutexLock l(&mu_);
  int64_t n = 0;
  for (const auto& [id, r] : readers_) {
    if (!r->done) ++n;
  }
  return n;
}

int64_t TaskReaderSet::reconnects() const {
  absl::MutexLock l(&mu_);
  return reconnects_;
}

void TaskReaderSet::StartReaderLocked(const service::TaskInfo& info) {
  auto reader = std::make_unique<Reader>();
  reader->info = info;
  reader->local = IsLocalTask(info, opts_.client_host);
  reader->yields_to_local = !reader->local && opts_.target_workers == service::TARGET_WORKERS_AUTO &&
                            opts_.sharding != service::SHARDING_OFF;
  reader->draining = info.draining();
  Reader* r = reader.get();
  readers_[info.task_id()] = std::move(reader);
  r->thread = std::thread([this, r] { ReaderLoop(r); });
}

void TaskReaderSet::PublishLocked() {
  bool local_active = false;
  bool draining_active = false;
  bool all_done = true;
  for (const auto& [id, r] : readers_) {
    if (!r->stop.cancelled() && !r->done && r->local) local_active = true;
    if (!r->stop.cancelled() && !r->done && r->draining.load()) draining_active = true;
    if (!r->done) all_done = false;
  }
  queue_->SetReaders(static_cast<int64_t>(readers_.size()), local_active, draining_active);
  if (job_finished_ && all_done) queue_->SetEnd();
}

void TaskReaderSet::ReaderLoop(Reader* r) {
  const std::string where = absl::StrCat("worker ", r->info.worker_address(), " task ", r->info.task_id());
  RetryPolicy policy(RetryPolicy::Peer::kWorkerStream, opts_.initial_backoff, opts_.max_backoff);
  bool first_attempt = true;
  while (true) {
    {
      absl::MutexLock l(&mu_);
      if (r->stop.cancelled() || stopped_) break;
      if (!first_attempt && job_finished_) break;  // a finished job's broken stream has nothing left
      r->stream_open = true;
      r->reconnecting = !first_attempt;
      if (!first_attempt) ++reconnects_;
    }
    bool reconnecting = !first_attempt;
    first_attempt = false;
    // A reconnection waits for the channel to connect (retry_policy.h); a stop cancels it.
    CallOptions call;
    call.wait_for_ready = policy.wait_for_ready();
    call.cancel = &r->stop;
    service::GetElementsRequest req;
    req.set_task_id(r->info.task_id());
    req.set_job_client_id(opts_.job_client_id);
    req.set_consumer_index(-1);
    req.set_max_elements(opts_.max_elements_per_response);
    req.set_compression(opts_.compression);
    if (opts_.shared_memory) req.set_shm_boot_id(rpc::ShmBootId());
    std::unique_ptr<ElementStream> stream = workers_->GetElements(r->info.worker_address(), req, call);

    bool end_of_sequence = false;
    bool progressed = false;
    absl::Status bad;
    // The worker's ring, once announced and attached. Elements viewing it keep it (and its
    // mapping) alive past this stream.
    std::shared_ptr<rpc::ShmRingReader> shm;
    // Copies each element's bytes once out of gRPC's slices, small ones into shared chunks; views
    // those in the ring.
    ResponseParser parser(opts_.max_element_bytes, buffers_);
    grpc::ByteBuffer message;
    while (true) {
      if (!queue_->AcquireSlot(r->stop, r->yields_to_local, &r->draining)) break;
      if (!stream->Read(&message)) {
        queue_->ReleaseSlot();
        break;
      }
      if (reconnecting) {
        absl::MutexLock l(&mu_);
        r->reconnecting = reconnecting = false;
      }
      ParsedResponse resp;
      if (absl::Status s = parser.Parse(message, &resp); !s.ok()) {
        bad = absl::InvalidArgumentError(
            absl::StrCat(where, ": malformed response (element ", resp.elements.size(), "): ", s.message()));
      }
      message.Clear();
      if (!resp.shm_ring.empty() && shm == nullptr && opts_.shared_memory) {
        shm = AttachShmRing(resp.shm_ring, where);
        parser.set_shm(shm.get());
      }
      std::vector<DecodedElement>& decoded = resp.elements;
      // Elements decoded before a malformed one are still delivered, then the error. (The shared-
      // memory announcement alone is not progress: a worker failing right after it is retried as
      // one that sent nothing.)
      if ((bad.ok() && resp.shm_ring.empty()) || !decoded.empty()) progressed = true;
      if (!decoded.empty()) {
        absl::MutexLock l(&received_mu_);
        received_[r->info.task_id()] += static_cast<int64_t>(decoded.size());
      }
      queue_->Push(std::move(decoded));
      if (!bad.ok()) {
        queue_->Fail(bad);
        break;
      }
      if (resp.end_of_sequence) {
        end_of_sequence = true;
        break;
      }
    }
    // After the last element (or a bad one) do not wait for the server to close the stream.
    if (end_of_sequence || !bad.ok()) stream->Cancel();
    const absl::Status status = stream->Finish();
    stream.reset();
    {
      absl::MutexLock l(&mu_);
      r->stream_open = false;
      r->reconnecting = false;
      if (end_of_sequence) {
        finished_tasks_.insert(r->info.task_id());
        break;
      }
      if (!bad.ok() || r->stop.cancelled() || stopped_ || queue_->failed()) break;
      if (job_finished_) break;  // a finished job's broken stream has nothing left to deliver
    }
    // A stream closed without end_of_sequence is retried like a transport failure.
    const RetryPolicy::Decision d =
        policy.OnFailure(status.ok() ? absl::StatusCode::kUnavailable : status.code(), progressed);
    if (!d.retry) {
      queue_->Fail(WithContext(status, where));
      break;
    }
    SLUICE_LOG(Warning, "worker stream ended; reconnecting")
        .With("worker", r->info.worker_address())
        .With("task_id", r->info.task_id())
        .With("error", status.ok() ? std::string("stream closed without end_of_sequence") : std::string(status.message()))
        .With("retry_ms", absl::ToInt64Milliseconds(d.delay));
    if (r->stop.WaitFor(d.delay)) break;
  }
  absl::MutexLock l(&mu_);
  r->stream_open = false;
  r->done = true;
  PublishLocked();
}

std::map<int64_t, int64_t> TaskReaderSet::received_by_task() const {
  absl::MutexLock l(&received_mu_);
  return received_;
}

}  // namespace sluice::client
