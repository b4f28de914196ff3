#include "dataplane/dispatcher/split_limit.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "dataplane/pipeline/args.h"
#include "dataplane/pipeline/source.h"

namespace sluice::dispatcher {

std::optional<uint64_t> CountDatasetSplits(const pipeline::PipelineDef& def) {
  const pipeline::SourceDescriptor* sd = pipeline::SourceRegistry::Builtin().Find(def.source().kind());
  if (sd == nullptr) return std::nullopt;
  auto source = sd->factory(pipeline::Args(def.source().args()));
  if (!source.ok()) return std::nullopt;
  auto n = (*source)->NumSplits();
  if (!n.ok()) return std::nullopt;
  return *n;
}

absl::Status CheckSplitLimit(const pipeline::PipelineDef& def, int64_t max_splits) {
  if (max_splits <= 0) return absl::OkStatus();
  const std::optional<uint64_t> n = CountDatasetSplits(def);
  if (!n.has_value() || *n <= static_cast<uint64_t>(max_splits)) return absl::OkStatus();
  const pipeline::Args args(def.source().args());
  std::string source = absl::StrCat("source ", def.source().kind());
  for (const char* key : {"count", "start", "stop", "step", "files", "path", "images", "split_size", "split_bytes"}) {
    if (const pipeline::Value* v = args.Raw(key)) absl::StrAppend(&source, " ", key, "=", pipeline::ValueToString(*v));
  }
  std::string fix;
  if (args.Has("split_size")) {
    fix = "raise the source's split_size";
  } else if (args.Has("split_bytes")) {
    fix = "raise the source's split_bytes";
  } else {
    fix = "read fewer, larger files";
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "pipeline: ", source, " has ", *n, " splits, more than the dispatcher's limit of ", max_splits,
      " (--max_dataset_splits; the dispatcher keeps and journals every split of a dataset): ", fix,
      " so that it has at most ", max_splits, " splits, or start the dispatcher with a higher --max_dataset_splits"));
}

}  // namespace sluice::dispatcher
