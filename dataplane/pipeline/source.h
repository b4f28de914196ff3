// Data sources and their splits.
//
// A Source lists its input as Splits (a file, or a byte or record range of one) and opens a
// SplitReader per split. Splits are what the data service hands out under dynamic sharding, and
// what `interleave` reads several of at once. A Source is immutable after creation and
// thread-safe; each SplitReader is used by one thread at a time.
#ifndef SLUICE_DATAPLANE_PIPELINE_SOURCE_H_
#define SLUICE_DATAPLANE_PIPELINE_SOURCE_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/status/statusor.h"
#include "dataplane/pipeline/args.h"
#include "dataplane/pipeline/stats.h"
#include "dataplane/pipeline/tensor.h"

namespace sluice::pipeline {

// A unit of input. `begin`/`end` are byte offsets or record indices depending on the source
// (documented per source); end = -1 means "to the end".
struct Split {
  uint64_t index = 0;  // position in the source's split list; stable for a given input
  std::string path;
  int64_t begin = 0;
  int64_t end = -1;
  // A remainder (dynamic sharding, a lost worker): the first `skip` elements are discarded.
  int64_t skip = 0;

  std::string DebugString() const;
  bool operator==(const Split&) const = default;
};

// How a source treats a corrupt record or file.
enum class OnError { kFail, kSkip };

struct SourceContext {
  OnError on_error = OnError::kFail;
  int64_t max_element_bytes = 0;  // 0 = unbounded
  StageStats* stats = nullptr;    // counts errors skipped; may be null
};

class SplitReader {
 public:
  virtual ~SplitReader() = default;
  // The next element of the split, std::nullopt at its end. Errors name the file and offset.
  virtual absl::StatusOr<std::optional<Element>> Next() = 0;
};

class Source {
 public:
  virtual ~Source() = default;
  // All splits of the input, in a deterministic order. Errors for a missing file or empty glob.
  virtual absl::StatusOr<std::vector<Split>> ListSplits() const = 0;
  // How many splits ListSplits() would return, without building the list: the dispatcher refuses
  // a dataset with too many before enumerating them. Sources whose count follows from their
  // arguments (or file sizes) compute it; the default lists the splits (fine when they are
  // bounded by files that exist).
  virtual absl::StatusOr<uint64_t> NumSplits() const {
    auto splits = ListSplits();
    if (!splits.ok()) return splits.status();
    return static_cast<uint64_t>(splits->size());
  }
  virtual absl::StatusOr<std::unique_ptr<SplitReader>> Open(const Split& split,
                                                            const SourceContext& context) const = 0;
};

using SourceFactory =
    std::function<absl::StatusOr<std::unique_ptr<Source>>(const Args& args)>;

struct SourceDescriptor {
  std::string name;
  std::string summary;
  std::vector<ArgSpec> args;
  SourceFactory factory;
};

// Maps source kinds to descriptors; registration at start-up, read-only afterwards.
class SourceRegistry {
 public:
  static SourceRegistry& Builtin();
  absl::Status Register(SourceDescriptor descriptor);
  const SourceDescriptor* Find(absl::string_view name) const;
  std::vector<std::string> Names() const;

 private:
  std::map<std::string, SourceDescriptor, std::less<>> sources_;
};

void RegisterBasicSources(SourceRegistry& registry);     // range, synthetic
void RegisterTextSources(SourceRegistry& registry);      // jsonl, csv
void RegisterFileSources(SourceRegistry& registry);      // files (one file per element), idx
void RegisterTFRecordSource(SourceRegistry& registry);   // tfrecord

// Common arguments every source accepts (on_error, ...), appended to each descriptor's args.
std::vector<ArgSpec> CommonSourceArgs();

// Expands a glob (or a list of globs, comma-separated) to a sorted list of existing regular files.
// Error names the pattern when nothing matches.
absl::StatusOr<std::vector<std::string>> ExpandGlob(absl::string_view pattern);
// Expands each entry (itself a glob or comma-separated globs) and concatenates the results.
absl::StatusOr<std::vector<std::string>> ExpandGlobs(const std::vector<std::string>& patterns);

// A position lease on a split: its reader may read elements [0, end) (counted from the split's
// first element, skipped ones included) and asks again when it reaches renew_at (<= end).
// end = -1: no limit.
struct SplitLease {
  int64_t end = -1;
  int64_t renew_at = -1;
};

// Hands out splits to source iterators. Thread-safe. A local pipeline uses a list; the data
// service worker uses one that asks the dispatcher (dynamic sharding).
class SplitProvider {
 public:
  virtual ~SplitProvider() = default;
  virtual absl::StatusOr<std::optional<Split>> GetNext() = 0;
  // Starts the next epoch (called by `repeat`).
  virtual absl::Status Reset() = 0;
  // Called by the split's reader before it reads element `position` when position reaches the
  // last lease's renew_at (first at position split.skip). Blocks until the lease covers
  // `position` (end > position) and returns it. The default: no limit.
  virtual absl::StatusOr<SplitLease> RenewLease(const Split& split, int64_t position) {
    (void)split;
    (void)position;
    return SplitLease{};
  }
  // Whether this provider hands out position leases (RenewLease/SplitFinished matter). Splits of a
  // provider without them are read directly, unless they are remainders (skip > 0).
  virtual bool UsesLeases() const { return false; }
  // The reader reached the end of `split` (after `elements` elements, skipped ones included).
  virtual void SplitFinished(const Split& split, int64_t elements) {
    (void)split;
    (void)elements;
  }
  // Handing input back (a drained data-service worker): once true, a reader stops before its next
  // element, reports SplitReleased, and ends its split; GetNext then returns no further split.
  // Checked before every element of a leased split: keep it cheap. The default: never.
  virtual bool ReleaseRequested() const { return false; }
  // The reader of `split` stopped before element `position` (skipped ones included) and reads no
  // more of it: the rest is someone else's.
  virtual void SplitReleased(const Split& split, int64_t position) {
    (void)split;
    (void)position;
  }
};

// Opens `split` of `source` for a pipeline: discards split.skip elements and, when `provider`
// (may be null) uses leases, asks it for them as it goes and tells it when the split ends. A plain
// split of a lease-less provider is the source's own reader, with nothing in between.
absl::StatusOr<std::unique_ptr<SplitReader>> OpenSplit(const Source& source, const Split& split,
                                                       const SourceContext& context, SplitProvider* provider);

// Serves a fixed list of splits, optionally only those with index % num_shards == shard_index.
class ListSplitProvider : public SplitProvider {
 public:
  explicit ListSplitProvider(std::vector<Split> splits, int64_t num_shards = 1, int64_t shard_index = 0);
  absl::StatusOr<std::optional<Split>> GetNext() override;
  absl::Status Reset() override;

 private:
  const std::vector<Split> splits_;
  absl::Mutex mu_;
  size_t next_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace sluice::pipeline

#endif  // SLUICE_DATAPLANE_PIPELINE_SOURCE_H_
