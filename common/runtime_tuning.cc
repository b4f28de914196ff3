#include "common/runtime_tuning.h"

#include <cstdlib>
#include <string_view>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include "absl/synchronization/mutex.h"

namespace sluice {
namespace {

constexpr int kMmapThresholdBytes = 32 << 20;
constexpr int kTrimThresholdBytes = 128 << 20;

MallocTuning TuneMalloc() {
  MallocTuning t = DecideMallocTuning(std::getenv("SLUICE_MALLOC_TUNING"), std::getenv("MALLOC_MMAP_THRESHOLD_"),
                                      std::getenv("MALLOC_TRIM_THRESHOLD_"));
#if defined(__GLIBC__)
  if (t.applied) {
    // Setting either turns glibc's dynamic thresholds off, so both are set.
    if (mallopt(M_MMAP_THRESHOLD, kMmapThresholdBytes) != 1 || mallopt(M_TRIM_THRESHOLD, kTrimThresholdBytes) != 1) {
      t = {false, "mallopt refused the settings"};
    }
  }
#endif
  return t;
}

}  // namespace

MallocTuning DecideMallocTuning(const char* disable, const char* user_mmap, const char* user_trim) {
  if (disable != nullptr && std::string_view(disable) == "0") return {false, "SLUICE_MALLOC_TUNING=0"};
  if (user_mmap != nullptr || user_trim != nullptr) {
    return {false, "MALLOC_MMAP_THRESHOLD_ or MALLOC_TRIM_THRESHOLD_ is set: the user's choice stands"};
  }
#if defined(__GLIBC__)
  return {true, "M_MMAP_THRESHOLD=32MiB M_TRIM_THRESHOLD=128MiB"};
#else
  return {false, "not glibc"};
#endif
}

const MallocTuning& TuneRuntime() {
  static const MallocTuning result = [] {
#ifdef NDEBUG
    absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
#endif
    return TuneMalloc();
  }();
  return result;
}

}  // namespace sluice
