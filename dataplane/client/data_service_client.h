// The Sluice data-service client: reads a job's elements from the workers, for one trainer process.
//
// Create() registers the pipeline with the dispatcher (or uses a registered dataset_id), gets or
// creates the job, and starts the client's loops, each a class of its own behind the RPC
// interfaces of service_rpc.h, with the one retry policy of retry_policy.h:
//  - the session (job_session.h): ClientHeartbeat every heartbeat_interval carrying ClientMetrics
//    (the stall signal), learning the job's tasks and whether the job finished; retries while the
//    dispatcher is unreachable;
//  - for non-coordinated reads, the task readers (task_readers.h): one streaming GetElements call
//    per selected task, reconnecting when its worker restarts, stopped when the dispatcher no
//    longer lists its task;
//  - or, for coordinated reads (num_consumers > 0), the round reader (round_reader.h), which asks,
//    round after round, the worker serving the round (see round_robin.h) for this consumer's element;
//  - between the readers and GetNext, the element queue (element_queue.h): a bounded buffer
//    (max_buffered_bytes, max_outstanding_requests: readers wait before reading more =
//    backpressure), the sticky error, the end of the data, and the stall meter.
// GetNext() hands out elements in arrival order (round order for coordinated reads), and the end
// once the dispatcher says the job finished and every stream read is drained — or, when the
// dispatcher has not answered for dispatcher_timeout, once every task read has ended (otherwise
// UNAVAILABLE when nothing has arrived for as long either).
//
// Threading: GetNext, BeginStep/EndStep and stats() may be called from any thread (the methods
// lock internally); GetNext is meant for one consumer thread at a time. The destructor cancels all
// streams (TryCancel), joins every thread and releases the job client; it never waits on a hung
// peer beyond release_timeout. Do not destroy the client while another thread is inside GetNext
// (call Cancel() first and let that thread return).
#ifndef SLUICE_DATAPLANE_CLIENT_DATA_SERVICE_CLIENT_H_
#define SLUICE_DATAPLANE_CLIENT_DATA_SERVICE_CLIENT_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <iterator>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "dataplane/pipeline/tensor.h"
#include "dataplane/rpc/credentials.h"
#include "dataservice.pb.h"
#include "pipeline.pb.h"

namespace sluice::client {

// The default of DataServiceClientOptions::max_outstanding_requests.
inline constexpr int kDefaultMaxOutstandingRequests = 64;

struct DataServiceClientOptions {
  std::string dispatcher_address;                     // "host:port"
  // What to read: a pipeline registered by Create(), or an already registered dataset_id (both:
  // they must agree), or neither: the dispatcher's own default pipeline (its --pipeline).
  std::optional<pipeline::PipelineDef> pipeline;
  std::string dataset_id;
  std::string job_name;                               // empty: an anonymous job of this client alone
  // Named jobs: this reader's pass over the data when it repeats it on its side (1, 2, ...; see
  // docs/dataservice-client.md, "Sharing a job and repeating"): the k-th passes of the readers of
  // a name share the name's iteration k; a pass that comes after iteration k is over is empty.
  // 0: the name's current iteration, or the next one once it finished.
  int64_t iteration = 0;
  service::ShardingPolicy sharding = service::SHARDING_OFF;
  int32_t num_consumers = 0;                          // > 0: coordinated reads ...
  int32_t consumer_index = -1;                        // ... as consumer [0, num_consumers)
  // SHARDING_OFF only: share the workers' pipeline runs with other jobs of the same dataset.
  // Unset: the dispatcher's default (its --sharing flag).
  std::optional<bool> cross_job_sharing;
  int64_t num_epochs = 1;                             // -1: forever
  service::Compression compression = service::COMPRESSION_AUTO;
  service::TargetWorkers target_workers = service::TARGET_WORKERS_AUTO;
  std::string client_host;                            // empty: $SLUICE_CLIENT_HOST, else gethostname()
  rpc::TlsOptions tls;
  int max_message_bytes = rpc::kDefaultMaxMessageBytes;
  // Bounds on data held by the client. Readers stop reading while the decoded bytes buffered reach
  // max_buffered_bytes (overshoot: at most one response message per reader), and while
  // max_outstanding_requests response messages are being read or buffered (0: no count bound;
  // never fewer than one per task reader, so an idle task cannot starve the others). With the
  // worker's packing (up to ~1 MiB per response) the default count bound holds at most ~64 MiB
  // of packed small elements; large elements are bounded by max_buffered_bytes first.
  int64_t max_buffered_bytes = int64_t{256} << 20;
  int max_outstanding_requests = kDefaultMaxOutstandingRequests;
  int max_elements_per_response = 0;                  // 0: the worker's default packing
  uint64_t max_element_bytes = uint64_t{1} << 30;     // a larger declared element is rejected
  // Same-host workers send large elements through shared memory when both sides can reach the
  // worker's ring (docs/dataservice.md, "Same-host shared memory"). false, or the environment
  // variable SLUICE_SHARED_MEMORY=0: always over the socket.
  bool shared_memory = true;
  absl::Duration heartbeat_interval = absl::Milliseconds(500);
  absl::Duration initial_backoff = absl::Milliseconds(100);
  absl::Duration max_backoff = absl::Seconds(5);
  absl::Duration create_timeout = absl::Seconds(60);  // Create() retries an unreachable dispatcher this long
  absl::Duration rpc_timeout = absl::Seconds(10);     // deadline of unary RPCs (heartbeats, GetElement)
  absl::Duration release_timeout = absl::Seconds(2);  // deadline of ReleaseJobClient in the destructor
  // How long the client goes on without the dispatcher (no heartbeat answered) before it decides
  // on its own: the end of the data if every task it reads has ended (end_of_sequence), otherwise,
  // once no element has arrived for as long either, UNAVAILABLE. InfiniteDuration: wait forever.
  absl::Duration dispatcher_timeout = absl::Minutes(2);
  // Clock for the stall metrics only (wait/step seconds); default absl::Now. Tests inject a fake.
  std::function<absl::Time()> clock;
};

// Counters of one client. wait/step seconds as in stall_meter.h.
struct ClientStats {
  double wait_seconds_total = 0;
  double step_seconds_total = 0;
  int64_t steps_total = 0;
  int64_t elements_total = 0;      // elements returned by GetNext
  int64_t bytes_total = 0;         // their decoded bytes
  int64_t buffered_elements = 0;
  int64_t buffered_bytes = 0;
  int64_t peak_buffered_bytes = 0;
  int64_t outstanding_requests = 0;
  int64_t peak_outstanding_requests = 0;
  int64_t backpressure_waits = 0;  // times a reader paused because the client's buffer was full
  int64_t active_readers = 0;      // task readers (or the round reader) running
  int64_t reconnects = 0;          // streams or GetElement calls retried after a failure
  int64_t heartbeats_ok = 0;
  int64_t heartbeat_failures = 0;
  int64_t current_round = 0;       // coordinated reads: the round being fetched
  int64_t rounds_skipped = 0;
  int64_t waiting_consumers = 0;   // threads blocked inside GetNext right now
  bool job_finished = false;
  bool ended_without_dispatcher = false;  // the end was concluded without the dispatcher (dispatcher_timeout)
  // Streaming reads: elements received from each task (task id -> count), reported to the
  // dispatcher in every heartbeat.
  std::map<int64_t, int64_t> elements_received_by_task;
  // The job's lost workers' produced-but-never-received elements, as the dispatcher estimated them
  // (its last heartbeat answer; docs/dataservice.md "Worker loss").
  int64_t elements_lost_estimate = 0;
};

class DataServiceClient;

// An input iterator over a client's elements (see DataServiceClient::begin). It ends at the end
// of the job, or at the first error (then DataServiceClient::status() says which). Dereferencing
// gives the current element, valid until the iterator is advanced.
class ElementIterator {
 public:
  using iterator_category = std::input_iterator_tag;
  using value_type = pipeline::Element;
  using difference_type = std::ptrdiff_t;
  using pointer = const pipeline::Element*;
  using reference = const pipeline::Element&;

  ElementIterator() = default;  // the end
  reference operator*() const { return *current_; }
  pointer operator->() const { return &*current_; }
  ElementIterator& operator++() {
    Advance();
    return *this;
  }
  void operator++(int) { Advance(); }
  // Iterators compare equal when both are at the end (or are the same live iterator's copies).
  friend bool operator==(const ElementIterator& a, const ElementIterator& b) { return a.client_ == b.client_; }
  friend bool operator!=(const ElementIterator& a, const ElementIterator& b) { return !(a == b); }

 private:
  friend class DataServiceClient;
  explicit ElementIterator(DataServiceClient* client) : client_(client) { Advance(); }
  void Advance();

  DataServiceClient* client_ = nullptr;  // null: at the end
  std::optional<pipeline::Element> current_;
};

class DataServiceClient {
 public:
  static absl::StatusOr<std::unique_ptr<DataServiceClient>> Create(DataServiceClientOptions options);
  ~DataServiceClient();
  DataServiceClient(const DataServiceClient&) = delete;
  DataServiceClient& operator=(const DataServiceClient&) = delete;

  // The next element; std::nullopt once the job finished and every task this client reads is
  // drained (and on every later call). An error (a malformed element, the dispatcher forgetting
  // this client) is returned after the elements buffered before it, and again on later calls.
  absl::StatusOr<std::optional<pipeline::Element>> GetNext();
  // As GetNext, but gives up after `timeout` with DeadlineExceeded (call again to keep waiting).
  absl::StatusOr<std::optional<pipeline::Element>> GetNext(absl::Duration timeout);

  // Range-for over the elements: `for (const pipeline::Element& e : *client) Train(e);` calls
  // GetNext for each element (so the stall metrics count the waits) and stops at the end of the
  // job or at the first error. After the loop, status() is OK at a clean end and the error
  // otherwise (CANCELLED after Cancel()) — check it. One range-for at a time.
  ElementIterator begin() { return ElementIterator(this); }
  ElementIterator end() { return ElementIterator(); }
  // The error that the last GetNext returned (OK when none did): what ended a range-for early.
  absl::Status status() const;

  // Wakes every GetNext (they return CANCELLED, as do later calls) and stops all reading. The
  // threads are joined and the job client released by the destructor. Thread-safe.
  void Cancel();

  // Training-step markers for exact stall measurement (see stall_meter.h).
  void BeginStep();
  void EndStep();

  ClientStats stats() const;
  const std::string& dataset_id() const;
  int64_t job_id() const;
  int64_t job_client_id() const;     // 0 when the requested iteration was over (nothing to read)
  int64_t iteration() const;         // which iteration of the job name this client reads
  const std::string& client_host() const;

  class Impl;

 private:
  explicit DataServiceClient(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Marks one training step for its lifetime: BeginStep() on construction, EndStep() on destruction.
class StepScope {
 public:
  explicit StepScope(DataServiceClient& client) : client_(client) { client_.BeginStep(); }
  ~StepScope() { client_.EndStep(); }
  StepScope(const StepScope&) = delete;
  StepScope& operator=(const StepScope&) = delete;

 private:
  DataServiceClient& client_;
};

// The client's host for locality: `configured` if set, else $SLUICE_CLIENT_HOST, else gethostname().
std::string ResolveClientHost(const std::string& configured);

// Checks options for contradictions; errors name the field.
absl::Status ValidateOptions(const DataServiceClientOptions& options);

}  // namespace sluice::client

#endif  // SLUICE_DATAPLANE_CLIENT_DATA_SERVICE_CLIENT_H_
