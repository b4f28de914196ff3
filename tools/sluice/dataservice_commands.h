// `sluice up` and `sluice dispatcher-state`: the data service on one machine without Kubernetes.
//
// `sluice up` (the default: autoscaled) starts a sluice-dispatcher and ONE sluice-worker process
// (children, from the sluice binary's own directory, through the local process supervisor in
// local/), each worker under a CPU quota, the local autoscaler (autoscaler/local: the real policy
// over a direct scrape of the processes' /metrics) and a stand-in trainer at a chosen step time
// reading the demo workload. A live view prints a line per decision period (workers, throughput,
// stall) and each decision with its reason; the demand is high until the stall is under the
// target, then drops until the autoscaler has removed the workers it no longer needs (drained,
// nothing lost), then a summary. Each decision's logfmt line goes to <log dir>/autoscaler.log.
//
// `sluice up --no-autoscale` starts N workers (--workers, default 2), reads an example pipeline
// through the service with the C++ client (a stand-in trainer: progress line, then throughput, the
// stall ratio the client measured, and the elements each worker produced), and tears everything
// down — also on Ctrl-C. With --keep-running it then serves until Ctrl-C, printing the dispatcher
// address for other consumers.
// `sluice dispatcher-state ADDRESS` prints a dispatcher's GetState (workers and jobs).
//
// The Run* functions write their report to `out` and progress/errors to `err` and return an exit
// code. RunUp must be called from the main thread, before other threads start (it blocks
// SIGINT/SIGTERM, which every later thread inherits, and takes them with sigwait).
#ifndef SLUICE_TOOLS_SLUICE_DATASERVICE_COMMANDS_H_
#define SLUICE_TOOLS_SLUICE_DATASERVICE_COMMANDS_H_

#include <cstdint>
#include <iosfwd>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "dataplane/rpc/credentials.h"
#include "dataservice.pb.h"

namespace CLI {
class App;
}

namespace sluice::cli {

struct UpOptions {
  bool autoscale = true;          // false: --no-autoscale, a fixed number of workers
  int workers = 0;                // static: workers (0: 2); autoscaled: workers to start with (0: 1)
  // Autoscaled runs.
  int max_workers = 6;
  double cpus_per_worker = 0.25;  // each worker's CPU quota (0: none)
  double low_step_ms = 40;        // compute per element before and after the demand peak
  double target_stall = 0.10;
  double period_seconds = 1;      // between decisions
  double window_seconds = 8;      // the rate window
  double scale_down_window_seconds = 8;
  double phase_limit_seconds = 120;  // each demand phase ends at the latest after this long
  int image_size = 768;           // the demo workload's CPU per element
  // A real trainer instead of the simulated consumer (tools/sluice/trainer_process.h): its train
  // phase is the demand peak, its eval phase (nothing read) the drop.
  std::string trainer;            // "" | "fashion-mnist-cnn"
  double train_seconds = 60;
  double eval_seconds = 45;
  std::string prometheus_url;     // signals from Prometheus instead of the direct scrape
  std::string pipeline;           // spec file; empty: DefaultPipelinePath()
  std::string sharding = "dynamic";  // off | dynamic | file | data
  int64_t take = -1;              // stop reading after this many elements (-1: all; 0: do not read)
  double seconds = 0;             // stop reading after this long (0: no limit)
  double step_ms = -1;            // simulated training step per element (sleep), for the stall ratio
                                  // (-1: 0 static; autoscaled: 4, the demand peak)
  bool keep_running = false;      // after reading, serve until Ctrl-C
  std::string bin_dir;            // holds sluice-dispatcher and sluice-worker; empty: this binary's
  std::string log_dir;            // the processes' logs; empty: a new directory under $TMPDIR
  bool progress = true;           // progress line on `err`
  double progress_interval_seconds = 0.5;
};

int RunUp(const UpOptions& options, std::ostream& out, std::ostream& err);

// What an autoscaled `sluice up` did; the summary is printed from it.
struct AutoscaledUpReport {
  int64_t elements = 0;
  double seconds = 0;
  int64_t decisions = 0;
  int64_t scale_ups = 0;
  int64_t scale_downs = 0;
  int64_t holds_on_missing_data = 0;
  int64_t scale_downs_on_missing_data = 0;
  int64_t elements_lost = 0;
  int32_t peak_workers = 0;
  int32_t final_workers = 0;
  double worker_seconds = 0;
  double high_stall = -1;  // the stall over the last decisions of the peak (-1: unknown)
  double low_stall = -1;   // over the last decisions after the drop
  int64_t decisions_to_no_stall = -1;  // decisions from the stall's onset until it was under target
  bool interrupted = false;
};
std::string FormatAutoscaledUpReport(const AutoscaledUpReport& report, double target_stall);
// `tls` empty: plaintext; ca_file: TLS; cert_file + key_file too: mutual TLS.
int RunDispatcherState(const std::string& address, bool json, const rpc::TlsOptions& tls, std::ostream& out,
                       std::ostream& err);

// examples/pipelines/fashion_mnist.yaml, looked up in the working directory, then next to the
// source tree of the binary's build directory (<bin>/../../examples), then <bin>/../share/sluice.
std::string DefaultPipelinePath(const std::string& bin_dir);
// `relative` (a path in the source tree, e.g. examples/...) looked up the same way; nullopt if absent.
std::optional<std::string> FindProjectFile(const std::string& relative, const std::string& bin_dir);

// What `sluice up` read; the summary is printed from it.
struct UpReport {
  int64_t elements = 0;
  int64_t bytes = 0;
  double seconds = 0;              // from the first GetNext to the end of reading
  double wait_seconds = 0;         // the client's stall metrics
  double step_seconds = 0;
  bool finished = false;           // the job was read to its end
  bool interrupted = false;        // Ctrl-C / SIGTERM
  std::vector<std::pair<std::string, int64_t>> worker_elements;  // worker address -> produced
  int64_t splits_served = 0;       // dispatcher: splits handed out under dynamic sharding
  int64_t splits_total = 0;
};
std::string FormatUpReport(const UpReport& report);
// A human-readable table of a GetState answer.
std::string FormatDispatcherState(const service::GetStateResponse& state);

// Registers `up` and `dispatcher-state` on the sluice command line; the callbacks set `rc`.
void AddDataServiceCommands(CLI::App& app, int& rc);

}  // namespace sluice::cli

#endif  // SLUICE_TOOLS_SLUICE_DATASERVICE_COMMANDS_H_
