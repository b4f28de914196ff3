#include "bench/dataservice/bench_service.h"

#include <iostream>

#include "absl/strings/str_cat.h"

namespace sluice::bench {

local::LocalDataServiceOptions BenchServiceOptions(const std::string& bin_dir, const std::string& log_dir,
                                                   std::vector<std::string> dispatcher_flags) {
  local::LocalDataServiceOptions o;
  o.bin_dir = bin_dir.empty() ? local::ExecutableDir() : bin_dir;
  o.log_dir = log_dir;
  o.heartbeat_interval_ms = 100;
  o.worker_timeout_ms = 0;  // the dispatcher's default
  o.admin_servers = false;
  o.start_timeout = absl::Seconds(20);
  o.stop_timeout = absl::Seconds(3);
  o.dispatcher_flags = std::move(dispatcher_flags);
  return o;
}

absl::StatusOr<std::unique_ptr<local::LocalDataService>> StartBenchService(local::LocalDataServiceOptions options) {
  auto service = std::make_unique<local::LocalDataService>(std::move(options));
  if (absl::Status s = service->StartDispatcher(); !s.ok()) return s;
  return service;
}

absl::Status AddBenchWorker(local::LocalDataService& service, const local::WorkerOptions& worker) {
  local::WorkerOptions w = worker;
  w.wait_until_registered = true;
  auto added = service.AddWorker(w);
  return added.ok() ? absl::OkStatus() : added.status();
}

absl::Status StopAllWorkers(local::LocalDataService& service) {
  for (const local::WorkerStatus& w : service.ListWorkers()) {
    if (!w.serving()) continue;
    if (absl::Status s = service.StopWorker(w.index); !s.ok()) return s;
  }
  return service.WaitForWorkers(0, service.options().start_timeout);
}

void StopBenchService(std::unique_ptr<local::LocalDataService>& service) {
  if (service == nullptr) return;
  if (absl::Status s = service->StopGracefully(absl::Seconds(3)); !s.ok()) {
    std::cerr << "note: stopping the benchmark's processes: " << s.message() << "\n";
  }
  service.reset();
}

absl::StatusOr<service::Compression> ParseCompression(const std::string& name) {
  if (name == "none") return service::COMPRESSION_NONE;
  if (name == "auto") return service::COMPRESSION_AUTO;
  if (name == "lz4") return service::COMPRESSION_LZ4;
  if (name == "zstd") return service::COMPRESSION_ZSTD;
  return absl::InvalidArgumentError(absl::StrCat("--compression: '", name, "' is not one of none, auto, lz4, zstd"));
}

}  // namespace sluice::bench
