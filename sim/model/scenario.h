// What one simulated cluster run is made of: the accelerator hosts, the remote CPU pool, the
// pipeline, the trainers (jobs) and the timed events that change them (phases, capacity, metric
// outages, crash loops). Plain data, written as C++ tables in sim/scenarios; Validate() checks a
// scenario before it runs and names the field that is wrong.
//
// Units: seconds (integers for times), elements, cores, dollars per hour.
#ifndef SLUICE_SIM_MODEL_SCENARIO_H_
#define SLUICE_SIM_MODEL_SCENARIO_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace sluice::sim {

// One kind of accelerator host (a TPU VM, a GPU node). Every job's hosts are of this kind.
struct AcceleratorSpec {
  std::string name;            // "TPU v3-8"
  double hourly = 0;           // $ per host per hour
  int host_cores = 0;          // vCPUs of the host
  int trainer_cores = 0;       // vCPUs the training loop itself uses
  int local_slots = 0;         // local worker slots per host (status.localCapacity per host)
  double ingress_gbps = 0;     // network into the host: caps elements read from remote workers
};

// The remote CPU pool: one worker per node.
struct RemotePoolSpec {
  std::string node_type = "n2-standard-8";
  int cores = 8;               // = the worker's CPUs (local workers get as many)
  double hourly = 0.42;        // $ per node per hour, billed from the pod's creation to its deletion
  int start_seconds = 60;      // node provisioning and pod start until the worker registers
  int quota = 0;               // most remote nodes at once; 0: no quota
};

struct PipelineSpec {
  std::string name;
  double cpu_seconds_per_element = 0;  // core-seconds one element costs a worker
  double bytes_per_element = 0;        // what a remote worker sends per element
  double buffer_seconds = 5;           // a worker buffers this many seconds of its output
};

// One trainer: it consumes elements as fast as its compute allows and waits (stalls) when none are
// ready. Local workers on its hosts slow its compute (interference).
struct JobSpec {
  std::string name;
  int start_s = 0;
  int end_s = 0;                      // 0: runs to the end of the scenario
  int hosts = 1;                      // accelerator hosts (a synchronous job: the slowest host sets the pace)
  double compute_seconds_per_element = 0;  // trainer time per element without waiting or interference
  double interference_per_worker = 0;      // relative slowdown of the trainer per fully busy local worker on its host
  double interference_quadratic = 0;       // + this x workers^2 (contention grows faster than linearly)
};

enum class OutageKind {
  kPrometheusDown,     // every query fails
  kScrapeGap,          // no scrapes: rates lose their samples, then the data is stale
  kClientSeriesMissing,  // the trainers' series are absent (stall, demand, compute); workers' are there
};
const char* OutageKindName(OutageKind k);

enum class EventKind {
  kComputeScale,     // job `job`: compute per element = base x value (0.5: twice the demand)
  kInterference,     // job `job`: interference_per_worker = value
  kLocalSlots,       // local slots per host = value (another tenant took or freed the CPU)
  kOutage,           // metrics outage of `outage` kind for `duration_s`
  kCrashLoop,        // `count` workers crash after every `run_seconds` of running, for `duration_s`
};
const char* EventKindName(EventKind k);

struct ScenarioEvent {
  int at_s = 0;
  EventKind kind = EventKind::kComputeScale;
  std::string label;       // "demand x2", shown in results and plots
  int job = 0;             // index into Scenario::jobs (kComputeScale, kInterference)
  double value = 0;
  OutageKind outage = OutageKind::kPrometheusDown;
  int duration_s = 0;
  int count = 0;
  int run_seconds = 0;
};

struct NoiseSpec {
  double compute_jitter = 0.03;  // relative s.d. of the trainers' compute time, per second
  double worker_jitter = 0.03;   // relative s.d. of a worker's speed, per second
  double worker_spread = 0.03;   // relative s.d. of a worker's speed, fixed per worker
};

// What a paper reported for this workload, to compare with.
struct PaperNumbers {
  std::optional<double> cachew_remote_workers;
  std::optional<double> pecan_remote_workers;
};

struct Scenario {
  std::string name;
  std::string description;
  AcceleratorSpec accelerator;
  RemotePoolSpec remote;
  PipelineSpec pipeline;
  std::vector<JobSpec> jobs;
  std::vector<ScenarioEvent> events;
  int horizon_s = 3600;
  double epoch_elements = 1'000'000;
  int local_start_seconds = 10;   // a local pod's start until it registers (image cached on the host)
  int max_workers = 64;           // the DataService's maxReplicas (all policies)
  NoiseSpec noise;
  uint64_t seed = 1;
  PaperNumbers paper;
};

// Event times and job starts and ends are multiples of this (the default decision period), so that
// a phase of the scenario starts at a decision and per-period figures are not split across phases.
inline constexpr int kTimeGrid = 15;

// Checks a scenario; the error names the scenario, the field and what to do.
absl::Status Validate(const Scenario& s);

// Times at which the workload or the capacity changes (job starts and ends, kComputeScale,
// kInterference, kLocalSlots, the start of a crash loop), with a label each, sorted; the first is
// the start of the scenario ("start"). These are the changes after which convergence is measured.
struct Change {
  int at_s = 0;
  std::string label;
};
std::vector<Change> Changes(const Scenario& s);

// Every time at which anything in the scenario changes (Changes plus outage and crash-loop starts
// and ends), sorted and unique, starting with 0: the oracle may pick a new mix at each.
std::vector<int> PhaseBoundaries(const Scenario& s);

}  // namespace sluice::sim

#endif  // SLUICE_SIM_MODEL_SCENARIO_H_
