// Test helpers: parse a spec from text and collect a pipeline's output.
#ifndef SLUICE_DATAPLANE_PIPELINE_PIPELINE_TEST_UTIL_H_
#define SLUICE_DATAPLANE_PIPELINE_PIPELINE_TEST_UTIL_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "dataplane/pipeline/pipeline.h"
#include "dataplane/pipeline/spec_parser.h"

namespace sluice::pipeline::testing {

inline absl::StatusOr<std::unique_ptr<Pipeline>> MakePipeline(const std::string& yaml, RuntimeOptions options = {}) {
  auto def = ParsePipelineSpec(yaml, "test.yaml");
  if (!def.ok()) return def.status();
  return Pipeline::Create(*def, options);
}

inline absl::StatusOr<std::vector<Element>> Collect(Pipeline& p, int64_t limit = -1) {
  auto it = p.MakeIterator();
  if (!it.ok()) return it.status();
  std::vector<Element> out;
  while (limit < 0 || static_cast<int64_t>(out.size()) < limit) {
    auto next = (*it)->Next();
    if (!next.ok()) return next.status();
    if (!next->has_value()) break;
    out.push_back(std::move(**next));
  }
  return out;
}

inline absl::StatusOr<std::vector<Element>> RunSpec(const std::string& yaml, RuntimeOptions options = {}) {
  auto p = MakePipeline(yaml, options);
  if (!p.ok()) return p.status();
  return Collect(**p);
}

// The int64 scalar field `name` of every element.
inline std::vector<int64_t> Ints(const std::vector<Element>& elements, const std::string& name = "value") {
  std::vector<int64_t> out;
  for (const auto& e : elements) out.push_back(*e.Find(name)->AsInt64());
  return out;
}

}  // namespace sluice::pipeline::testing

#endif  // SLUICE_DATAPLANE_PIPELINE_PIPELINE_TEST_UTIL_H_
