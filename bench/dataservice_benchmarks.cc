#include "bench/dataservice_benchmarks.h"

#include <memory>

#ifdef SLUICE_HAVE_TRANSFER_BENCH
#include "bench/transfer/transfer_bench.h"
#endif
#ifdef SLUICE_HAVE_SHARDING_BENCH
#include "bench/sharding/sharding_bench.h"
#endif
#ifdef SLUICE_HAVE_SCALEOUT_BENCH
#include "bench/scaleout/scaleout_bench.h"
#endif

namespace sluice::bench {

void AddDataServiceBenchmarks(CLI::App* bench, int& rc) {
#ifdef SLUICE_HAVE_TRANSFER_BENCH
  {
    auto options = std::make_shared<TransferBenchOptions>();
    auto* cmd = bench->add_subcommand("transfer", "Worker -> client throughput (1 KiB, 100 KiB, 1 MiB) vs raw gRPC");
    AddTransferBenchFlags(cmd, *options);
    cmd->callback([options, &rc] { rc = RunTransferBenchmark(*options); });
  }
#endif
#ifdef SLUICE_HAVE_SHARDING_BENCH
  {
    auto options = std::make_shared<ShardingBenchOptions>();
    auto* cmd = bench->add_subcommand("sharding", "Distributed epoch (dynamic sharding) vs parallel epochs, 2 workers");
    AddShardingBenchFlags(cmd, *options);
    cmd->callback([options, &rc] { rc = RunShardingBenchmark(*options); });
  }
#endif
#ifdef SLUICE_HAVE_SCALEOUT_BENCH
  {
    auto options = std::make_shared<ScaleoutBenchOptions>();
    auto* cmd = bench->add_subcommand("scaleout", "Throughput with 1, 2, 4, 8 CPU-limited workers");
    AddScaleoutBenchFlags(cmd, *options);
    cmd->callback([options, &rc] { rc = RunScaleoutBenchmark(*options); });
  }
#endif
  (void)bench;
  (void)rc;
}

}  // namespace sluice::bench
