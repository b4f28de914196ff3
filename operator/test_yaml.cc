#include "operator/test_yaml.h"

#include <yaml-cpp/yaml.h>

#include "absl/strings/numbers.h"
#include "testing/test_util.h"

namespace sluice::op::testing {
namespace {

using json = nlohmann::json;

json YamlToJson(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Null:
    case YAML::NodeType::Undefined:
      return nullptr;
    case YAML::NodeType::Sequence: {
      json out = json::array();
      for (const YAML::Node& item : node) out.push_back(YamlToJson(item));
      return out;
    }
    case YAML::NodeType::Map: {
      json out = json::object();
      for (const auto& kv : node) out[kv.first.as<std::string>()] = YamlToJson(kv.second);
      return out;
    }
    case YAML::NodeType::Scalar: {
      const std::string& s = node.Scalar();
      if (node.Tag() != "?") return s;  // quoted
      if (s == "null" || s == "~" || s.empty()) return nullptr;
      if (s == "true") return true;
      if (s == "false") return false;
      int64_t i = 0;
      if (s.find_first_not_of("-0123456789") == std::string::npos && absl::SimpleAtoi(s, &i)) return i;
      double d = 0;
      if (s.find_first_not_of("-+.0123456789eE") == std::string::npos && absl::SimpleAtod(s, &d)) return d;
      return s;
    }
  }
  return nullptr;
}

}  // namespace

std::vector<json> LoadYamlDocuments(const std::string& relative_path) {
  std::string path = sluice::testing::SourceDir() + "/" + relative_path;
  std::vector<json> docs;
  for (const YAML::Node& doc : YAML::LoadAllFromFile(path)) docs.push_back(YamlToJson(doc));
  return docs;
}

}  // namespace sluice::op::testing
