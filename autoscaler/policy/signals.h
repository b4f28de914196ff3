// What the autoscaling policy observes about one DataService over one rate window: the trainers'
// stall and demand, the workers' supply and CPU, and the dispatcher's view of its workers. Every
// value is a Measurement that is either known or says why it is not (no series, NaN, stale, the
// query failed): the policy treats an unknown value as unknown, never as zero.
//
// Plain data; the metric sources (Prometheus, direct scrape, the simulator) fill it in.
#ifndef SLUICE_AUTOSCALER_POLICY_SIGNALS_H_
#define SLUICE_AUTOSCALER_POLICY_SIGNALS_H_

#include <optional>
#include <string>

#include "absl/time/time.h"

namespace sluice::autoscaler {

// One observed number, or why there is none.
struct Measurement {
  std::optional<double> value;
  std::string missing;  // set when !value: "no series", "NaN", "stale (last sample 3m0s old)", ...

  static Measurement Of(double v);
  static Measurement Missing(std::string why);
  bool known() const { return value.has_value(); }
  double operator*() const { return *value; }
};

struct Signals {
  // The end of the window the rates cover, and its length. `at` older than the policy's
  // max_signal_age makes every measurement stale.
  absl::Time at = absl::InfinitePast();
  absl::Duration window = absl::ZeroDuration();

  Measurement stall_ratio;          // trainers' wait seconds / step seconds, in [0, 1]
  Measurement demand;               // elements/s the trainers consumed
  Measurement supply;               // elements/s all workers produced
  Measurement worker_cpu;           // CPU cores all workers used together
  Measurement compute_per_element;  // trainer seconds per element not spent waiting: (step - wait) / elements
  Measurement buffered;             // elements produced and not yet read, over all workers
  Measurement churn;                // workers removed for missed heartbeats within the window
  Measurement workers;              // workers registered at the dispatcher (both placements)
  Measurement local_workers;        // of which local

  // The same rates over a short recent window (about two scrapes), so that a step in demand is seen
  // at once instead of a quarter of it; missing when the source has none. The policy scales up on
  // them while the recent stall is above target or the trainers' true demand over them exceeds the
  // window's (a demand step the window still averages with the time before it), and never scales
  // down on them alone.
  absl::Duration recent_window = absl::ZeroDuration();
  Measurement recent_stall_ratio;
  Measurement recent_demand;
  Measurement recent_supply;
  Measurement recent_worker_cpu;
  Measurement recent_workers;  // the workers the recent rates cover; missing: as `workers`
};

}  // namespace sluice::autoscaler

#endif  // SLUICE_AUTOSCALER_POLICY_SIGNALS_H_
