// The policies the simulator compares, each a Controller deciding from what the cluster shows at a
// decision (Observation) — never from the scenario's hidden parameters, except the oracle, which is
// clairvoyant on purpose:
//
//   collocated   no service: preprocessing on the accelerator hosts' spare CPU only (LocalOnly)
//   fixed        tf.data service as users deploy it: a fixed count of remote workers, sized once
//   hpa          Kubernetes' HorizontalPodAutoscaler on 80% worker CPU, with its real algorithm
//                (tolerance 0.1, unready and missing pods, 300 s scale-down stabilization, rate limits)
//   cachew       Cachew's hill climb: +1 remote worker per measurement while throughput gains >= 7%
//   pecan        Pecan's AutoPlacement: Cachew's climb with remote workers, then one local in and one
//                remote out per step while throughput stays within 10% of the climb's, then frozen
//   sluice       the real autoscaler::Decide() (autoscaler/policy, autoscaler/placement) through the
//                adapter below, which carries its history between decisions as the controller does
//   oracle       the cheapest mix that never stalls, chosen per phase (between two scenario events)
//                by search over simulated runs, switched at once at each phase start
//   best-static  the cheapest single mix that never stalls over the whole run, by the same search
//
// Controllers are single-threaded (one per run); SluicePolicyConfig and the searches are pure.
#ifndef SLUICE_SIM_POLICIES_POLICIES_H_
#define SLUICE_SIM_POLICIES_POLICIES_H_

#include <memory>
#include <string>
#include <vector>

#include "autoscaler/policy/policy.h"
#include "sim/model/simulation.h"

namespace sluice::sim {

// --- Sluice ------------------------------------------------------------------------------------

// The PolicyConfig a DataService in this scenario would carry: Hybrid placement, the scenario's
// prices (accelerator per host, remote CPU per core), worker CPUs, maxReplicas; defaults otherwise.
autoscaler::PolicyConfig SluicePolicyConfig(const Scenario& scenario);

// The adapter: Observation -> Target + Signals -> autoscaler::Decide -> Action; the policy's history
// is kept between decisions (the controller keeps it in status.autoscaler).
class SluiceController : public Controller {
 public:
  explicit SluiceController(autoscaler::PolicyConfig config, std::string name = "sluice");
  std::string Name() const override { return name_; }
  Action Initial(const Scenario& scenario) override;
  Action Decide(const Observation& observation) override;

  // Every decision the policy returned, in order (for tests and the decision log).
  const std::vector<autoscaler::Decision>& decisions() const { return decisions_; }

  // The Target the controller derives from what the API server shows.
  static autoscaler::Target TargetFrom(const Observation& observation);

 private:
  autoscaler::PolicyConfig config_;
  std::string name_;
  autoscaler::PolicyHistory history_;
  std::vector<autoscaler::Decision> decisions_;
};

// --- Baselines ---------------------------------------------------------------------------------

std::unique_ptr<Controller> MakeCollocated();

// A fixed count of remote workers. FixedRemoteSize: what a user sizes it to from an offline
// measurement of the initial workload: the workers that workload needs, plus 20%.
int FixedRemoteSize(const Scenario& scenario);
std::unique_ptr<Controller> MakeFixedRemote(int workers);

struct HpaConfig {
  double target_utilization = 0.8;
  double tolerance = 0.1;
  int scale_down_window_s = 300;
  int min_replicas = 1;
  int max_replicas = 64;
};
std::unique_ptr<Controller> MakeHpa(const HpaConfig& config);

struct HillClimbConfig {
  double min_gain = 0.07;         // Cachew: stop adding once one more worker gains less
  double placement_slack = 0.10;  // Pecan: local-in/remote-out while throughput stays within this
  int max_replicas = 64;
};
std::unique_ptr<Controller> MakeCachew(const HillClimbConfig& config);
std::unique_ptr<Controller> MakePecan(const HillClimbConfig& config);

// --- Oracle ------------------------------------------------------------------------------------

struct Mix {
  int local = 0;
  int remote = 0;
  bool operator==(const Mix&) const = default;
};

// A clairvoyant schedule: at each phase start the mix switches at once (workers ready instantly).
struct OracleSchedule {
  std::vector<int> starts;  // phase start times (PhaseBoundaries)
  std::vector<Mix> mixes;   // one per phase
  bool never_stalls = true; // false when some phase could not be kept under the target by any mix searched
};
std::unique_ptr<Controller> MakeScheduled(const OracleSchedule& schedule, std::string name);

// The service level every policy is held to: in every decision period the stall stays under
// `target_stall` and local workers slow the trainers by at most `max_interference` (Sluice's and
// Pecan's interference tolerance: a mix that saves money by slowing training more is not one a user
// asked for).
struct ServiceLevel {
  double target_stall = 0.05;
  double max_interference = 0.10;
};

// Per phase (`per_phase`) or for the whole run, the cheapest mix (cost per element) whose every
// decision period meets `level`; local in [0, capacity], remote by binary search. Runs the
// simulator for each candidate.
OracleSchedule FindOracle(const Scenario& scenario, const RunOptions& options, const ServiceLevel& level,
                          bool per_phase);

}  // namespace sluice::sim

#endif  // SLUICE_SIM_POLICIES_POLICIES_H_
