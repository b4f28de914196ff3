#include "bench/autoscale/autoscale_bench.h"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "sim/report/report.h"

namespace sluice::bench {

void AddAutoscaleBenchFlags(CLI::App* app, AutoscaleBenchOptions& o) {
  app->add_flag("--live", o.live,
                "the closed loop with real processes (dispatcher, workers under CPU quotas, the local autoscaler, a "
                "consumer) instead of the simulator");
  LiveAutoscaleOptions& l = o.live_options;
  app->add_flag("--smoke", l.smoke, "--live: a short schedule, no static runs (for tests)");
  app->add_option("--cpus-per-worker", l.cpus_per_worker, "--live: each worker's CPU quota (default 0.25)");
  app->add_option("--live-period", l.period_s, "--live: seconds between decisions (default 1)");
  app->add_option("--live-window", l.window_s, "--live: seconds of the rate window (default 8)");
  app->add_option("--scale-down-window", l.scale_down_window_s, "--live: scale-down stabilization, s (default 8)");
  app->add_option("--target-stall", l.target_stall, "--live: the stall ratio target (default 0.1)");
  app->add_option("--low-step-ms", l.low_step_ms, "--live: compute per element at low demand, ms (default 40)");
  app->add_option("--high-step-ms", l.high_step_ms, "--live: compute per element at the peak, ms (default 4)");
  app->add_option("--image-size", l.image_size, "--live: the workload's image side (CPU per element; default 768)");
  app->add_option("--max-workers", l.max_workers, "--live: most workers (default 6)");
  app->add_option("--scenario", o.scenarios, "run only these scenarios (repeatable; default: all)");
  app->add_option("--policy", o.policies, "run only these policies (repeatable; default: all)");
  app->add_option("--series-dir", o.series_dir, "write each scenario's time series (<scenario>.json) here, for plots");
  app->add_option("--markdown", o.markdown, "write the results table (Markdown) to this file");
  app->add_option("--rate-window", o.rate_window_s, "seconds of the metric rate window W (default 60)");
  app->add_option("--period", o.decision_period_s, "seconds between decisions (default 15)");
  app->add_option("--remote-start", o.remote_start_s,
                  "sensitivity: seconds from a remote pod's creation until its worker registers, in every scenario "
                  "(default: each scenario's own, 60)");
  app->add_option("--local-slots", o.local_slots,
                  "sensitivity: local worker slots per accelerator host in every scenario (default: each scenario's "
                  "own); events that change the slots still apply");
  app->add_flag("--quiet", o.quiet, "no progress lines");
}

namespace {

bool WriteFile(const std::string& path, const std::string& text, std::ostream& err) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f << text;
  f.close();
  if (!f) {
    err << "sluice bench autoscale: cannot write " << path << ": check that the directory exists and is writable\n";
    return false;
  }
  return true;
}

}  // namespace

int RunAutoscaleBenchmark(const AutoscaleBenchOptions& o, std::ostream& out, std::ostream& err) {
  if (o.live) {
#ifdef SLUICE_HAVE_LIVE_AUTOSCALE
    return RunLiveAutoscaleBenchmark(o.live_options, out, err);
#else
    err << "sluice bench autoscale --live: this build has no local autoscaler (autoscaler/local needs the "
           "local supervisor and the client)\n";
    return 2;
#endif
  }
  if (o.live_options.smoke) {
    err << "sluice bench autoscale: --smoke applies to --live only\n";
    return 2;
  }
  if (o.rate_window_s < 2 || o.decision_period_s < 1 || o.decision_period_s > 600) {
    err << "sluice bench autoscale: --rate-window must be >= 2 s and --period within [1, 600] s\n";
    return 2;
  }
  if (o.remote_start_s < 0 || o.remote_start_s > 3600 || o.local_slots < 0 || o.local_slots > 256) {
    err << "sluice bench autoscale: --remote-start must be within [0, 3600] s and --local-slots within [0, 256]\n";
    return 2;
  }
  if (!o.series_dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(o.series_dir, ec);
    if (ec || !std::filesystem::is_directory(o.series_dir)) {
      err << "sluice bench autoscale: --series-dir " << o.series_dir << " is not a directory I can create ("
          << ec.message() << ")\n";
      return 2;
    }
  }
  sim::SuiteOptions options;
  options.scenarios = o.scenarios;
  options.policies = o.policies;
  options.run.rate_window_s = o.rate_window_s;
  options.run.decision_period_s = o.decision_period_s;
  if (o.remote_start_s > 0 || o.local_slots > 0) {
    options.tune_scenario = [&o](sim::Scenario& s) {
      if (o.remote_start_s > 0) s.remote.start_seconds = o.remote_start_s;
      if (o.local_slots > 0) {
        // A host that lends more CPU: as many spare cores as the slots need.
        s.accelerator.local_slots = o.local_slots;
        s.accelerator.host_cores =
            std::max(s.accelerator.host_cores, s.accelerator.trainer_cores + o.local_slots * s.remote.cores);
      }
    };
  }
  if (!o.quiet) options.progress = [&err](const std::string& line) { err << line << "\n" << std::flush; };
  const auto start = std::chrono::steady_clock::now();
  absl::StatusOr<std::vector<sim::ScenarioOutcome>> outcomes = sim::RunSuite(options);
  if (!outcomes.ok()) {
    err << "sluice bench autoscale: " << outcomes.status().message() << "\n";
    return 2;
  }
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (!o.series_dir.empty()) {
    for (const sim::ScenarioOutcome& s : *outcomes) {
      if (!WriteFile((std::filesystem::path(o.series_dir) / (s.scenario.name + ".json")).string(), sim::SeriesJson(s),
                     err)) {
        return 2;
      }
    }
  }
  if (!o.markdown.empty() && !WriteFile(o.markdown, sim::MarkdownTable(*outcomes), err)) return 2;
  out << sim::SuiteJson(*outcomes, options, wall) << "\n" << std::flush;
  return 0;
}

}  // namespace sluice::bench
