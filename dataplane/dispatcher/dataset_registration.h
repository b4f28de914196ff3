// Dataset registration (RegisterDataset): a pipeline's checks (plugins only from the allowed
// directories, canonical form), its id (the canonical def's fingerprint), AutoOrder, and the
// listing of its splits — the RegisterDataset update the service then commits.
//
// Reads data files (listing splits, AutoOrder's profile): the service calls these without its
// lock. Thread-compatible; no state of their own.
#ifndef SLUICE_DATAPLANE_DISPATCHER_DATASET_REGISTRATION_H_
#define SLUICE_DATAPLANE_DISPATCHER_DATASET_REGISTRATION_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "dataplane/dispatcher/dispatcher_metrics.h"
#include "dataplane/pipeline/autoorder/auto_order.h"
#include "dataservice.pb.h"
#include "journal.pb.h"
#include "pipeline.pb.h"

namespace sluice::dispatcher {

// The request's pipeline in canonical form: INVALID_ARGUMENT when empty or malformed,
// FAILED_PRECONDITION when it names a plugin outside `plugin_dirs` (none allowed when empty).
absl::StatusOr<pipeline::PipelineDef> CanonicalPipeline(const service::RegisterDatasetRequest& request,
                                                        const std::vector<std::string>& plugin_dirs);

// The RegisterDataset update of the canonical `def` with id `dataset_id`: AutoOrder applied (when
// its mode is on; `metrics`, which may be null, counts its plans) and the splits listed.
// FAILED_PRECONDITION when the splits cannot be listed (the dispatcher must see the data files).
absl::StatusOr<service::Update> PrepareDataset(pipeline::PipelineDef def, const std::string& dataset_id,
                                               const pipeline::AutoOrderOptions& auto_order,
                                               DispatcherMetrics* metrics);

}  // namespace sluice::dispatcher

#endif  // SLUICE_DATAPLANE_DISPATCHER_DATASET_REGISTRATION_H_
