// Reading AutoOrder's report from the dispatcher: the pure mapping to status.autoOrder, the gRPC
// reader's error path, and — when the build has it — the real sluice-dispatcher started with
// --auto_order and a default pipeline.
#include "operator/dispatcher_auto_order.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <regex>
#include <sstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "testing/test_util.h"

namespace sluice::op {
namespace {

TEST_CASE("AutoOrderFromState: the default dataset's report, or why there is none") {
  service::GetStateResponse state;
  CHECK(AutoOrderFromState(state).message == "the dispatcher serves no default pipeline");
  state.set_default_dataset_id("abc");
  AutoOrderStatus none = AutoOrderFromState(state);
  CHECK(none.outcome.empty());
  CHECK_THAT(none.message, Catch::Contains("reports no AutoOrder for its pipeline"));
  pipeline::AutoOrderReport& r = (*state.mutable_auto_order())["abc"];
  r.set_mode("strict");
  r.set_outcome("applied");
  r.add_original_order("cast(x->float32)");
  r.add_original_order("random_crop(x)");
  r.add_chosen_order("random_crop(x)");
  r.add_chosen_order("cast(x->float32)");
  r.set_predicted_speedup(3.5);
  r.set_measured_speedup(3.25);
  (*state.mutable_auto_order())["other"].set_outcome("refused");  // another client's dataset: not ours
  AutoOrderStatus s = AutoOrderFromState(state);
  CHECK(s == AutoOrderStatus{"strict", "applied", "cast(x->float32) -> random_crop(x)", "random_crop(x) -> cast(x->float32)",
                             3.5, 3.25, ""});
}

TEST_CASE("GrpcAutoOrderReader names the dispatcher it could not ask") {
  GrpcAutoOrderReaderOptions options;
  options.rpc_timeout = absl::Seconds(2);
  GrpcAutoOrderReader reader(options);
  ReadAutoOrder read;
  read.dispatcher_endpoint = "127.0.0.1:1";  // nothing listens on port 1
  absl::StatusOr<AutoOrderStatus> status = reader.Read(read);
  REQUIRE(!status.ok());
  CHECK_THAT(std::string(status.status().message()), Catch::Contains("GetState at dispatcher 127.0.0.1:1"));
  CHECK(!reader.Read(ReadAutoOrder{}).ok());
}

#ifdef SLUICE_DISPATCHER_BINARY
TEST_CASE("GrpcAutoOrderReader against the real sluice-dispatcher with --auto_order", "[integration]") {
  sluice::testing::TempDir dir;
  const std::string spec = dir.File("p.yaml");
  sluice::testing::WriteFile(spec, R"(source: {synthetic: {count: 64, shape: [128, 128, 3], dtype: uint8, split_size: 8}}
steps:
  - cast: {field: data, dtype: float32}
  - random_crop: {field: data, size: [8, 8]}
)");
  const std::string log = dir.File("dispatcher.log");
  pid_t pid = fork();
  if (pid == 0) {
    int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fd, 1);
    dup2(fd, 2);
    const char* binary = std::getenv("SLUICE_DISPATCHER_BINARY");
    if (binary == nullptr || *binary == '\0') binary = SLUICE_DISPATCHER_BINARY;
    const std::string pipeline = "--pipeline=" + spec;
    execl(binary, "sluice-dispatcher", "--port=0", "--metrics_port=-1", "--listen_host=127.0.0.1",
          "--auto_order=relaxed", "--auto_order_sample=16", pipeline.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  REQUIRE(pid > 0);
  int port = 0;
  const absl::Time deadline = absl::Now() + absl::Seconds(60);
  const std::regex listening(R"(msg=listening port=(\d+))");
  while (port == 0 && absl::Now() < deadline) {
    std::ifstream in(log);
    std::stringstream text;
    text << in.rdbuf();
    const std::string s = text.str();
    std::smatch m;
    if (std::regex_search(s, m, listening)) port = std::stoi(m[1]);
    if (port == 0) std::this_thread::sleep_for(std::chrono::milliseconds(20));  // polling for the log line
  }
  std::string logged;
  {
    std::ifstream in(log);
    std::stringstream text;
    text << in.rdbuf();
    logged = text.str();
  }
  INFO(logged);
  REQUIRE(port > 0);
  GrpcAutoOrderReader reader(GrpcAutoOrderReaderOptions{});
  ReadAutoOrder read;
  read.dispatcher_endpoint = absl::StrCat("127.0.0.1:", port);
  absl::StatusOr<AutoOrderStatus> status = reader.Read(read);
  kill(pid, SIGKILL);
  waitpid(pid, nullptr, 0);
  REQUIRE(status.ok());
  CHECK(status->mode == "relaxed");
  CHECK(status->original_order == "cast(data->float32) -> random_crop(data)");
  // Applied unless the sample happened to measure no gain; either way the outcome is reported.
  CHECK((status->outcome == "applied" || status->outcome == "unchanged"));
  if (status->outcome == "applied") CHECK(status->chosen_order == "random_crop(data) -> cast(data->float32)");
  CHECK_THAT(logged, Catch::Contains("msg=autoorder"));
}
#endif

}  // namespace
}  // namespace sluice::op
