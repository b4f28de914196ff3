// Job creation (GetOrCreateJob): the request's checks, the spec's defaults, finding the job a
// request joins (by name and iteration), the checks that a joined job has the requested spec, and
// the CreateJob update of a new one (static sharding fixes its workers here).
//
// Pure functions of the request and a DispatcherState (no I/O, no clock, no lock of their own);
// thread-compatible. The service calls the ones taking a state under its lock.
#ifndef SLUICE_DATAPLANE_DISPATCHER_JOB_CREATION_H_
#define SLUICE_DATAPLANE_DISPATCHER_JOB_CREATION_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "dataplane/dispatcher/dispatcher_state.h"
#include "dataservice.pb.h"
#include "journal.pb.h"

namespace sluice::dispatcher {

// FILE and DATA: the shards are fixed when the job is created.
bool IsStaticSharding(service::ShardingPolicy policy);
// An enum value's name without its prefix ("SHARDING_DYNAMIC" -> "DYNAMIC"), for messages.
std::string ShortEnumName(const std::string& enum_name, absl::string_view prefix);

// The checks of a GetOrCreateJobRequest that need no state (enum values, ranges, combinations).
absl::Status CheckJobRequest(const service::GetOrCreateJobRequest& request);

// The request's spec with its defaults filled in: num_epochs normalised, and cross_job_sharing,
// when unset, from --sharing (`default_cross_job_sharing`) for plain SHARDING_OFF jobs.
service::JobSpec NormalizedJobSpec(const service::JobSpec& spec, bool default_cross_job_sharing);

// The job a request for `spec` (with a resolved dataset_id) and `iteration` reads. A named job's
// iteration k is joined while it runs and created if the name has not reached it; once it finished
// or a later one started the pass is over (an empty pass: `over`, with the job if it still exists).
// Without an iteration, a name's running job is joined; a finished job's name can be reused.
struct JobLookup {
  const DispatcherState::Job* job = nullptr;  // null: create one (unless `over`)
  bool over = false;
};
JobLookup FindJobFor(const DispatcherState& state, const service::JobSpec& spec, int64_t iteration);

// FAILED_PRECONDITION naming the first field in which a running job's spec `have` differs from
// the requested `spec`.
absl::Status CheckSameJob(const service::JobSpec& have, const service::JobSpec& spec);

// The CreateJob update of a new job for `spec`. Static sharding fixes its workers now: the
// registered, non-draining workers the requesting client reads (UNAVAILABLE when there are none).
absl::StatusOr<service::Update> CreateJobUpdate(const DispatcherState& state, const service::JobSpec& spec,
                                                const service::GetOrCreateJobRequest& request);

}  // namespace sluice::dispatcher

#endif  // SLUICE_DATAPLANE_DISPATCHER_JOB_CREATION_H_
