// The scenarios `sluice bench autoscale` runs: Pecan's workloads (ResNet-50 on TPU v2-8 and v3-8,
// RetinaNet, SimCLR, ASR) calibrated to the remote workers Cachew needed for them, and dynamic ones
// the papers do not cover (a demand step, a second trainer, local capacity lost, metric outages, a
// worker crash loop, interference that changes). Data: a table in scenarios.cc; every number and
// where it comes from is in docs/autoscaling.md.
#ifndef SLUICE_SIM_SCENARIOS_SCENARIOS_H_
#define SLUICE_SIM_SCENARIOS_SCENARIOS_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "sim/model/scenario.h"

namespace sluice::sim {

// All scenarios, in the order they are reported.
const std::vector<Scenario>& AllScenarios();

// The scenario called `name`; NotFound lists the names there are.
absl::StatusOr<Scenario> FindScenario(const std::string& name);

}  // namespace sluice::sim

#endif  // SLUICE_SIM_SCENARIOS_SCENARIOS_H_
