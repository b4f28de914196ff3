// Checks crds/dataservices.sluice.dev.yaml and examples/dataservice-*.yaml without an API server:
// the schema is structural and documented, its defaults and CEL rules agree with the C++ parser and
// validator, and the examples validate against it. The CEL rules are evaluated by a small evaluator
// of the subset the CRD may use (has(), size(), ternary, &&, ||, comparisons, field access,
// literals), which is also what the test API server implements.
#include <catch2/catch.hpp>

#include <cctype>
#include <functional>
#include <map>
#include <regex>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "operator/dataservice_types.h"
#include "operator/reconciler.h"
#include "operator/test_yaml.h"

namespace sluice::op {
namespace {

using json = nlohmann::json;

std::vector<json> LoadYaml(const std::string& relative_path) { return testing::LoadYamlDocuments(relative_path); }

json Crd() {
  std::vector<json> docs = LoadYaml("crds/dataservices.sluice.dev.yaml");
  REQUIRE(docs.size() == 1);
  return docs[0];
}

const json& RootSchema(const json& crd) { return crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]; }

json ExampleDataService(const std::string& file) {
  for (const json& doc : LoadYaml("examples/" + file)) {
    if (doc["kind"] == "DataService") return doc;
  }
  FAIL("no DataService in " << file);
  return json();
}

// ---- schema walking, defaulting and validation as an API server does ----

void WalkSchema(const json& schema, const std::string& path,
                const std::function<void(const json&, const std::string&)>& visit) {
  visit(schema, path);
  if (schema.contains("properties")) {
    for (auto it = schema["properties"].begin(); it != schema["properties"].end(); ++it) {
      WalkSchema(it.value(), path.empty() ? it.key() : path + "." + it.key(), visit);
    }
  }
  if (schema.contains("items")) WalkSchema(schema["items"], path + "[]", visit);
  if (schema.contains("additionalProperties") && schema["additionalProperties"].is_object()) {
    WalkSchema(schema["additionalProperties"], path + ".*", visit);
  }
}

void ApplyDefaults(const json& schema, json& value) {
  if (value.is_object() && schema.contains("properties")) {
    for (auto it = schema["properties"].begin(); it != schema["properties"].end(); ++it) {
      if ((!value.contains(it.key()) || value[it.key()].is_null()) && it.value().contains("default")) {
        value[it.key()] = it.value()["default"];
      }
      if (value.contains(it.key())) ApplyDefaults(it.value(), value[it.key()]);
    }
  }
  if (value.is_object() && schema.contains("additionalProperties") && schema["additionalProperties"].is_object()) {
    for (auto& [k, v] : value.items()) ApplyDefaults(schema["additionalProperties"], v);
  }
  if (value.is_array() && schema.contains("items")) {
    for (json& item : value) ApplyDefaults(schema["items"], item);
  }
}

// A CEL evaluator for the subset the CRD uses. Throws std::runtime_error on anything else.
// With `coverage`, every branch outcome it evaluates is recorded as "<operator>@<token index>:<outcome>":
// "?" T|F; "&&" F (short-circuit), TT, TF; "||" T (short-circuit), FT, FF; comparisons and has() T|F.
class CelSubset {
 public:
  CelSubset(const std::string& source, const json& self, std::set<std::string>* coverage = nullptr)
      : self_(self), coverage_(coverage) {
    Tokenize(source);
  }

  json Evaluate() {
    json v = Ternary();
    if (pos_ != tokens_.size()) throw std::runtime_error("trailing tokens at " + tokens_[pos_]);
    return v;
  }

  // Every outcome `coverage` can record for this rule: what a set of test objects must reach.
  std::set<std::string> AllBranches() const {
    std::set<std::string> out;
    for (size_t i = 0; i < tokens_.size(); ++i) {
      const std::string& t = tokens_[i];
      std::vector<std::string> outcomes;
      if (t == "?" || t == "has" || t == "==" || t == "!=" || t == "<" || t == "<=" || t == ">" || t == ">=") {
        outcomes = {"T", "F"};
      } else if (t == "&&") {
        outcomes = {"F", "TT", "TF"};
      } else if (t == "||") {
        outcomes = {"T", "FT", "FF"};
      }
      for (const std::string& o : outcomes) out.insert(absl::StrCat(t, "@", i, ":", o));
    }
    return out;
  }

 private:
  void Cover(const std::string& op, size_t at, const std::string& outcome) {
    if (coverage_ != nullptr && !skipping_) coverage_->insert(absl::StrCat(op, "@", at, ":", outcome));
  }
  void Tokenize(const std::string& s) {
    static const std::vector<std::string> kOps = {"==", "!=", "<=", ">=", "&&", "||", "<", ">", "?", ":", "(", ")", "."};
    for (size_t i = 0; i < s.size();) {
      char c = s[i];
      if (std::isspace(static_cast<unsigned char>(c))) {
        ++i;
      } else if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
        size_t j = i;
        while (j < s.size() && (std::isalnum(static_cast<unsigned char>(s[j])) || s[j] == '_')) ++j;
        tokens_.push_back(s.substr(i, j - i));
        i = j;
      } else if (std::isdigit(static_cast<unsigned char>(c))) {
        size_t j = i;
        while (j < s.size() && (std::isdigit(static_cast<unsigned char>(s[j])) || s[j] == '.')) ++j;
        tokens_.push_back(s.substr(i, j - i));
        i = j;
      } else if (c == '\'' || c == '"') {
        size_t j = s.find(c, i + 1);
        if (j == std::string::npos) throw std::runtime_error("unterminated string");
        tokens_.push_back(s.substr(i, j - i + 1));
        i = j + 1;
      } else {
        bool matched = false;
        for (const std::string& op : kOps) {
          if (s.compare(i, op.size(), op) == 0) {
            tokens_.push_back(op);
            i += op.size();
            matched = true;
            break;
          }
        }
        if (!matched) throw std::runtime_error(std::string("character outside the CEL subset: ") + c);
      }
    }
  }
  bool Accept(const std::string& t) {
    if (pos_ < tokens_.size() && tokens_[pos_] == t) {
      ++pos_;
      return true;
    }
    return false;
  }
  void Expect(const std::string& t) {
    if (!Accept(t)) throw std::runtime_error("expected " + t);
  }
  static bool Truth(const json& v) {
    if (!v.is_boolean()) throw std::runtime_error("not a boolean: " + v.dump());
    return v.get<bool>();
  }
  static bool Truth(const json& v, bool skipping) { return skipping ? false : Truth(v); }
  // Parses `parse` without evaluating it when `skip` (the branch CEL would not take).
  json Lazy(bool skip, json (CelSubset::*parse)()) {
    bool saved = skipping_;
    skipping_ = skipping_ || skip;
    json v = (this->*parse)();
    skipping_ = saved;
    return v;
  }
  json Ternary() {
    json cond = Or();
    const size_t at = pos_;
    if (!Accept("?")) return cond;
    bool take_first = Truth(cond, skipping_);
    Cover("?", at, take_first ? "T" : "F");
    json a = Lazy(!take_first, &CelSubset::Ternary);
    Expect(":");
    json b = Lazy(take_first, &CelSubset::Ternary);
    return take_first ? a : b;
  }
  json Or() {
    json v = And();
    for (size_t at = pos_; Accept("||"); at = pos_) {
      bool left = Truth(v, skipping_);
      json r = Lazy(left, &CelSubset::And);
      bool right = !left && Truth(r, skipping_);
      Cover("||", at, left ? "T" : right ? "FT" : "FF");
      v = left || right;
    }
    return v;
  }
  json And() {
    json v = Compare();
    for (size_t at = pos_; Accept("&&"); at = pos_) {
      bool left = Truth(v, skipping_);
      json r = Lazy(!left, &CelSubset::Compare);
      bool right = left && Truth(r, skipping_);
      Cover("&&", at, !left ? "F" : right ? "TT" : "TF");
      v = left && right;
    }
    return v;
  }
  json Compare() {
    json a = Primary();
    const size_t at = pos_;
    for (const std::string op : {"==", "!=", "<=", ">=", "<", ">"}) {
      if (!Accept(op)) continue;
      json b = Primary();
      if (skipping_) return false;
      bool result = false;
      if (op == "==") {
        result = a == b;
      } else if (op == "!=") {
        result = a != b;
      } else {
        if (!a.is_number() || !b.is_number()) throw std::runtime_error("ordering needs numbers");
        double x = a.get<double>(), y = b.get<double>();
        result = op == "<=" ? x <= y : op == ">=" ? x >= y : op == "<" ? x < y : x > y;
      }
      Cover(op, at, result ? "T" : "F");
      return result;
    }
    return a;
  }
  // self.a.b: returns nullptr (absent) through `present` = false.
  json Path(bool* present) {
    Expect("self");
    const json* cur = &self_;
    *present = true;
    while (Accept(".")) {
      if (pos_ >= tokens_.size()) throw std::runtime_error("dangling .");
      const std::string& field = tokens_[pos_++];
      if (!*present || !cur->is_object() || !cur->contains(field)) {
        *present = false;
        continue;
      }
      cur = &(*cur)[field];
    }
    return *present ? *cur : json();
  }
  json Primary() {
    if (Accept("(")) {
      json v = Ternary();
      Expect(")");
      return v;
    }
    if (const size_t at = pos_; Accept("has")) {
      Expect("(");
      bool present = false;
      Path(&present);
      Expect(")");
      Cover("has", at, present ? "T" : "F");
      return present;
    }
    if (Accept("size")) {
      Expect("(");
      json v = Primary();
      Expect(")");
      if (skipping_) return 0;
      if (!v.is_array() && !v.is_string() && !v.is_object()) throw std::runtime_error("size of " + v.dump());
      return v.is_string() ? v.get<std::string>().size() : v.size();
    }
    if (Accept("true")) return true;
    if (Accept("false")) return false;
    if (pos_ < tokens_.size() && tokens_[pos_] == "self") {
      bool present = false;
      json v = Path(&present);
      if (!present && !skipping_) throw std::runtime_error("no such key");
      return v;
    }
    if (pos_ >= tokens_.size()) throw std::runtime_error("unexpected end");
    const std::string& t = tokens_[pos_++];
    if (t[0] == '\'' || t[0] == '"') return t.substr(1, t.size() - 2);
    double d = 0;
    if (std::isdigit(static_cast<unsigned char>(t[0])) && absl::SimpleAtod(t, &d)) {
      return t.find('.') == std::string::npos ? json(static_cast<int64_t>(d)) : json(d);
    }
    throw std::runtime_error("token outside the CEL subset: " + t);
  }

  const json& self_;
  std::set<std::string>* coverage_;
  bool skipping_ = false;
  std::vector<std::string> tokens_;
  size_t pos_ = 0;
};

// When set, Validate records the branch outcomes every CEL rule reached, keyed "<path>: <rule>".
std::map<std::string, std::set<std::string>>* cel_coverage = nullptr;

// Validates `value` (defaults applied) like the API server: types, enums, bounds, required fields,
// unknown fields (which a server would silently prune), list types and CEL rules.
void Validate(const json& schema, const json& value, const std::string& path, std::vector<std::string>* errors) {
  auto error = [&](const std::string& msg) { errors->push_back(absl::StrCat(path.empty() ? "<root>" : path, ": ", msg)); };
  if (schema.value("x-kubernetes-int-or-string", false)) {
    if (!value.is_number_integer() && !value.is_string()) error("must be an integer or a string");
    return;
  }
  std::string type = schema.value("type", "");
  if (path == "metadata") {
    // The server validates only name and generateName against the root metadata schema (the rest is
    // ObjectMeta, never pruned).
    for (const char* field : {"name", "generateName"}) {
      if (value.contains(field) && schema.contains("properties") && schema["properties"].contains(field)) {
        Validate(schema["properties"][field], value[field], std::string("metadata.") + field, errors);
      }
    }
    return;
  }
  if (type == "object") {
    if (!value.is_object()) return error("must be an object");
    for (const json& r : schema.value("required", json::array())) {
      if (!value.contains(r.get<std::string>())) error("missing required field " + r.get<std::string>());
    }
    for (auto it = value.begin(); it != value.end(); ++it) {
      std::string child = path.empty() ? it.key() : path + "." + it.key();
      if (schema.contains("properties") && schema["properties"].contains(it.key())) {
        Validate(schema["properties"][it.key()], it.value(), child, errors);
      } else if (schema.contains("additionalProperties")) {
        Validate(schema["additionalProperties"], it.value(), child, errors);
      } else if (schema.contains("properties")) {
        error("unknown field " + it.key() + " (a server would prune it)");
      }
    }
  } else if (type == "array") {
    if (!value.is_array()) return error("must be an array");
    if (schema.contains("maxItems") && value.size() > schema["maxItems"].get<size_t>()) error("too many items");
    if (schema.value("x-kubernetes-list-type", "") == "set") {
      std::set<std::string> seen;
      for (const json& item : value) {
        if (!seen.insert(item.dump()).second) error("duplicate item " + item.dump() + " in a set");
      }
    }
    for (size_t i = 0; i < value.size(); ++i) Validate(schema["items"], value[i], absl::StrCat(path, "[", i, "]"), errors);
  } else if (type == "string") {
    if (!value.is_string()) return error("must be a string");
    if (schema.contains("minLength") && value.get<std::string>().size() < schema["minLength"].get<size_t>()) {
      error("too short");
    }
    if (schema.contains("maxLength") && value.get<std::string>().size() > schema["maxLength"].get<size_t>()) {
      error("too long");
    }
    if (schema.contains("pattern") &&
        !std::regex_search(value.get<std::string>(), std::regex(schema["pattern"].get<std::string>()))) {
      error("does not match " + schema["pattern"].dump());
    }
    if (schema.contains("enum")) {
      bool found = false;
      for (const json& e : schema["enum"]) found |= e == value;
      if (!found) error("unsupported value " + value.dump());
    }
  } else if (type == "integer") {
    if (!value.is_number_integer()) return error("must be an integer");
  } else if (type == "number") {
    if (!value.is_number()) return error("must be a number");
  } else if (type == "boolean") {
    if (!value.is_boolean()) return error("must be a boolean");
  }
  if (schema.contains("minimum") && value.is_number() && value.get<double>() < schema["minimum"].get<double>()) {
    error("below minimum");
  }
  if (schema.contains("maximum") && value.is_number() && value.get<double>() > schema["maximum"].get<double>()) {
    error("above maximum");
  }
  for (const json& rule : schema.value("x-kubernetes-validations", json::array())) {
    try {
      const std::string text = rule["rule"].get<std::string>();
      std::set<std::string>* covered = cel_coverage != nullptr ? &(*cel_coverage)[path + ": " + text] : nullptr;
      if (!CelSubset(text, value, covered).Evaluate().get<bool>()) {
        error(rule["message"].get<std::string>());
      }
    } catch (const std::exception& e) {
      error(absl::StrCat("rule ", rule["rule"].dump(), " failed to evaluate: ", e.what()));
    }
  }
}

std::vector<std::string> ServerValidate(json object) {
  json crd = Crd();
  ApplyDefaults(RootSchema(crd), object);
  std::vector<std::string> errors;
  Validate(RootSchema(crd), object, "", &errors);
  return errors;
}

// Whether the C++ side rejects the object too (parse error or validation error).
bool OperatorRejects(const json& object) {
  absl::StatusOr<DataService> ds = ParseDataService(object);
  return !ds.ok() || !ValidateDataService(*ds).empty();
}

json Minimal() {
  return json::parse(R"js({"apiVersion": "sluice.dev/v1alpha1", "kind": "DataService",
    "metadata": {"name": "m", "namespace": "ml", "uid": "u", "generation": 1},
    "spec": {"dispatcher": {"image": "d"}, "workers": {"image": "w"}}})js");
}

// ---- tests ----

TEST_CASE("the CRD names a namespaced sluice.dev/v1alpha1 DataService", "[crd]") {
  json crd = Crd();
  CHECK(crd["apiVersion"] == "apiextensions.k8s.io/v1");
  CHECK(crd["kind"] == "CustomResourceDefinition");
  CHECK(crd["metadata"]["name"] == "dataservices.sluice.dev");
  CHECK(crd["spec"]["group"] == "sluice.dev");
  CHECK(crd["spec"]["scope"] == "Namespaced");
  const json& names = crd["spec"]["names"];
  CHECK(names["kind"] == "DataService");
  CHECK(names["plural"] == "dataservices");
  CHECK(names["singular"] == "dataservice");
  // Short names of the built-in resources (kubectl api-resources on Kubernetes 1.26-1.32).
  const std::set<std::string> builtin = {"cm",  "cs",  "csr", "crd", "crds", "cj",   "ds",     "deploy", "ep",
                                         "ev",  "hpa", "ing", "limits", "netpol", "no", "ns",     "pc",     "pdb",
                                         "po",  "psp", "pv",  "pvc", "quota", "rc",  "rs",     "sa",     "sc",
                                         "sts", "svc", "vac"};
  REQUIRE(names["shortNames"].size() >= 1);
  for (const json& s : names["shortNames"]) CHECK(builtin.count(s.get<std::string>()) == 0);
  REQUIRE(crd["spec"]["versions"].size() == 1);
  const json& v = crd["spec"]["versions"][0];
  CHECK(v["name"] == "v1alpha1");
  CHECK(v["served"] == true);
  CHECK(v["storage"] == true);
}

TEST_CASE("status and scale subresources let HPA and KEDA drive the workers", "[crd]") {
  json crd = Crd();
  const json& sub = crd["spec"]["versions"][0]["subresources"];
  CHECK(sub["status"] == json::object());
  CHECK(sub["scale"]["specReplicasPath"] == ".spec.workers.replicas");
  CHECK(sub["scale"]["statusReplicasPath"] == ".status.replicas");
  CHECK(sub["scale"]["labelSelectorPath"] == ".status.selector");
  const json& status = RootSchema(crd)["properties"]["status"]["properties"];
  CHECK(status["selector"]["type"] == "string");
  CHECK(status["replicas"]["type"] == "integer");
}

TEST_CASE("printer columns", "[crd]") {
  std::vector<std::string> columns;
  json crd = Crd();
  for (const json& c : crd["spec"]["versions"][0]["additionalPrinterColumns"]) {
    columns.push_back(c["name"]);
    CHECK(c.contains("jsonPath"));
    CHECK(c.contains("type"));
  }
  CHECK(columns == std::vector<std::string>{"Ready", "Workers", "Local", "Remote", "Stall", "Desired", "Age"});
}

TEST_CASE("the schema is structural and every field is described", "[crd]") {
  json crd = Crd();
  std::vector<std::string> problems;
  int fields = 0;
  WalkSchema(RootSchema(crd), "", [&](const json& s, const std::string& path) {
    ++fields;
    if (!s.contains("type") && !s.value("x-kubernetes-int-or-string", false)) problems.push_back(path + ": no type");
    // The root metadata schema may carry no description (a real API server refuses the CRD then); see below.
    const bool metadata = path == "metadata" || absl::StartsWith(path, "metadata.");
    if (!metadata && (!s.contains("description") || s["description"].get<std::string>().size() < 4)) {
      problems.push_back(path + ": no description");
    }
    if (s.value("type", "") == "array" && !s.contains("items")) problems.push_back(path + ": array without items");
    if (s.contains("anyOf") && !s.value("x-kubernetes-int-or-string", false)) problems.push_back(path + ": anyOf");
    for (const json& rule : s.value("x-kubernetes-validations", json::array())) {
      if (!rule.contains("message")) problems.push_back(path + ": rule without message");
    }
  });
  INFO(absl::StrJoin(problems, "\n"));
  CHECK(problems.empty());
  CHECK(fields > 100);
}

// A real API server (v1.26) accepts nothing in the root metadata schema but `type: object` and schemas of
// name and generateName: a description there made it refuse the CRD with 422 (testing/kube-fixtures/
// crd-validation.json, exchange 0). The name rule the docs promise is enforced there instead.
TEST_CASE("the root metadata schema holds only the 52-character DNS-1035 name rule", "[crd]") {
  const json crd = Crd();
  const json& metadata = RootSchema(crd)["properties"]["metadata"];
  std::set<std::string> keys;
  for (auto it = metadata.begin(); it != metadata.end(); ++it) keys.insert(it.key());
  CHECK(keys == std::set<std::string>{"type", "properties"});
  CHECK(metadata["type"] == "object");
  for (auto it = metadata["properties"].begin(); it != metadata["properties"].end(); ++it) {
    CHECK((it.key() == "name" || it.key() == "generateName"));
  }
  const json& name = metadata["properties"]["name"];
  CHECK(name["type"] == "string");
  CHECK(name["maxLength"] == 52);
  for (const std::string& good : std::vector<std::string>{"mnist", "a", "a-1", "llm-pretrain", std::string(52, 'a')}) {
    json object = Minimal();
    object["metadata"]["name"] = good;
    INFO(good);
    CHECK(ServerValidate(object).empty());
  }
  for (const std::string& bad :
       std::vector<std::string>{"9lives", "fx-", "Bad_Name", "with.dots", "-x", std::string(53, 'a')}) {
    json object = Minimal();
    object["metadata"]["name"] = bad;
    INFO(bad);
    CHECK_FALSE(ServerValidate(object).empty());
  }
}

// A real API server evaluates the CEL rules of a schema against its `default` exactly as written, without
// applying the defaults nested in it first: `placement: {default: {}}` failed its own rules ("no such key:
// policy") and the server refused the CRD (crd-validation.json, exchange 1).
void CheckRulesOnDefault(const json& schema, const json& value, const std::string& path, int* checked) {
  for (const json& rule : schema.value("x-kubernetes-validations", json::array())) {
    INFO(path << " = " << value.dump() << ": " << rule["rule"].get<std::string>());
    json verdict;
    CHECK_NOTHROW(verdict = CelSubset(rule["rule"].get<std::string>(), value).Evaluate());
    CHECK(verdict == true);
    ++*checked;
  }
  if (value.is_object() && schema.contains("properties")) {
    for (auto it = value.begin(); it != value.end(); ++it) {
      if (schema["properties"].contains(it.key())) {
        CheckRulesOnDefault(schema["properties"][it.key()], it.value(), path + "." + it.key(), checked);
      }
    }
  }
}

TEST_CASE("every default passes its own schema's CEL rules as written", "[crd][defaults][cel]") {
  int checked = 0;
  WalkSchema(RootSchema(Crd()), "", [&](const json& schema, const std::string& path) {
    if (schema.contains("default")) CheckRulesOnDefault(schema, schema["default"], path + ".default", &checked);
  });
  CHECK(checked >= 2);  // placement's two rules at least
  // The check is not vacuous: the default the server refused fails it.
  json placement = RootSchema(Crd())["properties"]["spec"]["properties"]["placement"];
  CHECK_THROWS_WITH(CelSubset(placement["x-kubernetes-validations"][0]["rule"].get<std::string>(),
                              json::object()).Evaluate(), "no such key");
}

TEST_CASE("list types: conditions are a map keyed by type, workersToDelete a set", "[crd]") {
  json crd = Crd();
  const json& root = RootSchema(crd);
  const json& conditions = root["properties"]["status"]["properties"]["conditions"];
  CHECK(conditions["x-kubernetes-list-type"] == "map");
  CHECK(conditions["x-kubernetes-list-map-keys"] == json::array({"type"}));
  CHECK(conditions["items"]["required"] == json::array({"type", "status"}));
  const json& to_delete = root["properties"]["spec"]["properties"]["workers"]["properties"]["workersToDelete"];
  CHECK(to_delete["x-kubernetes-list-type"] == "set");
  CHECK(to_delete.contains("maxItems"));
}

// Each CEL rule of the CRD, evaluated on whole DataServices (defaults applied, as the API server
// does) that reach every branch of it: both outcomes of each condition, comparison and has(), and
// each way through && and ||. A rule outside the evaluator's subset fails to evaluate; a wrong rule
// gives the wrong verdict on one of these objects; a new rule without objects fails the coverage check.
TEST_CASE("every CEL rule is within the supported subset and right on objects reaching all its branches",
          "[crd][cel]") {
  struct Case {
    std::string rule;  // "<path>: <rule>"
    std::string name;
    std::function<void(json&)> mutate;  // of spec
    bool violates;
  };
  const std::string kLocalHybrid = "spec: has(self.workers.local) ? self.placement.policy == 'Hybrid' : true";
  const std::string kPipeline = "spec.pipeline: has(self.configMapRef) != has(self.inline)";
  const std::string kDispatcherPorts = "spec.dispatcher: self.port != self.metricsPort";
  const std::string kWorkerPorts = "spec.workers: self.port != self.metricsPort";
  const std::string kMinMax = "spec.workers: self.minReplicas <= self.maxReplicas";
  const std::string kReplicas =
      "spec.workers: self.replicas >= self.minReplicas && self.replicas <= self.maxReplicas";
  const std::string kLocalMax = "spec.workers: has(self.local) ? self.local <= self.maxReplicas : true";
  const std::string kSelector = "spec.placement: self.policy == 'RemoteOnly' || has(self.consumerSelector)";
  const std::string kFraction = "spec.placement: self.localCpuFraction > 0.0 && self.localCpuFraction <= 1.0";
  const std::string kStall = "spec.autoscaling: self.targetStallRatio >= 0.0 && self.targetStallRatio < 1.0";
  const json hybrid = {{"policy", "Hybrid"}, {"consumerSelector", {{"matchLabels", {{"app", "t"}}}}}};
  const std::vector<Case> cases = {
      {kLocalHybrid, "no split", [](json&) {}, false},
      {kLocalHybrid, "a split with Hybrid", [&](json& s) { s["placement"] = hybrid; s["workers"]["local"] = 1; }, false},
      {kLocalHybrid, "a split with the default RemoteOnly", [](json& s) { s["workers"]["local"] = 1; }, true},
      {kPipeline, "configMapRef only", [](json& s) { s["pipeline"] = {{"configMapRef", {{"name", "p"}}}}; }, false},
      {kPipeline, "inline only", [](json& s) { s["pipeline"] = {{"inline", "x"}}; }, false},
      {kPipeline, "both", [](json& s) { s["pipeline"] = {{"inline", "x"}, {"configMapRef", {{"name", "p"}}}}; }, true},
      {kPipeline, "neither", [](json& s) { s["pipeline"] = json::object(); }, true},
      {kDispatcherPorts, "default ports", [](json&) {}, false},
      {kDispatcherPorts, "the same port twice", [](json& s) { s["dispatcher"]["metricsPort"] = 5050; }, true},
      {kWorkerPorts, "default ports", [](json&) {}, false},
      {kWorkerPorts, "the same port twice", [](json& s) { s["workers"]["port"] = 8091; }, true},
      {kMinMax, "defaults", [](json&) {}, false},
      {kMinMax, "min above max",
       [](json& s) { s["workers"]["minReplicas"] = 5; s["workers"]["maxReplicas"] = 4; }, true},
      {kReplicas, "within bounds", [](json& s) { s["workers"]["replicas"] = 3; }, false},
      {kReplicas, "at both bounds",
       [](json& s) { s["workers"]["minReplicas"] = 4; s["workers"]["maxReplicas"] = 4; s["workers"]["replicas"] = 4; },
       false},
      {kReplicas, "below min", [](json& s) { s["workers"]["minReplicas"] = 2; s["workers"]["replicas"] = 1; }, true},
      {kReplicas, "above max", [](json& s) { s["workers"]["replicas"] = 33; }, true},
      {kLocalMax, "no split", [](json&) {}, false},
      {kLocalMax, "a split within max", [&](json& s) { s["placement"] = hybrid; s["workers"]["local"] = 32; }, false},
      {kLocalMax, "a split above max", [&](json& s) { s["placement"] = hybrid; s["workers"]["local"] = 33; }, true},
      {kSelector, "RemoteOnly without a selector", [](json&) {}, false},
      {kSelector, "Hybrid with a selector", [&](json& s) { s["placement"] = hybrid; }, false},
      {kSelector, "LocalOnly without a selector", [](json& s) { s["placement"] = {{"policy", "LocalOnly"}}; }, true},
      {kFraction, "default 0.5", [](json&) {}, false},
      {kFraction, "exactly 1", [](json& s) { s["placement"] = {{"localCpuFraction", 1.0}}; }, false},
      {kFraction, "0", [](json& s) { s["placement"] = {{"localCpuFraction", 0.0}}; }, true},
      {kFraction, "above 1", [](json& s) { s["placement"] = {{"localCpuFraction", 1.5}}; }, true},
      {kStall, "default 0.05", [](json& s) { s["autoscaling"] = json::object(); }, false},
      {kStall, "exactly 0", [](json& s) { s["autoscaling"] = {{"targetStallRatio", 0.0}}; }, false},
      {kStall, "negative", [](json& s) { s["autoscaling"] = {{"targetStallRatio", -0.1}}; }, true},
      {kStall, "1", [](json& s) { s["autoscaling"] = {{"targetStallRatio", 1.0}}; }, true},
  };

  // The CRD's rules ("<path>: <rule>") and their messages.
  std::map<std::string, std::string> messages;
  json crd = Crd();
  WalkSchema(RootSchema(crd), "", [&](const json& schema, const std::string& path) {
    for (const json& rule : schema.value("x-kubernetes-validations", json::array())) {
      std::string text = rule["rule"];
      INFO(path << ": " << text);
      CHECK_FALSE(absl::StrContains(text, "!has"));  // unary ! is outside the subset
      CHECK(messages.emplace(path + ": " + text, rule["message"].get<std::string>()).second);
    }
  });
  REQUIRE(messages.size() == 10);

  std::map<std::string, std::set<std::string>> coverage;
  cel_coverage = &coverage;
  std::map<std::string, std::set<bool>> verdicts;
  for (const Case& c : cases) {
    INFO(c.rule << " / " << c.name);
    REQUIRE(messages.count(c.rule) == 1);  // the table names rules that are in the CRD
    json object = Minimal();
    c.mutate(object["spec"]);
    std::vector<std::string> errors = ServerValidate(object);
    INFO(absl::StrJoin(errors, "\n"));
    bool reported = false;
    for (const std::string& e : errors) {
      CHECK_FALSE(absl::StrContains(e, "failed to evaluate"));
      reported |= absl::StrContains(e, messages[c.rule]);
    }
    CHECK(reported == c.violates);
    if (!c.violates) CHECK(errors.empty());
    verdicts[c.rule].insert(c.violates);
  }
  cel_coverage = nullptr;

  for (const auto& [key, message] : messages) {
    INFO(key);
    CHECK(verdicts[key] == std::set<bool>{false, true});  // accepted and rejected objects for each rule
    std::set<std::string> want = CelSubset(key.substr(key.find(": ") + 2), json::object()).AllBranches();
    CHECK_FALSE(want.empty());
    std::set<std::string> missing;
    for (const std::string& b : want) {
      if (!coverage[key].count(b)) missing.insert(b);
    }
    INFO("branches never reached: " << absl::StrJoin(missing, ", "));
    CHECK(missing.empty());
  }
}

TEST_CASE("the CEL evaluator rejects what lies outside its subset and reports branch coverage", "[crd][cel]") {
  const json self = {{"a", 1}, {"b", 2}};
  for (const std::string rule : {"self.a in [1, 2]", "!has(self.a)", "self.a.startsWith('x')", "self.a + 1 == 2"}) {
    INFO(rule);
    CHECK_THROWS_AS(CelSubset(rule, self).Evaluate(), std::runtime_error);
  }
  CHECK_THROWS_WITH(CelSubset("self.c == 1", self).Evaluate(), "no such key");
  std::set<std::string> covered;
  CHECK(CelSubset("self.a < self.b || has(self.c)", self, &covered).Evaluate() == true);
  CHECK(covered == std::set<std::string>{"<@3:T", "||@7:T"});  // has() not evaluated: short-circuit
  CHECK(CelSubset("self.a < self.b || has(self.c)", self).AllBranches() ==
        std::set<std::string>{"<@3:T", "<@3:F", "||@7:T", "||@7:FT", "||@7:FF", "has@8:T", "has@8:F"});
}

TEST_CASE("the CRD's defaults are the C++ defaults", "[crd][defaults]") {
  json object = Minimal();
  // Present-but-empty sections get their nested defaults too.
  object["spec"]["pipeline"] = {{"configMapRef", {{"name", "p"}}}};
  object["spec"]["dispatcher"]["journal"] = json::object();
  object["spec"]["autoscaling"] = json::object();
  object["spec"]["autoOrder"] = json::object();
  object["spec"]["sharing"] = json::object();
  json defaulted = object;
  json crd = Crd();
  ApplyDefaults(RootSchema(crd), defaulted);
  // Every default in the schema was applied to something we then read back.
  CHECK(defaulted["spec"]["placement"]["policy"] == "RemoteOnly");
  CHECK(defaulted["spec"]["workers"]["resources"]["requests"]["cpu"] == "1");

  absl::StatusOr<DataService> raw = ParseDataService(object);
  absl::StatusOr<DataService> server = ParseDataService(defaulted);
  REQUIRE(raw.ok());
  REQUIRE(server.ok());
  const DataServiceSpec& a = raw->spec;
  const DataServiceSpec& b = server->spec;
  CHECK(a.pipeline.config_map_ref->key == b.pipeline.config_map_ref->key);
  CHECK(a.dispatcher.port == b.dispatcher.port);
  CHECK(a.dispatcher.metrics_port == b.dispatcher.metrics_port);
  CHECK(a.dispatcher.termination_grace_period_seconds == b.dispatcher.termination_grace_period_seconds);
  CHECK(a.dispatcher.journal->size == b.dispatcher.journal->size);
  CHECK(a.workers.replicas == b.workers.replicas);
  CHECK(a.workers.min_replicas == b.workers.min_replicas);
  CHECK(a.workers.max_replicas == b.workers.max_replicas);
  CHECK(a.workers.port == b.workers.port);
  CHECK(a.workers.metrics_port == b.workers.metrics_port);
  CHECK(a.workers.max_unavailable == b.workers.max_unavailable);
  CHECK(a.workers.termination_grace_period_seconds == b.workers.termination_grace_period_seconds);
  CHECK(a.workers.resources.requests == b.workers.resources.requests);
  CHECK(a.workers.resources.limits == b.workers.resources.limits);
  CHECK(a.placement.policy == b.placement.policy);
  CHECK(a.placement.local_cpu_fraction == b.placement.local_cpu_fraction);
  CHECK(a.autoscaling.enabled == b.autoscaling.enabled);
  CHECK(a.autoscaling.target_stall_ratio == b.autoscaling.target_stall_ratio);
  CHECK(a.auto_order.enabled == b.auto_order.enabled);
  CHECK(a.auto_order.mode == b.auto_order.mode);
  CHECK(a.sharing.enabled == b.sharing.enabled);
  // And the objects the operator would create are identical.
  ReconcileInput ia, ib;
  ia.dataservice = object;
  ib.dataservice = defaulted;
  absl::StatusOr<ReconcileResult> ra = Reconcile(ia);
  absl::StatusOr<ReconcileResult> rb = Reconcile(ib);
  REQUIRE(ra.ok());
  REQUIRE(rb.ok());
  REQUIRE(ra->actions.size() == rb->actions.size());
  for (size_t i = 0; i < ra->actions.size(); ++i) {
    if (const auto* ca = std::get_if<CreateObject>(&ra->actions[i])) {
      const auto* cb = std::get_if<CreateObject>(&rb->actions[i]);
      REQUIRE(cb != nullptr);
      CHECK(ca->manifest == cb->manifest);
    }
  }
  CHECK(ServerValidate(object).empty());
}

TEST_CASE("the examples validate against the CRD and reconcile cleanly", "[crd][examples]") {
  for (const std::string file : {"dataservice-minimal.yaml", "dataservice-hybrid.yaml", "dataservice-autoscaling.yaml"}) {
    INFO(file);
    json ds = ExampleDataService(file);
    std::vector<std::string> errors = ServerValidate(ds);
    INFO(absl::StrJoin(errors, "\n"));
    CHECK(errors.empty());
    ds["metadata"]["namespace"] = "ml";
    ds["metadata"]["uid"] = "uid-1";
    absl::StatusOr<DataService> parsed = ParseDataService(ds);
    REQUIRE(parsed.ok());
    CHECK(ValidateDataService(*parsed).empty());
    ReconcileInput in;
    in.dataservice = ds;
    absl::StatusOr<ReconcileResult> r = Reconcile(in);
    REQUIRE(r.ok());
    int pods = 0;
    for (const Action& a : r->actions) {
      if (const auto* c = std::get_if<CreateObject>(&a)) pods += c->kind == "Pod";
    }
    // The dispatcher and as many remote workers as replicas (no consumers observed: no local capacity).
    CHECK(pods == 1 + parsed->spec.workers.replicas);
  }
  json hybrid = ExampleDataService("dataservice-hybrid.yaml");
  CHECK(hybrid["spec"]["placement"]["policy"] == "Hybrid");
  CHECK(hybrid["spec"]["placement"].contains("consumerSelector"));
  CHECK(hybrid["spec"]["placement"].contains("acceleratorNodeSelector"));
  CHECK(hybrid["spec"]["placement"].contains("remoteNodeSelector"));
  CHECK(ExampleDataService("dataservice-autoscaling.yaml")["spec"]["autoscaling"]["enabled"] == true);
}

TEST_CASE("the CRD and the operator reject the same invalid specs", "[crd][cel]") {
  struct Case {
    std::string name;
    std::function<void(json&)> mutate;
    std::string server_error;  // a substring of the expected API server error
  };
  const std::vector<Case> cases = {
      {"minReplicas above maxReplicas", [](json& s) { s["workers"]["minReplicas"] = 5; s["workers"]["maxReplicas"] = 4; s["workers"]["replicas"] = 4; },
       "minReplicas must not exceed"},
      {"replicas above maxReplicas", [](json& s) { s["workers"]["replicas"] = 40; }, "must lie between"},
      {"replicas below minReplicas", [](json& s) { s["workers"]["minReplicas"] = 3; }, "must lie between"},
      {"negative replicas", [](json& s) { s["workers"]["replicas"] = -1; }, "below minimum"},
      {"local split without Hybrid", [](json& s) { s["workers"]["local"] = 1; }, "may only be set when placement.policy is Hybrid"},
      {"local above maxReplicas",
       [](json& s) {
         s["placement"] = {{"policy", "Hybrid"}, {"consumerSelector", {{"matchLabels", {{"a", "b"}}}}}};
         s["workers"]["local"] = 40;
       },
       "workers.local must not exceed"},
      {"LocalOnly without consumerSelector", [](json& s) { s["placement"] = {{"policy", "LocalOnly"}}; }, "consumerSelector is required"},
      {"Hybrid without consumerSelector", [](json& s) { s["placement"] = {{"policy", "Hybrid"}}; }, "consumerSelector is required"},
      {"localCpuFraction 0", [](json& s) { s["placement"] = {{"localCpuFraction", 0}}; }, "(0, 1]"},
      {"localCpuFraction above 1", [](json& s) { s["placement"] = {{"localCpuFraction", 1.5}}; }, "(0, 1]"},
      {"targetStallRatio 1", [](json& s) { s["autoscaling"] = {{"targetStallRatio", 1.0}}; }, "[0, 1)"},
      {"negative targetStallRatio", [](json& s) { s["autoscaling"] = {{"targetStallRatio", -0.1}}; }, "[0, 1)"},
      {"worker ports clash", [](json& s) { s["workers"]["metricsPort"] = 5051; }, "workers.port and workers.metricsPort"},
      {"dispatcher ports clash", [](json& s) { s["dispatcher"]["port"] = 8090; }, "dispatcher.port and dispatcher.metricsPort"},
      {"two pipeline sources", [](json& s) { s["pipeline"] = {{"inline", "x"}, {"configMapRef", {{"name", "p"}}}}; }, "exactly one"},
      {"no pipeline source", [](json& s) { s["pipeline"] = json::object(); }, "exactly one"},
      {"duplicate workersToDelete", [](json& s) { s["workers"]["workersToDelete"] = {"a", "a"}; }, "duplicate item"},
      {"unknown policy", [](json& s) { s["placement"] = {{"policy", "Sideways"}}; }, "unsupported value"},
      {"no worker image", [](json& s) { s["workers"].erase("image"); }, "missing required field image"},
      {"bad autoOrder mode", [](json& s) { s["autoOrder"] = {{"mode", "chaotic"}}; }, "unsupported value"},
  };
  for (const Case& c : cases) {
    INFO(c.name);
    json object = Minimal();
    c.mutate(object["spec"]);
    std::vector<std::string> errors = ServerValidate(object);
    INFO(absl::StrJoin(errors, "\n"));
    bool found = false;
    for (const std::string& e : errors) found |= absl::StrContains(e, c.server_error);
    CHECK(found);
    CHECK(OperatorRejects(object));
  }
  // Edge values both accept.
  json edge = Minimal();
  edge["spec"]["placement"] = {{"localCpuFraction", 1}};
  edge["spec"]["autoscaling"] = {{"targetStallRatio", 0}};
  edge["spec"]["workers"]["replicas"] = 0;
  CHECK(ServerValidate(edge).empty());
  CHECK_FALSE(OperatorRejects(edge));
}

}  // namespace
}  // namespace sluice::op
