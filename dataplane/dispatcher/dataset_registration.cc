#include "dataplane/dispatcher/dataset_registration.h"

#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/log.h"
#include "dataplane/pipeline/pipeline.h"
#include "dataplane/pipeline/plugin.h"
#include "dataplane/pipeline/spec_parser.h"

namespace sluice::dispatcher {

absl::StatusOr<pipeline::PipelineDef> CanonicalPipeline(const service::RegisterDatasetRequest& request,
                                                        const std::vector<std::string>& plugin_dirs) {
  if (!request.has_pipeline() || request.pipeline().ByteSizeLong() == 0) {
    return absl::InvalidArgumentError("pipeline is empty: RegisterDatasetRequest.pipeline needs at least a source");
  }
  pipeline::PipelineDef def = request.pipeline();
  if (def.plugins_size() > 0) {
    // Before anything loads them: a client must not make the dispatcher (or the workers) dlopen
    // a library outside the directories the operator allowed.
    auto dirs = pipeline::ResolvePluginDirs(plugin_dirs, "--plugin_dir");
    if (!dirs.ok()) return absl::FailedPreconditionError(absl::StrCat("pipeline: ", dirs.status().message()));
    if (absl::Status s = pipeline::CheckPipelinePlugins(def, *dirs, "--plugin_dir"); !s.ok()) {
      return absl::FailedPreconditionError(absl::StrCat("pipeline.", s.message()));
    }
  }
  if (absl::Status s = pipeline::Canonicalize(def); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("pipeline: ", s.message()));
  }
  return def;
}

absl::StatusOr<service::Update> PrepareDataset(pipeline::PipelineDef def, const std::string& dataset_id,
                                               const pipeline::AutoOrderOptions& auto_order_options,
                                               DispatcherMetrics* metrics) {
  std::optional<pipeline::AutoOrderReport> auto_order;
  if (auto_order_options.mode != pipeline::AutoOrderMode::kOff) {
    auto planned = pipeline::PlanAutoOrder(def, auto_order_options);
    if (planned.ok()) {
      def = std::move(planned->def);
      auto_order = std::move(planned->report);
      SLUICE_LOG(Info, "autoorder")
          .With("dataset_id", dataset_id)
          .With("mode", auto_order->mode())
          .With("outcome", auto_order->outcome())
          .With("summary", pipeline::SummarizeAutoOrderReport(*auto_order));
      if (metrics != nullptr) metrics->AddAutoOrderPlan(*auto_order);
    } else {
      SLUICE_LOG(Warning, "autoorder").With("dataset_id", dataset_id).With("error", planned.status().ToString());
    }
  }
  auto compiled = pipeline::Pipeline::Create(def);
  if (!compiled.ok()) return absl::InvalidArgumentError(absl::StrCat("pipeline: ", compiled.status().message()));
  auto splits = (*compiled)->ListSplits();
  if (!splits.ok()) {
    return absl::FailedPreconditionError(absl::StrCat("pipeline: cannot list its splits (the dispatcher must see the data files): ",
                                                      splits.status().message()));
  }
  service::Update u;
  auto* r = u.mutable_register_dataset();
  r->set_dataset_id(dataset_id);
  *r->mutable_pipeline() = std::move(def);
  if (auto_order.has_value()) *r->mutable_auto_order() = *auto_order;
  for (const auto& split : *splits) {
    auto* s = r->add_splits();
    s->set_index(split.index);
    s->set_path(split.path);
    s->set_begin(split.begin);
    s->set_end(split.end);
  }
  return u;
}

}  // namespace sluice::dispatcher
