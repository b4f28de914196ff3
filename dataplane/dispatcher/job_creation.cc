#include "dataplane/dispatcher/job_creation.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "dataplane/dispatcher/locality.h"

namespace sluice::dispatcher {

bool IsStaticSharding(service::ShardingPolicy policy) {
  return policy == service::SHARDING_FILE || policy == service::SHARDING_DATA;
}

std::string ShortEnumName(const std::string& enum_name, absl::string_view prefix) {
  return std::string(absl::StripPrefix(enum_name, prefix));
}

namespace {

std::string ShardingName(service::ShardingPolicy policy) {
  return ShortEnumName(service::ShardingPolicy_Name(policy), "SHARDING_");
}

}  // namespace

absl::Status CheckJobRequest(const service::GetOrCreateJobRequest& request) {
  const service::JobSpec& spec = request.spec();
  if (!service::ShardingPolicy_IsValid(spec.sharding())) {
    return absl::InvalidArgumentError(absl::StrCat("spec.sharding ", spec.sharding(), " is not a ShardingPolicy"));
  }
  if (!service::TargetWorkers_IsValid(spec.target_workers())) {
    return absl::InvalidArgumentError(absl::StrCat("spec.target_workers ", spec.target_workers(), " is not a TargetWorkers value"));
  }
  if (!service::Compression_IsValid(spec.compression())) {
    return absl::InvalidArgumentError(absl::StrCat("spec.compression ", spec.compression(), " is not a Compression"));
  }
  if (spec.num_epochs() < -1) {
    return absl::InvalidArgumentError(
        absl::StrCat("spec.num_epochs is ", spec.num_epochs(), "; use -1 (forever) or a positive count"));
  }
  if (spec.num_consumers() < 0 || spec.num_consumers() > 65536) {
    return absl::InvalidArgumentError(absl::StrCat("spec.num_consumers is ", spec.num_consumers(), "; must be in [0, 65536]"));
  }
  if (spec.has_cross_job_sharing() && spec.cross_job_sharing() && spec.sharding() != service::SHARDING_OFF) {
    return absl::InvalidArgumentError("spec.cross_job_sharing needs sharding SHARDING_OFF (every job must see every element)");
  }
  if (spec.num_consumers() > 0 && spec.sharding() != service::SHARDING_OFF) {
    return absl::InvalidArgumentError("spec.num_consumers > 0 (coordinated reads) needs sharding SHARDING_OFF");
  }
  if (request.iteration() < 0 || (request.iteration() > 0 && spec.job_name().empty())) {
    return absl::InvalidArgumentError(absl::StrCat("iteration is ", request.iteration(),
                                                   "; must be 0, or > 0 with a spec.job_name (an iteration is a run "
                                                   "of a named job)"));
  }
  if (spec.num_consumers() > 0 && (request.consumer_index() < 0 || request.consumer_index() >= spec.num_consumers())) {
    return absl::InvalidArgumentError(absl::StrCat("consumer_index is ", request.consumer_index(), "; must be in [0, ",
                                                   spec.num_consumers(), ") (spec.num_consumers)"));
  }
  return absl::OkStatus();
}

service::JobSpec NormalizedJobSpec(const service::JobSpec& requested, bool default_cross_job_sharing) {
  service::JobSpec spec = requested;
  spec.set_num_epochs(NormalizedNumEpochs(spec.num_epochs()));
  if (!spec.has_cross_job_sharing()) {
    // --sharing: plain SHARDING_OFF jobs share the workers' pipeline runs unless they say otherwise.
    spec.set_cross_job_sharing(default_cross_job_sharing && spec.sharding() == service::SHARDING_OFF &&
                               spec.num_consumers() == 0);
  }
  return spec;
}

JobLookup FindJobFor(const DispatcherState& state, const service::JobSpec& spec, int64_t iteration) {
  JobLookup found;
  if (spec.job_name().empty()) return found;
  if (iteration > 0) {
    // A reader's k-th pass reads the name's iteration k: joined while it runs, created if the
    // name has not reached it, over (an empty pass) once it finished or later ones started.
    const DispatcherState::Job* latest = state.FindJobByName(spec.job_name());
    for (const auto& [id, j] : state.jobs()) {
      if (j.spec.job_name() == spec.job_name() && j.iteration == iteration) found.job = &j;
    }
    found.over = (found.job != nullptr && found.job->finished) ||
                 (found.job == nullptr && latest != nullptr && latest->iteration > iteration);
    return found;
  }
  found.job = state.FindJobByName(spec.job_name());
  if (found.job != nullptr && found.job->finished) found.job = nullptr;  // a finished job's name can be reused
  return found;
}

absl::Status CheckSameJob(const service::JobSpec& have, const service::JobSpec& spec) {
  auto mismatch = [&](absl::string_view field, const std::string& existing, const std::string& requested) {
    return absl::FailedPreconditionError(absl::StrCat("job '", spec.job_name(), "' exists with ", field, " ", existing,
                                                      ", request has ", requested));
  };
  if (have.dataset_id() != spec.dataset_id()) return mismatch("dataset_id", have.dataset_id(), spec.dataset_id());
  if (have.sharding() != spec.sharding()) {
    return mismatch("sharding", ShardingName(have.sharding()), ShardingName(spec.sharding()));
  }
  if (have.num_consumers() != spec.num_consumers()) {
    return mismatch("num_consumers", absl::StrCat(have.num_consumers()), absl::StrCat(spec.num_consumers()));
  }
  if (have.cross_job_sharing() != spec.cross_job_sharing()) {
    return mismatch("cross_job_sharing", have.cross_job_sharing() ? "true" : "false",
                    spec.cross_job_sharing() ? "true" : "false");
  }
  if (have.num_epochs() != spec.num_epochs()) {
    return mismatch("num_epochs", absl::StrCat(have.num_epochs()), absl::StrCat(spec.num_epochs()));
  }
  if (have.compression() != spec.compression()) {
    return mismatch("compression", ShortEnumName(service::Compression_Name(have.compression()), "COMPRESSION_"),
                    ShortEnumName(service::Compression_Name(spec.compression()), "COMPRESSION_"));
  }
  return absl::OkStatus();
}

absl::StatusOr<service::Update> CreateJobUpdate(const DispatcherState& state, const service::JobSpec& spec,
                                                const service::GetOrCreateJobRequest& request) {
  service::Update create;
  auto* c = create.mutable_create_job();
  c->set_job_id(state.next_job_id());
  // Another run of a name whose previous job finished: its next iteration.
  const DispatcherState::Job* previous = spec.job_name().empty() ? nullptr : state.FindJobByName(spec.job_name());
  c->set_iteration(previous != nullptr ? previous->iteration + 1 : 1);
  *c->mutable_spec() = spec;
  if (IsStaticSharding(spec.sharding())) {
    // The shards are fixed now, over the workers this client reads (every one unless it
    // reads LOCAL: then those on its host, which together hold the whole dataset).
    for (const auto& [address, w] : state.workers()) {
      if (!w.draining && ClientWantsWorker(state, spec.sharding(), spec.target_workers(), request.client_host(), w)) {
        c->add_static_workers(address);
      }
    }
    if (c->static_workers_size() == 0) {
      const std::string which =
          spec.target_workers() == service::TARGET_WORKERS_LOCAL
              ? absl::StrCat("no worker on the client's host '", request.client_host(),
                             "' is registered yet (target_workers LOCAL)")
              : std::string("no workers are registered yet");
      return absl::UnavailableError(absl::StrCat(which, "; static sharding (", ShardingName(spec.sharding()),
                                                 ") fixes the job's workers when it is created: retry once workers are up"));
    }
  }
  if (request.iteration() > 0) c->set_iteration(request.iteration());
  return create;
}

}  // namespace sluice::dispatcher
