// The `sluice` command-line tool: pipeline checking and local runs, benchmarks, and (with the
// data service) `sluice up`.
#include <CLI/CLI.hpp>
#include <iostream>

#include "common/runtime_tuning.h"
#include "tools/sluice/pipeline_commands.h"
#ifdef SLUICE_HAVE_PIPELINE_BENCH
#include "bench/pipeline/pipeline_bench.h"
#endif
#ifdef HAVE_SLUICE_CLI_DATASERVICE
#include "tools/sluice/dataservice_commands.h"
#endif
#ifdef HAVE_SLUICE_BENCH_DATASERVICE
#include "bench/dataservice_benchmarks.h"
#endif
#ifdef SLUICE_HAVE_OPERATOR_BENCH
#include "bench/operator/operator_bench.h"
#endif
#ifdef SLUICE_HAVE_AUTOSCALER_BENCH
#include "bench/autoscaler/autoscaler_bench.h"
#endif
#ifdef SLUICE_HAVE_AUTOSCALE_BENCH
#include "bench/autoscale/autoscale_bench.h"
#endif
#ifdef SLUICE_HAVE_AUTOORDER_BENCH
#include "bench/autoorder/autoorder_bench.h"
#endif
#ifdef SLUICE_HAVE_OVERHEAD_BENCH
#include "bench/overhead/overhead_bench.h"
#endif

int main(int argc, char** argv) {
  // The benchmarks and `sluice up` read the data service in this process.
  sluice::TuneRuntime();
  CLI::App app{"Sluice: a disaggregated, autoscaled input-data service for ML training"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "sluice 0.1.0");
  int rc = 0;

  // sluice pipeline ...
  auto* pipeline = app.add_subcommand("pipeline", "Check, explain and run pipeline specs locally");
  pipeline->require_subcommand(1);
  std::string file;
  auto* check = pipeline->add_subcommand("check", "Validate a spec and print its normalized plan");
  check->add_option("file", file, "pipeline spec (YAML or JSON)")->required();
  check->callback([&] { rc = sluice::cli::PipelineCheck(file, std::cout, std::cerr); });

  sluice::cli::AutoOrderFlags explain_order;
  auto* explain = pipeline->add_subcommand("explain", "Print the stages after optimisation (fusions, parallelism, AutoOrder)");
  explain->add_option("file", file, "pipeline spec")->required();
  explain->add_option("--auto-order", explain_order.mode,
                      "reorder ops first: strict (exact swaps, output verified identical) or relaxed (approximate "
                      "swaps too); prints the orders, measured costs and speed-up (reads a sample of the input)");
  explain->add_option("--auto-order-sample", explain_order.sample, "elements sampled at each reorderable part");
  explain->callback([&] { rc = sluice::cli::PipelineExplain(file, explain_order, std::cout, std::cerr); });

  sluice::cli::RunOptions run_options;
  bool no_autotune = false, quiet = false;
  auto* run = pipeline->add_subcommand("run", "Run a spec locally; report throughput and a per-stage table");
  run->add_option("file", file, "pipeline spec")->required();
  run->add_option("--take", run_options.take, "stop after N output elements");
  run->add_option("--cpu", run_options.cpu_budget, "CPU budget (threads); default: the spec's, else all cores");
  run->add_flag("--no-autotune", no_autotune, "keep parallelism and prefetch depths as given");
  run->add_flag("--quiet", quiet, "no progress line");
  run->add_flag("--json", run_options.json, "print the summary as one JSON object");
  run->add_option("--auto-order", run_options.auto_order.mode,
                  "reorder ops first (off, strict or relaxed); the AutoOrder report goes to stderr");
  run->add_option("--auto-order-sample", run_options.auto_order.sample, "elements sampled at each reorderable part");
  run->callback([&] {
    run_options.autotune = !no_autotune;
    run_options.progress = !quiet;
    rc = sluice::cli::PipelineRun(file, run_options, std::cout, std::cerr);
  });

  bool markdown = false, order_properties = false;
  auto* ops = pipeline->add_subcommand("ops", "List sources, steps and ops with their arguments");
  ops->add_flag("--markdown", markdown, "print as Markdown (docs/pipeline-reference.md)");
  ops->add_flag("--order-properties", order_properties,
                "print what AutoOrder may rely on about each op, as Markdown (docs/autoorder-properties.md)");
  ops->callback([&] {
    rc = order_properties ? sluice::cli::PipelineOrderProperties(std::cout) : sluice::cli::PipelineOps(markdown, std::cout);
  });

  // sluice bench ...
  auto* bench = app.add_subcommand("bench", "Benchmarks (print progress, then one JSON line)");
  bench->require_subcommand(1);
#ifdef SLUICE_HAVE_PIPELINE_BENCH
  sluice::bench::PipelineBenchOptions pb;
  auto* bench_pipeline = bench->add_subcommand("pipeline", "ResNet-style JPEG pipeline: Sluice vs PyTorch DataLoader");
  sluice::bench::AddPipelineBenchFlags(bench_pipeline, pb);
  bench_pipeline->callback([&] { rc = sluice::bench::RunPipelineBenchmark(pb); });
#endif
#ifdef SLUICE_HAVE_AUTOORDER_BENCH
  sluice::bench::AutoOrderBenchOptions autoorder_bench;
  auto* bench_autoorder = bench->add_subcommand(
      "autoorder", "Three pipelines in natural order, as written vs as AutoOrder rewrites them (per CPU-second)");
  sluice::bench::AddAutoOrderBenchFlags(bench_autoorder, autoorder_bench);
  bench_autoorder->callback([&] { rc = sluice::bench::RunAutoOrderBenchmark(autoorder_bench); });
#endif
#ifdef HAVE_SLUICE_BENCH_DATASERVICE
  sluice::bench::AddDataServiceBenchmarks(bench, rc);
#endif
#ifdef SLUICE_HAVE_OVERHEAD_BENCH
  sluice::bench::OverheadBenchOptions overhead_bench;
  auto* bench_overhead = bench->add_subcommand(
      "overhead", "CPU per element of one pipeline in-process vs through the data service (dispatcher, worker, client)");
  sluice::bench::AddOverheadBenchFlags(bench_overhead, overhead_bench);
  bench_overhead->callback([&] { rc = sluice::bench::RunOverheadBenchmark(overhead_bench, std::cout, std::cerr); });
#endif
#ifdef SLUICE_HAVE_OPERATOR_BENCH
  sluice::bench::OperatorBenchOptions operator_bench;
  auto* bench_operator = bench->add_subcommand(
      "operator", "DataService operator at scale against the test API server and simulated nodes");
  sluice::bench::AddOperatorBenchFlags(bench_operator, operator_bench);
  bench_operator->callback([&] { rc = sluice::bench::RunOperatorBenchmark(operator_bench); });
#endif
#ifdef SLUICE_HAVE_AUTOSCALER_BENCH
  sluice::bench::AutoscalerBenchOptions autoscaler_bench;
  auto* bench_autoscaler = bench->add_subcommand(
      "autoscaler", "sluice-autoscaler's memory and CPU with many autoscaled DataServices (test API server)");
  sluice::bench::AddAutoscalerBenchFlags(bench_autoscaler, autoscaler_bench);
  bench_autoscaler->callback([&] { rc = sluice::bench::RunAutoscalerBenchmark(autoscaler_bench); });
#endif
#ifdef SLUICE_HAVE_AUTOSCALE_BENCH
  sluice::bench::AutoscaleBenchOptions autoscale_bench;
  auto* bench_autoscale = bench->add_subcommand(
      "autoscale", "Autoscaling policies on simulated clusters (Sluice's real policy vs HPA, Cachew, Pecan, oracle)");
  sluice::bench::AddAutoscaleBenchFlags(bench_autoscale, autoscale_bench);
  bench_autoscale->callback([&] { rc = sluice::bench::RunAutoscaleBenchmark(autoscale_bench, std::cout, std::cerr); });
#endif
#ifdef HAVE_SLUICE_CLI_DATASERVICE
  sluice::cli::AddDataServiceCommands(app, rc);
#endif

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  return rc;
}
