// The cluster simulator's core: a discrete-event loop (an event queue of scenario events, decisions,
// scrapes and pod lifecycle events) around a fluid data plane advanced one second at a time
// (workers fill their buffers at their CPU-bound rate, trainers read them at their compute-bound
// rate and wait when they are empty). A Controller — a baseline policy or the adapter around the
// real autoscaling policy — is asked for a decision every decision period; it sees what the real
// metric sources would show (rates over a window of scraped counters, with outages) and the
// DataService's pods, and answers with the DataService's new size and split. A modelled operator
// carries that out: named removals are drained, pools are trimmed or filled (local pods on the host
// with the most free slots), new pods register after their start latency.
//
// Everything is deterministic for a given scenario (seeded, counter-based noise). A Simulation is
// single-threaded; it is copyable, so a search (the oracle) can branch a run at any time.
#ifndef SLUICE_SIM_MODEL_SIMULATION_H_
#define SLUICE_SIM_MODEL_SIMULATION_H_

#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <queue>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "autoscaler/placement/placement.h"
#include "autoscaler/policy/signals.h"
#include "sim/model/scenario.h"

namespace sluice::sim {

// The simulator's second 0 as an absl::Time (what the policy is told).
absl::Time SimTime(int64_t seconds);

struct RunOptions {
  int decision_period_s = 15;    // the autoscaler's period (and HPA's sync period)
  int scrape_interval_s = 15;    // Prometheus' scrape interval
  int rate_window_s = 60;        // W of rate(...[W]) in docs/metrics.md
  int recent_window_s = 30;      // the recent window the sources also report (two scrapes)
  int heartbeat_timeout_s = 5;   // the dispatcher's --worker_timeout_ms
  int drain_timeout_s = 120;     // a drained worker's buffer not read by then is lost
  int restart_start_s = 5;       // a crashed container's restart until it registers again
  int backoff_base_s = 10;       // CrashLoopBackOff: 10 s, doubling ...
  int backoff_cap_s = 300;       // ... up to 5 min
  int staleness_s = 300;         // Prometheus returns a gauge's last sample up to this old
};

// One pod of the DataService as the API server shows it.
struct PodView {
  std::string name;
  bool local = false;
  bool ready = false;     // registered and producing
  bool draining = false;  // being removed
  int created_s = 0;
  int ready_s = -1;       // when it became ready (-1: not yet), as the Ready condition's transition time
};

// What a controller sees at a decision.
struct Observation {
  int now_s = 0;
  absl::Time now;
  autoscaler::Signals signals;                  // the metric source's view over the rate window
  std::map<std::string, double> pod_cpu;        // CPU cores each pod used over the window (HPA); absent: no data
  bool pod_cpu_available = true;                // false while the metrics API answers nothing
  int replicas = 0;                             // spec.workers.replicas
  std::optional<int> local;                     // spec.workers.local
  int local_capacity = 0;                       // status.localCapacity
  int consumer_nodes = 0;                       // accelerator hosts running trainers
  std::vector<PodView> pods;                    // not deleted yet
  int worker_cores = 0;
};

// A controller's answer. Without `act` nothing changes.
struct Action {
  bool act = false;
  int replicas = 0;
  autoscaler::Placement placement = autoscaler::Placement::kRemoteOnly;
  std::optional<int> local;              // Hybrid: local workers wanted (the operator caps it at capacity)
  std::vector<std::string> remove;       // workersToDelete
  bool instant = false;                  // the oracle and collocated preprocessing: ready at once, no pods to start
  int surge_released = 0;                // of the workers removed, those only kept until a shift's replacements
                                         // served (make before break): the end of a shift, not a scale-down
  std::string note;                      // why (for the decision log)
};

class Controller {
 public:
  virtual ~Controller() = default;
  virtual std::string Name() const = 0;
  // The DataService when the scenario starts (its workers are ready at second 0).
  virtual Action Initial(const Scenario& scenario) = 0;
  virtual Action Decide(const Observation& observation) = 0;
};

// The decision period [t_end - period, t_end): what the trainers and the cluster did.
struct PeriodRecord {
  int t_end = 0;
  double stall = 0;        // wait seconds / step seconds of all running trainers (0 when none runs)
  double consumed = 0;     // elements
  double wanted = 0;       // elements the trainers would have read without waiting
  double step_seconds = 0;
  double interference = 0;  // the trainers' mean slowdown from local workers (0.08: compute 8% slower)
  int local_ready = 0, remote_ready = 0;  // registered, producing workers at t_end
  int local_pods = 0, remote_pods = 0;    // pods that exist at t_end (starting, ready, crashed, draining)
  int replicas = 0;                       // spec at t_end
  double accelerator_dollars = 0;         // cumulative at t_end
  double remote_dollars = 0;              // cumulative at t_end
};

struct DecisionRecord {
  int t = 0;
  bool act = false;
  int replicas_before = 0, replicas_after = 0;
  int local_after = 0;
  bool missing_data = false;   // any input measurement was missing or stale
  std::string note;
};

// Elements and money over a whole run. Work is conserved:
// produced = consumed + buffered + lost_crash + lost_drain + lost_evicted.
struct RunTotals {
  double produced = 0, consumed = 0, buffered = 0;
  double lost_crash = 0;       // in a crashed worker's buffer
  double lost_drain = 0;       // in a drained worker's buffer at its drain timeout (scale-down loss)
  double lost_evicted = 0;     // in a local worker's buffer when its host went away with its job
  double wait_seconds = 0, step_seconds = 0;
  double job_seconds = 0;      // seconds of running trainers, summed over jobs
  double accelerator_dollars = 0, remote_dollars = 0;
  double remote_pod_seconds = 0, local_worker_seconds = 0;
  int scale_downs_on_missing_data = 0;
  int scaling_decisions = 0;   // decisions that acted
};

struct RunResult {
  std::string policy;
  std::vector<PeriodRecord> periods;
  std::vector<DecisionRecord> decisions;
  RunTotals totals;
};

class Simulation {
 public:
  Simulation(const Scenario& scenario, const RunOptions& options);

  // Applies the controller's initial action and runs to the horizon.
  RunResult Run(Controller& controller);

  // For searches (the oracle): start, then run to a time, copy, and continue each copy with its own
  // controller. `RunUntil` stops before the events of `t_s` are processed.
  void Start(Controller& controller);
  void RunUntil(Controller& controller, int t_s);
  RunResult Finish(Controller& controller);
  int now_s() const { return now_s_; }
  // The periods and totals so far (the totals' element counts are filled in by Finish).
  const RunResult& progress() const { return result_; }
  const Scenario& scenario() const { return scenario_; }

 private:
  enum class EventType { kScenario, kPodReady, kCrash, kRestart, kHeartbeatTimeout, kScrape, kDecision };
  struct Event {
    int t = 0;
    int order = 0;  // within one second: scenario, pod lifecycle, scrape, decision
    uint64_t seq = 0;
    EventType type = EventType::kScenario;
    int index = 0;       // scenario event index or worker id
    int generation = 0;  // a worker's life the event belongs to
    bool operator>(const Event& o) const {
      if (t != o.t) return t > o.t;
      if (order != o.order) return order > o.order;
      return seq > o.seq;
    }
  };
  enum class Phase { kStarting, kReady, kCrashed, kDraining, kGone };
  struct Worker {
    int id = 0;
    std::string name;
    bool local = false;
    int host = -1;
    Phase phase = Phase::kStarting;
    bool registered = false;
    int created_s = 0;
    int ready_s = -1;
    int generation = 0;
    double speed = 1;
    double buffer = 0;
    double busy_total = 0;
    bool crashy = false;
    int crashes = 0;
    int drain_started_s = 0;
    double busy_fraction = 0;  // of its cores, last second
  };
  struct Host {
    int job = 0;
    int slots = 0;
  };
  struct Sample {
    int t = 0;
    double consumed = 0, wait = 0, step = 0, compute = 0, produced = 0, busy = 0, heartbeat_removals = 0;
    double buffered = 0;
    int registered = 0, registered_local = 0;
    std::map<std::string, double> pod_busy;  // ready pods' CPU seconds so far
  };
  struct Outage {
    OutageKind kind;
    int until_s;
  };

  void Push(int t, EventType type, int index = 0, int generation = 0);
  void Handle(const Event& e, Controller& controller);
  void HandleScenarioEvent(const ScenarioEvent& ev);
  void Decide(Controller& controller);
  void Apply(const Action& a);
  void Reconcile();
  void CreateWorker(bool local, int host);
  void RemoveWorker(Worker& w);  // starts a drain (or deletes a pod that holds nothing)
  void Gone(Worker& w);
  void Crash(Worker& w);
  void Scrape();
  Observation Observe() const;
  autoscaler::Signals Query() const;
  void Step();  // advance the fluid by one second
  bool JobActive(int job) const;
  int LocalCapacity() const;
  int ActiveHosts() const;
  double Slowdown(int job) const;  // from the local workers on the job's hosts, last second
  double ComputePerElement(int job) const;
  void ClosePeriod();

  Scenario scenario_;
  RunOptions options_;
  int now_s_ = 0;
  uint64_t seq_ = 0;
  std::priority_queue<Event, std::vector<Event>, std::greater<Event>> events_;
  std::vector<Worker> workers_;
  std::vector<Host> hosts_;
  std::vector<double> compute_scale_;       // per job
  std::vector<double> interference_;        // per job
  int next_local_name_ = 0, next_remote_name_ = 0;

  // The DataService spec the controller writes.
  int replicas_ = 0;
  autoscaler::Placement placement_ = autoscaler::Placement::kRemoteOnly;
  std::optional<int> local_;
  bool instant_ = false;

  // Counters (cumulative) and the scrape history.
  double consumed_ = 0, wait_ = 0, step_ = 0, compute_ = 0, produced_ = 0, busy_ = 0, heartbeat_removals_ = 0;
  std::deque<Sample> samples_;
  std::vector<Outage> outages_;
  int crash_loop_until_ = -1;
  int crash_run_seconds_ = 0;

  // Accumulators for the current period and the run.
  PeriodRecord period_;
  RunResult result_;
  bool started_ = false;
};

}  // namespace sluice::sim

#endif  // SLUICE_SIM_MODEL_SIMULATION_H_
