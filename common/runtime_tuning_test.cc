#include "common/runtime_tuning.h"

#include <sys/resource.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

namespace sluice {
namespace {

TEST_CASE("DecideMallocTuning: off when disabled or when the user set glibc's variables") {
  CHECK_FALSE(DecideMallocTuning("0", nullptr, nullptr).applied);
  CHECK(DecideMallocTuning("0", nullptr, nullptr).reason == "SLUICE_MALLOC_TUNING=0");
  CHECK_FALSE(DecideMallocTuning(nullptr, "1048576", nullptr).applied);
  CHECK_FALSE(DecideMallocTuning(nullptr, nullptr, "1048576").applied);
  CHECK(DecideMallocTuning("1", nullptr, nullptr).applied);
  CHECK(DecideMallocTuning(nullptr, nullptr, nullptr).applied);
}

// Minor page faults of the calling thread.
long MinorFaults() {
  rusage u{};
  getrusage(RUSAGE_THREAD, &u);
  return u.ru_minflt;
}

TEST_CASE("After tuning, 1 MiB buffers allocated on one thread and freed on another are not faulted in anew") {
  if (std::getenv("MALLOC_MMAP_THRESHOLD_") != nullptr || std::getenv("MALLOC_TRIM_THRESHOLD_") != nullptr ||
      std::getenv("SLUICE_MALLOC_TUNING") != nullptr) {
    WARN("malloc settings come from the environment; not checked");
    return;
  }
  const MallocTuning& t = TuneRuntime();
  REQUIRE(t.applied);
  CHECK(&TuneRuntime() == &t);  // once per process

  // A producer thread allocates and fills a queue's worth of buffers, another thread frees them: the
  // pattern of a gRPC receive thread handing messages to a consumer.
  constexpr size_t kBytes = 1 << 20;
  constexpr int kInFlight = 8;
  constexpr int kRounds = 50;
  long faults = 0;
  std::thread producer([&] {
    auto round = [&](int value) {
      std::vector<char*> held;
      for (int j = 0; j < kInFlight; ++j) {
        held.push_back(static_cast<char*>(std::malloc(kBytes)));
        std::memset(held.back(), value, kBytes);
      }
      std::thread([&held] {
        for (char* p : held) std::free(p);
      }).join();
    };
    round(0);
    round(1);
    const long before = MinorFaults();
    for (int i = 0; i < kRounds; ++i) round(i);
    faults = MinorFaults() - before;
  });
  producer.join();
  // Untuned, glibc gives the freed top of the heap back and every round faults its 2,048 pages in
  // again (about 100,000 faults); tuned, the pages are reused. Thread creation faults a few pages.
  INFO("minor faults over " << kRounds << " rounds of " << kInFlight << " x 1 MiB: " << faults);
  CHECK(faults < kRounds * 256);
}

}  // namespace
}  // namespace sluice
