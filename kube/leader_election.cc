#include "kube/leader_election.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "kube/errors.h"
#include "kube/event_recorder.h"
#include "kube/resource.h"

namespace sluice::kube {

using nlohmann::json;

namespace {
json SpecOf(const json& lease) {
  if (!lease.is_object()) return json::object();
  auto it = lease.find("spec");
  return it != lease.end() && it->is_object() ? *it : json::object();
}
}  // namespace

LeaderElector::LeaderElector(Client* client, LeaderElectionConfig config)
    : client_(client), config_(std::move(config)), rng_(config_.seed != 0 ? config_.seed : std::random_device{}()) {}

absl::Status LeaderElector::Validate() const {
  if (config_.lease_name.empty() || config_.lease_namespace.empty()) {
    return absl::InvalidArgumentError("leader election: lease_namespace and lease_name are required");
  }
  if (config_.identity.empty()) return absl::InvalidArgumentError("leader election: identity is required");
  if (config_.lease_duration <= config_.renew_deadline) {
    return absl::InvalidArgumentError("leader election: lease_duration must be greater than renew_deadline");
  }
  if (config_.renew_deadline <= absl::ZeroDuration() || config_.retry_period <= absl::ZeroDuration() ||
      absl::ToDoubleSeconds(config_.renew_deadline) <= config_.jitter_factor * absl::ToDoubleSeconds(config_.retry_period)) {
    return absl::InvalidArgumentError(
        "leader election: renew_deadline must be greater than jitter_factor * retry_period (both positive)");
  }
  return absl::OkStatus();
}

bool LeaderElector::IsLeader() const {
  absl::MutexLock lock(&mu_);
  return leading_;
}

std::string LeaderElector::Leader() const {
  absl::MutexLock lock(&mu_);
  return leader_;
}

void LeaderElector::ObserveHolder(const std::string& holder) {
  bool changed = false;
  {
    absl::MutexLock lock(&mu_);
    if (holder != leader_) {
      leader_ = holder;
      changed = true;
    }
  }
  if (changed && !holder.empty() && config_.on_new_leader) config_.on_new_leader(holder);
}

absl::Duration LeaderElector::JitteredRetry() {
  double factor = 1.0 + config_.jitter_factor * std::uniform_real_distribution<double>(0.0, 1.0)(rng_);
  return config_.retry_period * factor;
}

const char* OutcomeName(LeaderElectionAttempt::Outcome outcome) {
  switch (outcome) {
    case LeaderElectionAttempt::Outcome::kAcquired:
      return "acquired";
    case LeaderElectionAttempt::Outcome::kRenewed:
      return "renewed";
    case LeaderElectionAttempt::Outcome::kHeldByOther:
      return "held";
    case LeaderElectionAttempt::Outcome::kLostRace:
      return "lost-race";
    case LeaderElectionAttempt::Outcome::kError:
      return "error";
  }
  return "error";
}

absl::StatusOr<bool> LeaderElector::TryAcquireOrRenew() {
  LeaderElectionAttempt attempt;
  absl::StatusOr<bool> result = Attempt(&attempt);
  if (!result.ok()) {
    attempt.outcome = LeaderElectionAttempt::Outcome::kError;
    attempt.error = result.status();
  }
  if (config_.on_attempt) config_.on_attempt(attempt);
  return result;
}

absl::StatusOr<bool> LeaderElector::Attempt(LeaderElectionAttempt* attempt) {
  using Outcome = LeaderElectionAttempt::Outcome;
  const ResourceRef leases = resources::Leases();
  int lease_seconds = static_cast<int>(std::ceil(absl::ToDoubleSeconds(config_.lease_duration)));
  auto current = client_->Get(leases, config_.lease_namespace, config_.lease_name);
  // "Now" is when the answer arrived: a record cannot be observed before it is read (taking the time
  // before the GET could date a renewal written during the GET earlier than its own renewTime).
  absl::Time now = config_.clock->Now();
  attempt->at = now;
  attempt->observed_change = now;
  attempt->expires = now + config_.lease_duration;
  if (!current.ok() && absl::IsNotFound(current.status())) {
    json lease = {{"apiVersion", "coordination.k8s.io/v1"},
                  {"kind", "Lease"},
                  {"metadata", {{"name", config_.lease_name}, {"namespace", config_.lease_namespace}}},
                  {"spec",
                   {{"holderIdentity", config_.identity},
                    {"leaseDurationSeconds", lease_seconds},
                    {"acquireTime", FormatMicroTime(now)},
                    {"renewTime", FormatMicroTime(now)},
                    {"leaseTransitions", 0}}}};
    auto created = client_->Create(leases, config_.lease_namespace, lease);
    if (!created.ok()) {
      if (absl::IsAlreadyExists(created.status()) || IsConflict(created.status())) {
        attempt->outcome = Outcome::kLostRace;
        return false;
      }
      return created.status();
    }
    attempt->outcome = Outcome::kAcquired;
    {
      absl::MutexLock lock(&mu_);
      observed_spec_ = SpecOf(*created);
      observed_time_ = now;
      last_lease_ = *created;
    }
    ObserveHolder(config_.identity);
    return true;
  }
  if (!current.ok()) return current.status();

  if (!current->is_object()) return absl::DataLossError("leader election: the Lease answer is not an object");
  json spec = SpecOf(*current);
  std::string holder = GetString(spec, "holderIdentity");
  absl::Time observed_time;
  {
    absl::MutexLock lock(&mu_);
    if (spec != observed_spec_) {
      observed_spec_ = spec;
      observed_time_ = now;
    }
    observed_time = observed_time_;
  }
  ObserveHolder(holder);
  attempt->holder = holder;
  attempt->observed_change = observed_time;
  attempt->expires = observed_time + config_.lease_duration;
  bool held_by_other = !holder.empty() && holder != config_.identity;
  if (held_by_other && observed_time + config_.lease_duration > now) {
    attempt->outcome = Outcome::kHeldByOther;
    return false;
  }

  json updated = *current;
  json& new_spec = updated["spec"];
  if (!new_spec.is_object()) new_spec = json::object();
  new_spec["holderIdentity"] = config_.identity;
  new_spec["leaseDurationSeconds"] = lease_seconds;
  new_spec["renewTime"] = FormatMicroTime(now);
  if (holder != config_.identity) {
    new_spec["acquireTime"] = FormatMicroTime(now);
    int transitions = spec.contains("leaseTransitions") && spec["leaseTransitions"].is_number_integer()
                          ? spec["leaseTransitions"].get<int>()
                          : 0;
    new_spec["leaseTransitions"] = transitions + 1;
  }
  auto written = client_->Replace(leases, config_.lease_namespace, config_.lease_name, updated);
  if (!written.ok()) {
    if (IsConflict(written.status())) {  // someone else wrote first: back off, re-GET
      attempt->outcome = Outcome::kLostRace;
      return false;
    }
    return written.status();
  }
  attempt->outcome = holder == config_.identity ? Outcome::kRenewed : Outcome::kAcquired;
  {
    absl::MutexLock lock(&mu_);
    observed_spec_ = SpecOf(*written);
    observed_time_ = now;
    last_lease_ = *written;
  }
  ObserveHolder(config_.identity);
  return true;
}

absl::Status LeaderElector::Release() {
  json lease;
  {
    absl::MutexLock lock(&mu_);
    if (!leading_ || !last_lease_.is_object()) return absl::OkStatus();
    lease = last_lease_;
  }
  absl::Time now = config_.clock->Now();
  json& spec = lease["spec"];
  spec["holderIdentity"] = "";
  spec["leaseDurationSeconds"] = 1;
  spec["renewTime"] = FormatMicroTime(now);
  spec["acquireTime"] = FormatMicroTime(now);
  auto written = client_->Replace(resources::Leases(), config_.lease_namespace, config_.lease_name, lease);
  absl::MutexLock lock(&mu_);
  leading_ = false;
  if (!written.ok()) {
    // 409: the lease changed since our last renewal (someone took it) - nothing left to release.
    return IsConflict(written.status()) ? absl::OkStatus() : written.status();
  }
  last_lease_ = *written;
  observed_spec_ = SpecOf(*written);
  observed_time_ = now;
  return absl::OkStatus();
}

absl::Status LeaderElector::Run(std::stop_token stop) {
  if (absl::Status valid = Validate(); !valid.ok()) return valid;
  Clock* clock = config_.clock;
  // Acquire.
  while (true) {
    if (stop.stop_requested()) return absl::CancelledError("leader election stopped before acquiring");
    auto acquired = TryAcquireOrRenew();
    if (acquired.ok() && *acquired) break;
    if (!clock->SleepFor(JitteredRetry(), stop)) {
      return absl::CancelledError("leader election stopped before acquiring");
    }
  }
  {
    absl::MutexLock lock(&mu_);
    leading_ = true;
  }
  if (config_.on_started_leading) config_.on_started_leading();

  // Lead: renew every retry_period; give up if no renewal succeeded within renew_deadline.
  absl::Status outcome = absl::OkStatus();
  bool stopped = false;
  while (true) {
    if (!clock->SleepFor(config_.retry_period, stop)) {
      stopped = true;
      break;
    }
    absl::Time deadline = clock->Now() + config_.renew_deadline;
    bool renewed = false;
    absl::Status last_error = absl::OkStatus();
    while (!stop.stop_requested() && clock->Now() < deadline) {
      auto result = TryAcquireOrRenew();
      if (result.ok() && *result) {
        renewed = true;
        break;
      }
      if (!result.ok()) last_error = result.status();
      if (!clock->SleepUntil(std::min(deadline, clock->Now() + config_.retry_period), stop)) break;
    }
    if (stop.stop_requested()) {
      stopped = true;
      break;
    }
    if (!renewed) {
      outcome = absl::AbortedError(absl::StrCat("leader election: lost lease ", config_.lease_namespace, "/",
                                                config_.lease_name, " (no renewal within renew deadline",
                                                last_error.ok() ? "" : absl::StrCat(": ", last_error.message()), ")"));
      break;
    }
  }
  if (stopped && config_.release_on_cancel) {
    absl::Status released = Release();
    if (!released.ok()) outcome = released;
  }
  {
    absl::MutexLock lock(&mu_);
    leading_ = false;
  }
  if (config_.on_stopped_leading) config_.on_stopped_leading();
  return outcome;
}

}  // namespace sluice::kube
