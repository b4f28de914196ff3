// Client metrics: clients report running totals (wait and step seconds, elements, bytes) in their
// heartbeats; the dispatcher turns them into increments per job (GetState's per-job metrics and
// the Prometheus counters). A client without a baseline was created before this process started
// (recovered from the journal): the previous process counted its totals so far, so they become the
// baseline — otherwise the counters, restarting at zero, would jump by the clients' whole lifetime.
//
// Soft state. Thread-compatible; DispatcherService owns one under its lock.
#ifndef SLUICE_DATAPLANE_DISPATCHER_CLIENT_METRICS_H_
#define SLUICE_DATAPLANE_DISPATCHER_CLIENT_METRICS_H_

#include <cstdint>
#include <map>

#include "absl/status/status.h"
#include "dataservice.pb.h"

namespace sluice::dispatcher {

// INVALID_ARGUMENT naming the first field that is negative or not finite.
absl::Status CheckClientMetrics(const service::ClientMetrics& metrics);

class ClientMetricsTotals {
 public:
  // A new client: it counts from zero.
  void StartClient(int64_t client_id) { last_[client_id] = service::ClientMetrics(); }
  // `client_id` of `job_id` reports `totals`: returns the increment since its last report (never
  // negative), which is added to the job's sum.
  service::ClientMetrics Report(int64_t client_id, int64_t job_id, const service::ClientMetrics& totals);
  // The client left: its increments stay in the job's sum.
  void ForgetClient(int64_t client_id) { last_.erase(client_id); }
  void ForgetJob(int64_t job_id) { per_job_.erase(job_id); }
  // The job's summed increments, or null before its first report.
  const service::ClientMetrics* JobTotals(int64_t job_id) const;

 private:
  std::map<int64_t, service::ClientMetrics> last_;     // last totals per client
  std::map<int64_t, service::ClientMetrics> per_job_;  // summed increments per job
};

}  // namespace sluice::dispatcher

#endif  // SLUICE_DATAPLANE_DISPATCHER_CLIENT_METRICS_H_
