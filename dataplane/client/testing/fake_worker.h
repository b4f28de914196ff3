// Test-only scripted Worker service for client tests (never used in production code).
//
// Streaming (GetElements): each task has a FIFO of scripted items (elements, raw ElementData, end,
// error) shared by all streams of the task, like a real worker's task output queue. A stream packs
// up to max_elements queued items per response and blocks while the FIFO is empty. Elements are
// encoded and compressed as the request asks (AUTO => pipeline::ChooseCodec); raw items are sent
// as they are (for hostile-worker tests). An unknown task gets NOT_FOUND.
// Coordinated reads (GetElement): answered by a test-provided function of (task, round,
// consumer); rounds at or beyond the gate block until the gate moves.
// Thread-safe: handlers run on gRPC threads, the test scripts from its own thread.
#ifndef SLUICE_DATAPLANE_CLIENT_TESTING_FAKE_WORKER_H_
#define SLUICE_DATAPLANE_CLIENT_TESTING_FAKE_WORKER_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <limits>
#include <map>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "dataplane/pipeline/tensor.h"
#include "dataservice.grpc.pb.h"

namespace sluice::client::testing {

class FakeWorker final : public service::Worker::Service {
 public:
  struct RoundReply {
    enum class Kind { kElement, kSkip, kEnd, kError, kRaw };
    Kind kind = Kind::kElement;
    pipeline::Element element;
    service::ElementData raw;
    grpc::Status status;
  };
  using RoundFunction = std::function<RoundReply(int64_t task_id, int64_t round, int64_t consumer)>;
  struct RoundRequest {
    int64_t task_id;
    int64_t round;
    int64_t consumer;
  };

  FakeWorker() = default;
  ~FakeWorker() override { Shutdown(); }

  // Declares a task with nothing queued yet (a task exists once anything is pushed to it).
  void AddTask(int64_t task_id);
  void PushElement(int64_t task_id, pipeline::Element element);
  void PushRaw(int64_t task_id, service::ElementData data);
  void PushEnd(int64_t task_id);
  void PushError(int64_t task_id, grpc::Status status);
  // The end of the task was handed to a stream.
  bool EndSent(int64_t task_id) const;
  size_t Pending(int64_t task_id) const;

  void SetRoundFunction(RoundFunction fn);
  // GetElement for rounds >= `round` blocks until the gate is raised above them.
  void SetRoundGate(int64_t round);
  std::vector<RoundRequest> round_requests() const;

  int64_t streams_opened() const;
  int64_t active_streams() const;
  int64_t elements_sent() const;
  std::vector<service::GetElementsRequest> stream_requests() const;
  // How many elements were sent with each codec (NONE, LZ4, ZSTD).
  std::map<service::Compression, int64_t> codecs_sent() const;

  // Every blocked or later call ends with UNAVAILABLE (simulates the process going away).
  void Shutdown();

  grpc::Status GetElements(grpc::ServerContext* ctx, const service::GetElementsRequest* req,
                           grpc::ServerWriter<service::GetElementsResponse>* writer) override;
  grpc::Status GetElement(grpc::ServerContext* ctx, const service::GetElementsRequest* req,
                          service::GetElementsResponse* resp) override;

 private:
  struct Item {
    enum class Kind { kElement, kRaw, kEnd, kError };
    Kind kind;
    pipeline::Element element;
    service::ElementData raw;
    grpc::Status status;
  };
  struct Task {
    std::deque<Item> items;
    bool end_sent = false;
  };
  void Push(int64_t task_id, Item item);
  // Encodes and compresses `element` as `requested` asks.
  service::ElementData Encode(const pipeline::Element& element, service::Compression requested)
      ABSL_LOCKS_EXCLUDED(mu_);

  mutable absl::Mutex mu_;
  bool shutdown_ ABSL_GUARDED_BY(mu_) = false;
  std::map<int64_t, Task> tasks_ ABSL_GUARDED_BY(mu_);
  RoundFunction round_fn_ ABSL_GUARDED_BY(mu_);
  int64_t round_gate_ ABSL_GUARDED_BY(mu_) = std::numeric_limits<int64_t>::max();
  std::vector<RoundRequest> round_requests_ ABSL_GUARDED_BY(mu_);
  std::vector<service::GetElementsRequest> stream_requests_ ABSL_GUARDED_BY(mu_);
  int64_t streams_opened_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t active_streams_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t elements_sent_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<service::Compression, int64_t> codecs_sent_ ABSL_GUARDED_BY(mu_);
};

}  // namespace sluice::client::testing

#endif  // SLUICE_DATAPLANE_CLIENT_TESTING_FAKE_WORKER_H_
