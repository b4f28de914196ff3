// Turns a pipeline spec (YAML, or JSON, which is YAML too) into a canonical, validated PipelineDef,
// and fingerprints it.
//
// Errors name the file, line and column and the field path ("pipeline.yaml:12:7: steps[2].batch.size:
// expected integer, got 'abc'"). Unknown ops list the known ones. Stateless and thread-safe.
#ifndef SLUICE_DATAPLANE_PIPELINE_SPEC_PARSER_H_
#define SLUICE_DATAPLANE_PIPELINE_SPEC_PARSER_H_

#include <string>
#include <string_view>

#include "absl/strings/string_view.h"
#include "absl/status/statusor.h"
#include "pipeline.pb.h"

namespace sluice::pipeline {

// Parses spec text. `filename` is only used in error messages. The result is canonical (see
// Canonicalize) and ready for Pipeline::Create.
absl::StatusOr<PipelineDef> ParsePipelineSpec(absl::string_view text, absl::string_view filename);
absl::StatusOr<PipelineDef> ParsePipelineSpecFile(const std::string& path);

// Validates a PipelineDef that may have come from anywhere (an RPC, a file) against the source,
// transformation and op schemas; fills defaults and sorts arguments. Plugins named in the def are
// loaded so their ops can be checked. Idempotent.
absl::Status Canonicalize(PipelineDef& def);

// A stable hex fingerprint of the canonical def: two defs that mean the same pipeline have the same
// fingerprint (name and source locations do not count).
std::string Fingerprint(const PipelineDef& def);

// The canonical def rendered as YAML (what `sluice pipeline check` prints).
std::string ToYaml(const PipelineDef& def);

}  // namespace sluice::pipeline

#endif  // SLUICE_DATAPLANE_PIPELINE_SPEC_PARSER_H_
