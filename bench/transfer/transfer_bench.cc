#include "bench/transfer/transfer_bench.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <memory>

#include "absl/strings/str_cat.h"
#include "bench/common/bench_util.h"
#include "bench/dataservice/bench_service.h"
#include "bench/transfer/raw_grpc.h"
#include "common/log.h"
#include "dataplane/client/data_service_client.h"
#include "local/child_process.h"

namespace sluice::bench {
namespace {

// The goals: Sluice's throughput over the baseline's at 100 KiB and more, and below.
constexpr double kTargetRatio = 0.9;
constexpr double kSmallTargetRatio = 0.7;
// What tf.data service users report per consumer (GB/s), for context in the result.
constexpr double kUpstreamReferenceGbps = 0.126;

absl::Status ValidateOptions(const TransferBenchOptions& o) {
  if (o.sizes.empty()) return absl::InvalidArgumentError("--sizes: give at least one element size");
  for (int64_t s : o.sizes) {
    if (s < 1 || s > (int64_t{64} << 20)) {
      return absl::InvalidArgumentError(absl::StrCat("--sizes: ", s, " is outside [1, 64 MiB]"));
    }
  }
  if (o.trials < 1) return absl::InvalidArgumentError(absl::StrCat("--trials must be >= 1, got ", o.trials));
  if (o.seconds <= 0) return absl::InvalidArgumentError(absl::StrCat("--seconds must be > 0, got ", o.seconds));
  if (o.warmup_seconds < 0) return absl::InvalidArgumentError(absl::StrCat("--warmup must be >= 0, got ", o.warmup_seconds));
  if (o.cache_bytes < 1) return absl::InvalidArgumentError(absl::StrCat("--cache_bytes must be >= 1, got ", o.cache_bytes));
  if (o.replay != "encoded" && o.replay != "elements") {
    return absl::InvalidArgumentError(absl::StrCat("--replay: '", o.replay, "' is not one of encoded, elements"));
  }
  return ParseCompression(o.compression).status();
}

// Reads a fresh anonymous job of `def` for the window; counts the `data` tensors' bytes.
absl::StatusOr<Throughput> ReadSluice(const std::string& dispatcher, const pipeline::PipelineDef& def,
                                      service::Compression compression, const ReadWindow& window,
                                      bool shared_memory) {
  client::DataServiceClientOptions o;
  o.shared_memory = shared_memory;
  o.dispatcher_address = dispatcher;
  o.pipeline = def;
  o.sharding = service::SHARDING_OFF;
  o.compression = compression;
  o.heartbeat_interval = absl::Milliseconds(100);
  auto created = client::DataServiceClient::Create(o);
  if (!created.ok()) return created.status();
  std::unique_ptr<client::DataServiceClient> c = *std::move(created);
  int64_t skipped = 0;
  absl::Time warm_from = absl::InfiniteFuture();
  absl::Time start = absl::InfiniteFuture();
  Throughput t;
  std::vector<double> cpu_before;
  while (true) {
    auto next = c->GetNext(absl::Seconds(30));
    if (!next.ok()) return next.status();
    if (!next->has_value()) return absl::DataLossError("the Sluice job ended before the measurement window closed");
    const absl::Time now = absl::Now();
    if (start == absl::InfiniteFuture()) {
      if (skipped < window.skip_elements) {
        if (++skipped == window.skip_elements) warm_from = now;
        continue;
      }
      if (warm_from == absl::InfiniteFuture()) warm_from = now;
      if (now - warm_from >= window.warmup) {
        start = now;
        cpu_before = SampleCpuSeconds(window.cpu_pids);
      }
      continue;
    }
    const pipeline::Tensor* data = (*next)->Find("data");
    if (data == nullptr) return absl::InternalError("a transfer element has no `data` field");
    t.bytes += static_cast<int64_t>(data->nbytes());
    ++t.elements;
    if (now - start >= window.measure) {
      t.seconds = absl::ToDoubleSeconds(now - start);
      t.cpu_seconds = SampleCpuSeconds(window.cpu_pids);
      for (size_t i = 0; i < t.cpu_seconds.size(); ++i) t.cpu_seconds[i] -= cpu_before[i];
      break;
    }
  }
  c->Cancel();
  return t;
}

std::string ExecutablePath() {
  std::error_code ec;
  auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::string() : exe.string();
}

int Fail(const absl::Status& status, const std::string& log_dir) {
  std::cerr << "transfer: " << status.message() << "\n";
  if (!log_dir.empty()) std::cerr << "transfer: the processes' logs are kept in " << log_dir << "\n";
  return 1;
}

}  // namespace

std::string SizeLabel(int64_t bytes) {
  if (bytes > 0 && bytes % (1024 * 1024) == 0) return absl::StrCat(bytes / (1024 * 1024), "m");
  if (bytes > 0 && bytes % 1024 == 0) return absl::StrCat(bytes / 1024, "k");
  return absl::StrCat(bytes, "b");
}

int64_t DistinctElements(int64_t element_bytes, int64_t cache_bytes) {
  if (element_bytes <= 0) return 16;
  return std::clamp<int64_t>(cache_bytes / element_bytes, 16, 4096);
}

std::string TransferPipelineSpec(int64_t element_bytes, int64_t distinct_elements, const std::string& replay) {
  // A bound far above the data: the pipeline's own cache never gives up, and the worker does not
  // serve it encoded (docs/dataservice-worker.md).
  const std::string cache =
      replay == "elements" ? absl::StrCat("{max_bytes: ", 4 * (element_bytes + 4096) * distinct_elements, "}") : "{}";
  return absl::StrCat("name: transfer-", SizeLabel(element_bytes), "\n",
                      "source: {synthetic: {count: ", distinct_elements, ", shape: [", element_bytes,
                      "], dtype: uint8, split_size: ", distinct_elements, "}}\n",
                      "steps:\n",
                      "  - cache: ", cache, "\n",
                      "  - repeat: {count: -1}\n");
}

double CpuSecondsPerGb(double cpu_seconds, int64_t bytes) {
  return bytes > 0 ? cpu_seconds / (static_cast<double>(bytes) / 1e9) : 0;
}

double PairedRatio(const std::vector<double>& sluice, const std::vector<double>& grpc) {
  std::vector<double> ratios;
  for (size_t i = 0; i < std::min(sluice.size(), grpc.size()); ++i) ratios.push_back(Ratio(sluice[i], grpc[i]));
  return Median(ratios);
}

double GbPerCpuSecond(double cpu_seconds_per_gb) { return cpu_seconds_per_gb > 0 ? 1.0 / cpu_seconds_per_gb : 0; }

nlohmann::json TransferResultJson(const std::vector<TransferSizeResult>& sizes, double target, double small_target,
                                  const nlohmann::json& extra) {
  nlohmann::json out = {{"benchmark", "transfer"}};
  nlohmann::json details = nlohmann::json::array();
  bool meets = true;
  bool judged = false;
  for (const auto& s : sizes) {
    const std::string label = SizeLabel(s.element_bytes);
    const double ratio = PairedRatio(s.sluice_gbps, s.grpc_gbps);
    const double sluice = Median(s.sluice_gbps);
    const double grpc = Median(s.grpc_gbps);
    out["ratio_" + label] = Round(ratio, 3);
    out["sluice_gbps_" + label] = Round(sluice, 3);
    out["grpc_gbps_" + label] = Round(grpc, 3);
    const double sluice_cpu = Median(s.sluice_server_cpu_per_gb) + Median(s.sluice_client_cpu_per_gb);
    const double grpc_cpu = Median(s.grpc_server_cpu_per_gb) + Median(s.grpc_client_cpu_per_gb);
    out["cpu_cost_ratio_" + label] = Round(Ratio(sluice_cpu, grpc_cpu), 3);
    // Payload GB per CPU-second of both processes (server + client): the number a busy machine
    // disturbs least.
    out["sluice_gb_per_cpu_s_" + label] = Round(GbPerCpuSecond(sluice_cpu), 3);
    out["grpc_gb_per_cpu_s_" + label] = Round(GbPerCpuSecond(grpc_cpu), 3);
    const double size_target = s.element_bytes >= 100 * 1024 ? target : small_target;
    judged = true;
    meets = meets && ratio >= size_target;
    nlohmann::json d = {{"element_bytes", s.element_bytes},
                        {"label", label},
                        {"ratio", Round(ratio, 3)},
                        {"target_ratio", size_target},
                        {"sluice_gbps_spread", Round(RelativeRange(s.sluice_gbps), 3)},
                        {"grpc_gbps_spread", Round(RelativeRange(s.grpc_gbps), 3)},
                        {"sluice_gb_per_cpu_s", Round(GbPerCpuSecond(sluice_cpu), 3)},
                        {"grpc_gb_per_cpu_s", Round(GbPerCpuSecond(grpc_cpu), 3)},
                        {"sluice_gbps", Round(sluice, 3)},
                        {"grpc_gbps", Round(grpc, 3)},
                        {"sluice_elements_per_second", Round(Median(s.sluice_elements_per_second), 0)},
                        {"sluice_worker_cpu_s_per_gb", Round(Median(s.sluice_server_cpu_per_gb), 3)},
                        {"grpc_server_cpu_s_per_gb", Round(Median(s.grpc_server_cpu_per_gb), 3)},
                        {"sluice_client_cpu_s_per_gb", Round(Median(s.sluice_client_cpu_per_gb), 3)},
                        {"grpc_client_cpu_s_per_gb", Round(Median(s.grpc_client_cpu_per_gb), 3)},
                        {"sluice_gbps_trials", nlohmann::json::array()},
                        {"grpc_gbps_trials", nlohmann::json::array()}};
    for (double v : s.sluice_gbps) d["sluice_gbps_trials"].push_back(Round(v, 3));
    for (double v : s.grpc_gbps) d["grpc_gbps_trials"].push_back(Round(v, 3));
    if (!s.shm_gbps.empty()) {
      const double shm_cpu = Median(s.shm_server_cpu_per_gb) + Median(s.shm_client_cpu_per_gb);
      out["shm_ratio_" + label] = Round(PairedRatio(s.shm_gbps, s.grpc_gbps), 3);
      out["sluice_shm_gbps_" + label] = Round(Median(s.shm_gbps), 3);
      out["sluice_shm_gb_per_cpu_s_" + label] = Round(GbPerCpuSecond(shm_cpu), 3);
      out["shm_cpu_cost_ratio_" + label] = Round(Ratio(shm_cpu, grpc_cpu), 3);
      d["shm_ratio"] = out["shm_ratio_" + label];
      d["sluice_shm_gbps"] = Round(Median(s.shm_gbps), 3);
      d["sluice_shm_gbps_spread"] = Round(RelativeRange(s.shm_gbps), 3);
      d["sluice_shm_gb_per_cpu_s"] = Round(GbPerCpuSecond(shm_cpu), 3);
      d["sluice_shm_worker_cpu_s_per_gb"] = Round(Median(s.shm_server_cpu_per_gb), 3);
      d["sluice_shm_client_cpu_s_per_gb"] = Round(Median(s.shm_client_cpu_per_gb), 3);
      d["sluice_shm_gbps_trials"] = nlohmann::json::array();
      for (double v : s.shm_gbps) d["sluice_shm_gbps_trials"].push_back(Round(v, 3));
    }
    details.push_back(std::move(d));
  }
  out["target_ratio"] = target;
  out["target_ratio_small"] = small_target;
  out["meets_target"] = judged && meets;
  out["sizes"] = std::move(details);
  for (const auto& [key, value] : extra.items()) out[key] = value;
  return out;
}

void AddTransferBenchFlags(CLI::App* app, TransferBenchOptions& o) {
  app->add_option("--sizes", o.sizes, "element sizes in bytes")->capture_default_str();
  app->add_option("--trials", o.trials, "trials per size and side (sides alternate)")->capture_default_str();
  app->add_option("--seconds", o.seconds, "measured seconds per trial")->capture_default_str();
  app->add_option("--warmup", o.warmup_seconds, "unmeasured seconds per trial after the first pass")->capture_default_str();
  app->add_option("--cache_bytes", o.cache_bytes, "bytes of distinct pre-made elements per size")->capture_default_str();
  app->add_option("--compression", o.compression, "the Sluice job's compression: none|auto|lz4|zstd")->capture_default_str();
  app->add_option("--replay", o.replay,
                  "encoded: the worker replays its cache as encoded (as the baseline sends pre-serialized "
                  "messages); elements: the pipeline's own cache, encoded again per replay")
      ->capture_default_str();
  app->add_option("--bin_dir", o.bin_dir, "directory of sluice-dispatcher and sluice-worker (default: this binary's)");
  app->add_flag("--keep_logs", o.keep_logs, "keep the processes' logs");
  app->add_flag("--shm_side,!--no_shm_side", o.shm_side,
                "also measure Sluice with same-host shared memory (shm_ratio_*; the headline ratio_* is over the "
                "socket)")
      ->capture_default_str();
  app->add_flag("--serve_raw_grpc", o.serve_raw_grpc, "internal: run as the raw gRPC server")->group("");
  app->add_option("--raw_port", o.raw_port, "internal: the raw gRPC server's port")->group("");
}

int RunTransferBenchmark(const TransferBenchOptions& o) {
  if (o.serve_raw_grpc) return RunRawServer(o.raw_port);
  if (absl::Status s = ValidateOptions(o); !s.ok()) return Fail(s, "");
  log::SetMinLevel(log::Level::kWarning);  // the client's start-up lines would drown the progress
  const service::Compression compression = *ParseCompression(o.compression);
  const MachineInfo machine_before = ReadMachineInfo();
  auto log_dir = MakeLogDir("transfer");
  if (!log_dir.ok()) return Fail(log_dir.status(), "");
  std::cout << "transfer: starting sluice-dispatcher, one sluice-worker and the raw gRPC server (logs in "
            << *log_dir << ")" << std::endl;

  auto ds = StartBenchService(BenchServiceOptions(o.bin_dir, *log_dir, {"--job_gc_grace_ms=0", "--tick_interval_ms=50"}));
  if (!ds.ok()) return Fail(ds.status(), *log_dir);
  if (absl::Status s = AddBenchWorker(**ds); !s.ok()) return Fail(s, *log_dir);
  local::ChildProcessOptions raw_options;
  raw_options.argv = {ExecutablePath(), "bench", "transfer", "--serve_raw_grpc"};
  raw_options.log_file = *log_dir + "/raw-grpc.log";
  auto raw_server = local::ChildProcess::Start(raw_options);
  if (!raw_server.ok()) return Fail(raw_server.status(), *log_dir);
  auto raw_line = (*raw_server)->WaitForLine("msg=listening", absl::Seconds(20));
  if (!raw_line.ok()) return Fail(raw_line.status(), *log_dir);
  auto raw_port = local::LogfmtInt(*raw_line, "port");
  if (!raw_port.ok()) return Fail(raw_port.status(), *log_dir);
  const std::string raw_address = absl::StrCat("127.0.0.1:", *raw_port);

  std::vector<TransferSizeResult> results;
  for (int64_t size : o.sizes) {
    const int64_t distinct = DistinctElements(size, o.cache_bytes);
    auto def = ParseBenchPipeline(TransferPipelineSpec(size, distinct, o.replay), "transfer");
    if (!def.ok()) return Fail(def.status(), *log_dir);
    raw::RawStreamRequest raw_request;
    raw_request.set_element_bytes(size);
    raw_request.set_distinct_elements(distinct);
    raw_request.set_max_response_bytes(1 << 20);  // the worker's default packing
    ReadWindow window;
    window.skip_elements = 2 * distinct;  // the first pass fills the cache
    window.warmup = absl::Seconds(o.warmup_seconds);
    window.measure = absl::Seconds(o.seconds);
    ReadWindow sluice_window = window, raw_window = window;
    sluice_window.cpu_pids = {(*ds)->worker(0).process->pid(), getpid()};
    raw_window.cpu_pids = {(*raw_server)->pid(), getpid()};
    TransferSizeResult r;
    r.element_bytes = size;
    // Sides: 0 raw gRPC, 1 Sluice over the socket, 2 Sluice with shared memory; odd trials in the
    // reverse order (ABBA against drift).
    const int sides = o.shm_side ? 3 : 2;
    for (int trial = 0; trial < o.trials; ++trial) {
      for (int k = 0; k < sides; ++k) {
        const int side = trial % 2 == 0 ? k : sides - 1 - k;
        const bool sluice_side = side > 0;
        const bool shm = side == 2;
        const char* name = side == 0 ? "grpc" : shm ? "sluice-shm" : "sluice";
        if (absl::Status s = (*ds)->WaitForJobsFinished(absl::Seconds(20)); !s.ok()) return Fail(s, *log_dir);
        auto t = sluice_side ? ReadSluice((*ds)->dispatcher_address(), *def, compression, sluice_window, shm)
                             : ReadRawStream(raw_address, raw_request, raw_window);
        if (!t.ok()) {
          return Fail(absl::Status(t.status().code(), absl::StrCat(sluice_side ? name : "raw gRPC", " read of ",
                                                                   SizeLabel(size), " elements failed: ",
                                                                   t.status().message())),
                      *log_dir);
        }
        const double server_cpu = CpuSecondsPerGb(t->cpu_seconds[0], t->bytes);
        const double client_cpu = CpuSecondsPerGb(t->cpu_seconds[1], t->bytes);
        if (shm) {
          r.shm_gbps.push_back(t->gbps());
          r.shm_server_cpu_per_gb.push_back(server_cpu);
          r.shm_client_cpu_per_gb.push_back(client_cpu);
        } else {
          (sluice_side ? r.sluice_gbps : r.grpc_gbps).push_back(t->gbps());
          (sluice_side ? r.sluice_server_cpu_per_gb : r.grpc_server_cpu_per_gb).push_back(server_cpu);
          (sluice_side ? r.sluice_client_cpu_per_gb : r.grpc_client_cpu_per_gb).push_back(client_cpu);
          if (sluice_side) r.sluice_elements_per_second.push_back(t->elements_per_second());
        }
        std::printf("transfer: %-5s trial %d/%d %-10s %7.3f GB/s %9.0f elements/s  CPU s/GB: server %.3f client %.3f\n",
                    SizeLabel(size).c_str(), trial + 1, o.trials, name, t->gbps(), t->elements_per_second(),
                    server_cpu, client_cpu);
        std::fflush(stdout);
      }
    }
    results.push_back(std::move(r));
  }
  const MachineInfo machine_after = ReadMachineInfo();
  nlohmann::json extra = {
      {"mode", "processes: sluice-dispatcher + 1 sluice-worker, client in the benchmark process; raw gRPC server "
               "in its own process"},
      {"baseline", "gRPC callback API both ends; server writes pre-serialized messages as shared ByteBuffer slices, "
                   "back to back from OnWriteDone; client parses on gRPC's thread into a 4-message queue the "
                   "consumer thread pops"},
      {"compression", o.compression},
      {"replay", o.replay},
      {"sluice_transport", "ratio_* and sluice_*: Sluice over the gRPC socket (client shared_memory off), as the "
                           "baseline has no shared memory; shm_* and sluice_shm_*: Sluice with same-host shared "
                           "memory (payloads > 16 KiB through the worker's ring; 1 KiB elements stay on the socket)"},
      {"trials", o.trials},
      {"seconds_per_trial", o.seconds},
      {"upstream_reference_gbps", kUpstreamReferenceGbps},
      {"machine", ToJson(machine_before)},
      {"load_avg_after", {machine_after.load1, machine_after.load5, machine_after.load15}},
  };
  (*raw_server)->Signal(SIGTERM);
  (void)(*raw_server)->Wait(absl::Seconds(3));
  raw_server->reset();
  StopBenchService(*ds);
  if (!o.keep_logs) RemoveLogDir(*log_dir);
  std::cout << TransferResultJson(results, kTargetRatio, kSmallTargetRatio, extra).dump() << std::endl;
  return 0;
}

}  // namespace sluice::bench
