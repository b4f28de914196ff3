#include "dataplane/pipeline/transforms.h"

namespace sluice::pipeline {

const std::vector<TransformDescriptor>& AllTransforms() {
  static const auto* all = new std::vector<TransformDescriptor>{
      {"map", "Applies element ops in order, on parallel threads; output order is kept unless deterministic is false.",
       {AutoOrInt("parallelism", kAuto, "threads applying the ops; 'auto' lets the autotuner choose within the CPU budget"),
        WithDefault("deterministic", true, "keep input order (false: emit elements as they finish)"),
        Choice("on_error", {"fail", "skip"}, "fail", "an element an op rejects (e.g. an undecodable image) fails the pipeline, or is dropped and counted")}},
      {"filter", "Keeps elements whose field satisfies every given comparison.",
       {Required("field", ArgType::kString, "the field tested"),
        Optional("lt", ArgType::kFloat, "keep when value < lt"), Optional("le", ArgType::kFloat, "keep when value <= le"),
        Optional("gt", ArgType::kFloat, "keep when value > gt"), Optional("ge", ArgType::kFloat, "keep when value >= ge"),
        Optional("eq", ArgType::kFloat, "keep when value == eq"), Optional("ne", ArgType::kFloat, "keep when value != ne"),
        Optional("min_size", ArgType::kInt, "keep when the field has at least this many elements (bytes for strings)"),
        Optional("max_size", ArgType::kInt, "keep when the field has at most this many elements (bytes for strings)")}},
      {"shuffle", "Shuffles elements through a buffer of the given size.",
       {Bounded(Required("buffer", ArgType::kInt, "elements held in the shuffle buffer"), 1, std::nullopt),
        Optional("seed", ArgType::kInt, "seed; default: the pipeline seed"),
        WithDefault("reshuffle_each_iteration", true, "a different order every epoch")}},
      {"batch", "Stacks consecutive elements into batches along a new first dimension.",
       {Bounded(Required("size", ArgType::kInt, "elements per batch"), 1, std::nullopt),
        WithDefault("drop_remainder", false, "drop a last, smaller batch"),
        WithDefault("pad", false, "pad fields of differing shapes to the largest in the batch"),
        WithDefault("padding_value", 0.0, "value used for padding numeric fields")}},
      {"unbatch", "Splits each element along its first dimension.", {}},
      {"repeat", "Repeats the input; count -1 repeats forever.", {WithDefault("count", int64_t{-1}, "epochs (-1: forever)")}},
      {"take", "Keeps the first count elements.", {Bounded(Required("count", ArgType::kInt, "elements kept"), 0, std::nullopt)}},
      {"skip", "Drops the first count elements.", {Bounded(Required("count", ArgType::kInt, "elements dropped"), 0, std::nullopt)}},
      {"interleave", "Reads several source splits (files) at once, taking block_length elements from each in turn. Must directly follow the source.",
       {AutoOrInt("cycle_length", kAuto, "splits read at once ('auto': CPU budget, at most 8)"),
        Bounded(WithDefault("block_length", int64_t{1}, "consecutive elements from one split"), 1, std::nullopt),
        WithDefault("parallel", true, "read the splits on parallel threads"),
        WithDefault("deterministic", true, "keep the round-robin order (false: take whichever split is ready)")}},
      {"prefetch", "Produces elements ahead of the consumer on a background thread.",
       {AutoOrInt("buffer", kAuto, "elements buffered ('auto': tuned to the consumer, within the RAM budget)")}},
      {"cache", "Keeps the elements of the first pass in memory and replays them on later passes (place before repeat).",
       {WithDefault("max_bytes", int64_t{0}, "give up caching past this many bytes (0: no bound)")}},
      {"shard", "Keeps every num_shards-th element starting at index.",
       {Bounded(Required("num_shards", ArgType::kInt, "number of shards"), 1, std::nullopt),
        Bounded(Required("index", ArgType::kInt, "this shard's index"), 0, std::nullopt)}},
      {"bucket_by_length", "Groups elements by the length of a field into per-bucket batches, padded, so a batch's elements have similar sizes.",
       {Required("field", ArgType::kString, "the field whose first dimension (or byte length) is the length"),
        Required("boundaries", ArgType::kIntList, "ascending bucket upper bounds (exclusive)"),
        Required("batch_sizes", ArgType::kIntList, "batch size per bucket: len(boundaries)+1 entries"),
        WithDefault("padding_value", 0.0, "value used for padding"),
        WithDefault("drop_remainder", false, "drop partial batches at the end"),
        Bounded(WithDefault("group", int64_t{1},
                            "emit batches in runs of this many from one bucket (coordinated reads: num_consumers, so the batches of one round have similar lengths)"),
                1, std::nullopt)}},
  };
  return *all;
}

const TransformDescriptor* FindTransform(absl::string_view name) {
  for (const auto& t : AllTransforms()) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

}  // namespace sluice::pipeline
