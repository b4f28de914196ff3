#include "dataplane/worker/encoded_cache.h"

#include <limits>

#include "dataplane/pipeline/args.h"

namespace sluice::worker {

std::optional<EncodedCachePlan> PlanEncodedCache(const pipeline::PipelineDef& def, service::ShardingPolicy sharding) {
  if (sharding != service::SHARDING_OFF && sharding != service::SHARDING_FILE) return std::nullopt;
  int last = def.steps_size() - 1;
  // Passes: the product of the repeats' counts, 0 if any is 0, else -1 if any is -1 (or it overflows).
  int64_t passes = 1;
  bool forever = false;
  bool none = false;
  while (last >= 0 && def.steps(last).kind() == "repeat") {
    const int64_t count = pipeline::Args(def.steps(last).args()).Int("count", -1);
    if (count == 0) none = true;
    else if (count < 0 || passes > std::numeric_limits<int64_t>::max() / count) forever = true;
    else passes *= count;
    --last;
  }
  if (last < 0 || def.steps(last).kind() != "cache") return std::nullopt;
  if (pipeline::Args(def.steps(last).args()).Int("max_bytes", 0) > 0) return std::nullopt;
  EncodedCachePlan plan;
  plan.passes = none ? 0 : forever ? -1 : passes;
  plan.head = def;
  plan.head.mutable_steps()->DeleteSubrange(last, def.steps_size() - last);
  return plan;
}

}  // namespace sluice::worker
