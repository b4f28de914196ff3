// The dispatcher's cap on the splits of a registered dataset (--max_dataset_splits).
//
// Registering a dataset enumerates its splits and journals them (a few hundred bytes each), so a
// one-line spec such as `range: {stop: 1099511627776}` would make the dispatcher build a list of
// a billion splits. CheckSplitLimit counts the splits a pipeline's source would produce without
// listing them (arithmetically for range/synthetic/idx/files, from file sizes for jsonl/csv,
// from the file list for tfrecord) and refuses the pipeline when they exceed the limit.
// Stateless functions; thread-safe.
#ifndef SLUICE_DATAPLANE_DISPATCHER_SPLIT_LIMIT_H_
#define SLUICE_DATAPLANE_DISPATCHER_SPLIT_LIMIT_H_

#include <cstdint>
#include <optional>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "pipeline.pb.h"

namespace sluice::dispatcher {

inline constexpr int64_t kDefaultMaxDatasetSplits = 1'000'000;

// The number of splits `def`'s source would list. `def` must be canonical (pipeline::Canonicalize:
// defaults filled in). nullopt when the source cannot be created or counted here (a missing file,
// a bad argument): the caller's own Pipeline::Create / ListSplits reports that as it always has.
std::optional<uint64_t> CountDatasetSplits(const pipeline::PipelineDef& def);

// INVALID_ARGUMENT when `def`'s source would produce more than `max_splits` splits, naming the
// source, the count, the limit and what to change; OK otherwise (also when the count is unknown,
// see CountDatasetSplits). `max_splits` <= 0 turns the check off.
absl::Status CheckSplitLimit(const pipeline::PipelineDef& def, int64_t max_splits);

}  // namespace sluice::dispatcher

#endif  // SLUICE_DATAPLANE_DISPATCHER_SPLIT_LIMIT_H_
