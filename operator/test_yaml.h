// Test helper: YAML documents (crds/, examples/) as nlohmann::json. Plain scalars are typed as the
// YAML 1.2 core schema does (null, bool, int, float); quoted scalars stay strings. Test-only.
#ifndef SLUICE_OPERATOR_TEST_YAML_H_
#define SLUICE_OPERATOR_TEST_YAML_H_

#include <string>
#include <vector>

#include "nlohmann/json.hpp"

namespace sluice::op::testing {

// Every document of the file at `relative_path` under the source tree (SourceDir()).
std::vector<nlohmann::json> LoadYamlDocuments(const std::string& relative_path);

}  // namespace sluice::op::testing

#endif  // SLUICE_OPERATOR_TEST_YAML_H_
