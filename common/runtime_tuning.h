// Process-wide settings for processes that move large buffers between threads: the daemons, the
// `sluice` tool, and any process using the data-service client (which applies them when the
// first client is created).
//
// Malloc. gRPC receives and the data plane decodes, encodes and frees buffers of 100 KiB to tens
// of MiB, often allocated on one thread and freed on another. With glibc's defaults such a process
// faults fresh pages in for nearly every byte it receives: the mmap threshold (128 KiB at first,
// raised only as mmapped chunks are freed) and the trim threshold (free memory at the top of an
// arena is given back to the kernel, then faulted in again by the next message). Measured with
// `sluice bench transfer` (1 MiB elements): trials alternated between about 2 GB/s and 0.3 GB/s,
// the slow ones spending 3-4 CPU-seconds per GB in page faults. TuneRuntime() sets
// M_MMAP_THRESHOLD to 32 MiB (glibc's maximum: smaller allocations come from the heap) and
// M_TRIM_THRESHOLD to 128 MiB (at most that much free memory is kept per arena top). Not done when
// SLUICE_MALLOC_TUNING=0, when the user chose with glibc's MALLOC_MMAP_THRESHOLD_ /
// MALLOC_TRIM_THRESHOLD_, or on another C library.
//
// Mutex deadlock detection. Debian's abseil is built with its debug checks on, so every
// absl::Mutex lock records lock-order edges (about 1% of a streaming client's CPU). Release
// builds of Sluice (NDEBUG) turn that off; debug and sanitizer builds keep it.
//
// Threading: safe from any thread, any number of times; only the first call acts.
#ifndef SLUICE_COMMON_RUNTIME_TUNING_H_
#define SLUICE_COMMON_RUNTIME_TUNING_H_

#include <string>

namespace sluice {

struct MallocTuning {
  bool applied = false;
  std::string reason;  // what was set, or why nothing was
};

// Applies the settings once per process; returns what the first call did to malloc.
const MallocTuning& TuneRuntime();

// The malloc decision alone, for tests: `disable` is $SLUICE_MALLOC_TUNING, `user_mmap` and
// `user_trim` are glibc's MALLOC_MMAP_THRESHOLD_ and MALLOC_TRIM_THRESHOLD_ (nullptr when unset).
MallocTuning DecideMallocTuning(const char* disable, const char* user_mmap, const char* user_trim);

}  // namespace sluice

#endif  // SLUICE_COMMON_RUNTIME_TUNING_H_
