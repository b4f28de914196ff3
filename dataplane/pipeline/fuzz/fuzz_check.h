// FUZZ_CHECK: an invariant check for fuzz targets that aborts (so libFuzzer and the replay driver
// report the input) and prints what failed.
#ifndef SLUICE_DATAPLANE_PIPELINE_FUZZ_FUZZ_CHECK_H_
#define SLUICE_DATAPLANE_PIPELINE_FUZZ_FUZZ_CHECK_H_

#include <cstdio>
#include <cstdlib>

#define FUZZ_CHECK(condition, ...)                                               \
  do {                                                                           \
    if (!(condition)) {                                                          \
      std::fprintf(stderr, "%s:%d: FUZZ_CHECK(%s) failed: ", __FILE__, __LINE__, \
                   #condition);                                                  \
      std::fprintf(stderr, __VA_ARGS__);                                         \
      std::fprintf(stderr, "\n");                                                \
      std::abort();                                                              \
    }                                                                            \
  } while (0)

#endif  // SLUICE_DATAPLANE_PIPELINE_FUZZ_FUZZ_CHECK_H_
