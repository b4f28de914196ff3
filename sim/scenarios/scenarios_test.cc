// The scenario table: every scenario is valid, the Pecan workloads are calibrated to the remote
// workers Cachew needed, names are unique and an unknown one is refused with the list.
#include "sim/scenarios/scenarios.h"

#include <catch2/catch.hpp>
#include <set>

namespace sluice::sim {
namespace {

TEST_CASE("every scenario validates and names are unique") {
  std::set<std::string> names;
  for (const Scenario& s : AllScenarios()) {
    INFO(s.name);
    absl::Status st = Validate(s);
    INFO(st.message());
    CHECK(st.ok());
    CHECK(names.insert(s.name).second);
  }
  CHECK(names.size() >= 11);
}

TEST_CASE("Pecan's workloads need the remote workers Cachew used (remote only, exactly enough)") {
  int pecan = 0;
  for (const Scenario& s : AllScenarios()) {
    if (!s.paper.cachew_remote_workers) continue;
    ++pecan;
    INFO(s.name);
    const double need = (1.0 / s.jobs[0].compute_seconds_per_element) * s.pipeline.cpu_seconds_per_element / s.remote.cores;
    CHECK(need == Approx(*s.paper.cachew_remote_workers));
    CHECK(s.remote.hourly == 0.42);
    CHECK((s.accelerator.hourly == 4.96 || s.accelerator.hourly == 8.8));
  }
  CHECK(pecan == 5);
}

TEST_CASE("an unknown scenario is refused with the names there are") {
  CHECK(FindScenario("demand-step").ok());
  absl::StatusOr<Scenario> s = FindScenario("nope");
  CHECK(s.status().code() == absl::StatusCode::kNotFound);
  CHECK(std::string(s.status().message()).find("demand-step") != std::string::npos);
}

}  // namespace
}  // namespace sluice::sim
