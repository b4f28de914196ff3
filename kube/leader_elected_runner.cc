#include "kube/leader_elected_runner.h"

#include <atomic>
#include <thread>

#include "common/log.h"
#include "kube/event_recorder.h"

namespace sluice::kube {

LeaderElectedRunner::LeaderElectedRunner(Client* client, LeaderElectionConfig config)
    : client_(client), config_(std::move(config)) {}

absl::Status LeaderElectedRunner::Validate() const { return LeaderElector(client_, config_).Validate(); }

int LeaderElectedRunner::Run(std::stop_source& stop, const LeadFunc& lead) {
  const std::string lease_name = lease();
  std::atomic<int> code{0};
  std::thread leader_thread;
  // The elector stops (and releases the Lease) only after `lead` has returned: a successor must not
  // start while this process still finishes its in-flight writes. A standby (not leading) stops at once.
  std::stop_source elector_stop;
  std::atomic<bool> leading{false};
  std::stop_callback stop_standby(stop.get_token(), [&] {
    if (!leading.load()) elector_stop.request_stop();
  });
  LeaderElectionConfig config = config_;
  config.on_started_leading = [&] {
    SLUICE_LOG(Info, "acquired the leader Lease").With("lease", lease_name);
    leading = true;
    leader_thread = std::thread([&] {
      code = lead(stop.get_token());
      stop.request_stop();
      SLUICE_LOG(Info, "controller stopped; releasing the leader Lease");
      elector_stop.request_stop();
    });
    if (config_.on_started_leading) config_.on_started_leading();
  };
  config.on_stopped_leading = [&] {
    if (!stop.stop_requested()) {
      SLUICE_LOG(Error, "lost the leader Lease, exiting").With("lease", lease_name);
      code = 1;
      stop.request_stop();  // ends `lead`; the process exits so a new leader takes over cleanly
    }
    if (config_.on_stopped_leading) config_.on_stopped_leading();
  };
  config.on_new_leader = [&](const std::string& holder) {
    SLUICE_LOG(Info, "leader observed").With("leader", holder).With("self", holder == config_.identity);
    if (config_.on_new_leader) config_.on_new_leader(holder);
  };
  // Every acquire/renew attempt at debug level: what was read and when its holder's lease expires by
  // this replica's own observation (--log-level debug explains a takeover).
  config.on_attempt = [&](const LeaderElectionAttempt& a) {
    auto line = SLUICE_LOG(Debug, "lease attempt");
    line.With("outcome", OutcomeName(a.outcome))
        .With("holder", a.holder)
        .With("at", FormatMicroTime(a.at))
        .With("observed_change", FormatMicroTime(a.observed_change))
        .With("expires", FormatMicroTime(a.expires));
    if (!a.error.ok()) line.With("error", a.error.ToString());
    if (config_.on_attempt) config_.on_attempt(a);
  };
  LeaderElector elector(client_, config);
  SLUICE_LOG(Info, "waiting for the leader Lease").With("lease", lease_name).With("identity", config_.identity);
  absl::Status ran = elector.Run(elector_stop.get_token());
  // A standby told to stop (a signal) ends its campaign with Cancelled: a clean end, not a failure.
  const bool standby_stopped = absl::IsCancelled(ran) && !leading.load() && stop.stop_requested();
  if (standby_stopped) {
    SLUICE_LOG(Info, "stopped while waiting for the leader Lease").With("lease", lease_name);
  } else if (!ran.ok()) {
    SLUICE_LOG(Error, "leader election failed").With("error", ran.ToString());
  }
  stop.request_stop();
  if (leader_thread.joinable()) leader_thread.join();
  return ran.ok() || standby_stopped ? code.load() : 1;
}

}  // namespace sluice::kube
