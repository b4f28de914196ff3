// SteppedConsumer: a stand-in trainer for the local autoscaler's demo, benchmark and tests. On a
// thread of its own it reads a job through the C++ client and "trains" on what it reads: each
// step takes `elements_per_step` elements (GetNext, so waiting for data counts as stall) and then
// sleeps elements_per_step x step time (the compute), all inside one StepScope, so the client's
// stall metrics (and the dispatcher's, which the autoscaler scrapes) say how much of each step was
// spent waiting. Its demand, the elements per second it would consume without stalls, is
// 1 / step time; set_step_time changes it while it runs (a demand step), 0 reads flat out.
//
// Optionally records an integer field of every element (e.g. `index` of a synthetic source or
// `value` of a range), so a test or benchmark can check that no element was lost or repeated.
//
// Threading: every method is thread-safe; Stop (and the destructor) cancels the client and joins
// the thread.
#ifndef SLUICE_AUTOSCALER_LOCAL_STEPPED_CONSUMER_H_
#define SLUICE_AUTOSCALER_LOCAL_STEPPED_CONSUMER_H_

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "dataplane/client/data_service_client.h"

namespace sluice::autoscaler {

struct SteppedConsumerOptions {
  client::DataServiceClientOptions client;  // dispatcher address, pipeline, job name, sharding
  absl::Duration step_time = absl::Milliseconds(2);  // compute per element; zero: no compute
  int elements_per_step = 0;  // 0: enough elements that one step computes for at least 5 ms
  std::string record_field;   // non-empty: count each element's value of this int64 field
};

class SteppedConsumer {
 public:
  // Creates the client (registers the pipeline, joins the job) and starts reading.
  static absl::StatusOr<std::unique_ptr<SteppedConsumer>> Start(SteppedConsumerOptions options);
  ~SteppedConsumer();
  SteppedConsumer(const SteppedConsumer&) = delete;
  SteppedConsumer& operator=(const SteppedConsumer&) = delete;

  // The compute per element from the next step on (its demand is 1 / step).
  void set_step_time(absl::Duration step);
  absl::Duration step_time() const;
  // Cancels reading and joins the thread (idempotent).
  void Stop();

  client::ClientStats stats() const;
  // The job was read to its end.
  bool finished() const;
  // The error that ended reading early (OK while reading, at the end, and after Stop).
  absl::Status status() const;
  // value -> times seen, of record_field (empty without one).
  std::map<int64_t, int> recorded() const;

 private:
  explicit SteppedConsumer(SteppedConsumerOptions options, std::unique_ptr<client::DataServiceClient> client);
  void Run();

  const SteppedConsumerOptions options_;
  std::unique_ptr<client::DataServiceClient> client_;
  std::atomic<int64_t> step_ns_;
  std::atomic<bool> stopping_{false};
  mutable absl::Mutex mu_;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status status_ ABSL_GUARDED_BY(mu_);
  std::map<int64_t, int> recorded_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;
};

// Elements per step for a compute time per element: enough that one step lasts at least 5 ms (so
// sleeping is accurate), at most 64.
int ElementsPerStep(absl::Duration step_time);

}  // namespace sluice::autoscaler

#endif  // SLUICE_AUTOSCALER_LOCAL_STEPPED_CONSUMER_H_
