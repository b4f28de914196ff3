#include "kube/config.h"

#include <cstdlib>
#include <exception>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "yaml-cpp/yaml.h"

namespace sluice::kube {
namespace {

namespace fs = std::filesystem;

absl::StatusOr<std::string> ReadWholeFile(const std::string& path, absl::string_view what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(what, ": cannot read file ", path));
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

std::string Resolve(absl::string_view base_dir, const std::string& path) {
  if (path.empty() || fs::path(path).is_absolute() || base_dir.empty()) return path;
  return (fs::path(std::string(base_dir)) / path).lexically_normal().string();
}

// One kubeconfig document with its origin, for error messages and relative paths.
struct Doc {
  YAML::Node root;
  std::string origin;
  std::string base_dir;
};

class Parser {
 public:
  explicit Parser(std::vector<Doc> docs) : docs_(std::move(docs)) {}

  absl::StatusOr<Config> Parse(absl::string_view context_override) {
    for (const Doc& doc : docs_) {
      if (!doc.root.IsMap() && !doc.root.IsNull()) {
        return Error(doc, "", "the document is not a YAML mapping");
      }
    }
    std::string context_name(context_override);
    if (context_name.empty()) {
      for (const Doc& doc : docs_) {
        if (!doc.root.IsMap() || !doc.root["current-context"]) continue;
        auto value = Scalar(doc, doc.root["current-context"], "current-context");
        if (!value.ok()) return value.status();
        if (!value->empty()) {
          context_name = *value;
          break;
        }
      }
    }
    if (context_name.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "kubeconfig ", Origins(), ": current-context: not set and no context was requested"));
    }
    const Doc* context_doc = nullptr;
    std::string context_path;
    YAML::Node context;
    auto status = FindNamed("contexts", "context", context_name, &context_doc, &context, &context_path);
    if (!status.ok()) return status;

    Config config;
    config.origin = Origins();
    std::string cluster_name, user_name;
    if (auto v = OptionalScalar(*context_doc, context["cluster"], context_path + ".cluster"); !v.ok()) {
      return v.status();
    } else {
      cluster_name = *v;
    }
    if (auto v = OptionalScalar(*context_doc, context["user"], context_path + ".user"); !v.ok()) {
      return v.status();
    } else {
      user_name = *v;
    }
    if (auto v = OptionalScalar(*context_doc, context["namespace"], context_path + ".namespace"); !v.ok()) {
      return v.status();
    } else if (!v->empty()) {
      config.ns = *v;
    }
    if (cluster_name.empty()) return Error(*context_doc, context_path + ".cluster", "is required");

    const Doc* cluster_doc = nullptr;
    std::string cluster_path;
    YAML::Node cluster;
    status = FindNamed("clusters", "cluster", cluster_name, &cluster_doc, &cluster, &cluster_path);
    if (!status.ok()) return status;
    status = ParseCluster(*cluster_doc, cluster, cluster_path, &config);
    if (!status.ok()) return status;

    if (!user_name.empty()) {
      const Doc* user_doc = nullptr;
      std::string user_path;
      YAML::Node user;
      status = FindNamed("users", "user", user_name, &user_doc, &user, &user_path);
      if (!status.ok()) return status;
      status = ParseUser(*user_doc, user, user_path, &config);
      if (!status.ok()) return status;
    }
    return config;
  }

 private:
  std::string Origins() const {
    std::string out;
    for (const Doc& doc : docs_) absl::StrAppend(&out, out.empty() ? "" : ":", doc.origin);
    return out;
  }

  static absl::Status Error(const Doc& doc, const std::string& field, absl::string_view problem) {
    return absl::InvalidArgumentError(absl::StrCat("kubeconfig ", doc.origin, ": ",
                                                   field.empty() ? "" : field + ": ", problem));
  }

  static absl::StatusOr<std::string> Scalar(const Doc& doc, const YAML::Node& node,
                                            const std::string& field) {
    if (!node || node.IsNull()) return Error(doc, field, "is required");
    if (!node.IsScalar()) return Error(doc, field, "expected a string");
    return node.Scalar();
  }
  static absl::StatusOr<std::string> OptionalScalar(const Doc& doc, const YAML::Node& node,
                                                    const std::string& field) {
    if (!node || node.IsNull()) return std::string();
    return Scalar(doc, node, field);
  }
  static absl::StatusOr<bool> OptionalBool(const Doc& doc, const YAML::Node& node,
                                           const std::string& field) {
    if (!node || node.IsNull()) return false;
    if (!node.IsScalar()) return Error(doc, field, "expected true or false");
    bool value = false;
    if (!YAML::convert<bool>::decode(node, value)) return Error(doc, field, "expected true or false");
    return value;
  }
  static absl::StatusOr<std::string> Base64(const Doc& doc, const YAML::Node& node,
                                            const std::string& field) {
    auto text = Scalar(doc, node, field);
    if (!text.ok()) return text.status();
    std::string decoded;
    if (!absl::Base64Unescape(*text, &decoded)) return Error(doc, field, "not valid base64");
    return decoded;
  }
  // Inline *-data (base64) wins over the file reference, like kubectl.
  static absl::StatusOr<std::string> DataOrFile(const Doc& doc, const YAML::Node& parent,
                                                const std::string& path, const char* data_key,
                                                const char* file_key) {
    if (parent[data_key] && !parent[data_key].IsNull()) {
      return Base64(doc, parent[data_key], path + "." + data_key);
    }
    auto file = OptionalScalar(doc, parent[file_key], path + "." + file_key);
    if (!file.ok()) return file.status();
    if (file->empty()) return std::string();
    return ReadWholeFile(Resolve(doc.base_dir, *file),
                         absl::StrCat("kubeconfig ", doc.origin, ": ", path, ".", file_key));
  }

  absl::Status FindNamed(const char* list_key, const char* item_key, const std::string& name,
                         const Doc** found_doc, YAML::Node* found, std::string* found_path) {
    for (const Doc& doc : docs_) {
      if (!doc.root.IsMap()) continue;
      YAML::Node list = doc.root[list_key];
      if (!list || list.IsNull()) continue;
      if (!list.IsSequence()) return Error(doc, list_key, "expected a list");
      for (size_t i = 0; i < list.size(); ++i) {
        std::string entry_path = absl::StrCat(list_key, "[", i, "]");
        YAML::Node entry = list[i];
        if (!entry.IsMap()) return Error(doc, entry_path, "expected a mapping with name and " + std::string(item_key));
        auto entry_name = Scalar(doc, entry["name"], entry_path + ".name");
        if (!entry_name.ok()) return entry_name.status();
        if (*entry_name != name) continue;
        YAML::Node item = entry[item_key];
        std::string item_path = entry_path + "." + item_key;
        if (!item || !item.IsMap()) return Error(doc, item_path, "expected a mapping");
        *found_doc = &doc;
        *found = item;
        *found_path = item_path;
        return absl::OkStatus();
      }
    }
    return absl::NotFoundError(absl::StrCat("kubeconfig ", Origins(), ": ", list_key, ": no entry named \"",
                                            name, "\""));
  }

  static absl::Status ParseCluster(const Doc& doc, const YAML::Node& cluster, const std::string& path,
                                   Config* config) {
    auto server = Scalar(doc, cluster["server"], path + ".server");
    if (!server.ok()) return server.status();
    if (server->rfind("https://", 0) != 0 && server->rfind("http://", 0) != 0) {
      return Error(doc, path + ".server", "must start with https:// or http://, got \"" + *server + "\"");
    }
    while (!server->empty() && server->back() == '/') server->pop_back();
    config->server = *server;
    auto ca = DataOrFile(doc, cluster, path, "certificate-authority-data", "certificate-authority");
    if (!ca.ok()) return ca.status();
    config->ca_pem = *ca;
    auto insecure = OptionalBool(doc, cluster["insecure-skip-tls-verify"], path + ".insecure-skip-tls-verify");
    if (!insecure.ok()) return insecure.status();
    config->insecure_skip_tls_verify = *insecure;
    auto server_name = OptionalScalar(doc, cluster["tls-server-name"], path + ".tls-server-name");
    if (!server_name.ok()) return server_name.status();
    config->tls_server_name = *server_name;
    return absl::OkStatus();
  }

  static absl::Status ParseUser(const Doc& doc, const YAML::Node& user, const std::string& path,
                                Config* config) {
    for (const char* unsupported : {"auth-provider", "username", "password"}) {
      if (user[unsupported]) {
        return Error(doc, path + "." + unsupported,
                     "is not supported by this client; use a token, client certificate or exec plugin");
      }
    }
    auto token = OptionalScalar(doc, user["token"], path + ".token");
    if (!token.ok()) return token.status();
    config->token = *token;
    auto token_file = OptionalScalar(doc, user["tokenFile"], path + ".tokenFile");
    if (!token_file.ok()) return token_file.status();
    if (!token_file->empty()) config->token_file = Resolve(doc.base_dir, *token_file);
    auto cert = DataOrFile(doc, user, path, "client-certificate-data", "client-certificate");
    if (!cert.ok()) return cert.status();
    auto key = DataOrFile(doc, user, path, "client-key-data", "client-key");
    if (!key.ok()) return key.status();
    if (cert->empty() != key->empty()) {
      return Error(doc, path + (cert->empty() ? ".client-certificate" : ".client-key"),
                   "a client certificate needs both client-certificate(-data) and client-key(-data)");
    }
    config->client_cert_pem = *cert;
    config->client_key_pem = *key;
    if (user["exec"] && !user["exec"].IsNull()) {
      auto exec = ParseExec(doc, user["exec"], path + ".exec");
      if (!exec.ok()) return exec.status();
      config->exec = *exec;
    }
    return absl::OkStatus();
  }

  static absl::StatusOr<ExecConfig> ParseExec(const Doc& doc, const YAML::Node& node, const std::string& path) {
    if (!node.IsMap()) return Error(doc, path, "expected a mapping");
    ExecConfig exec;
    auto api_version = Scalar(doc, node["apiVersion"], path + ".apiVersion");
    if (!api_version.ok()) return api_version.status();
    if (*api_version != "client.authentication.k8s.io/v1" &&
        *api_version != "client.authentication.k8s.io/v1beta1") {
      return Error(doc, path + ".apiVersion",
                   "unsupported \"" + *api_version +
                       "\"; use client.authentication.k8s.io/v1 or client.authentication.k8s.io/v1beta1");
    }
    exec.api_version = *api_version;
    auto command = Scalar(doc, node["command"], path + ".command");
    if (!command.ok()) return command.status();
    if (command->empty()) return Error(doc, path + ".command", "is required");
    // Like kubectl: a relative path with a separator is relative to the kubeconfig's folder.
    exec.command = command->find('/') != std::string::npos ? Resolve(doc.base_dir, *command) : *command;
    if (node["args"] && !node["args"].IsNull()) {
      if (!node["args"].IsSequence()) return Error(doc, path + ".args", "expected a list of strings");
      for (size_t i = 0; i < node["args"].size(); ++i) {
        auto arg = Scalar(doc, node["args"][i], absl::StrCat(path, ".args[", i, "]"));
        if (!arg.ok()) return arg.status();
        exec.args.push_back(*arg);
      }
    }
    if (node["env"] && !node["env"].IsNull()) {
      if (!node["env"].IsSequence()) return Error(doc, path + ".env", "expected a list of {name, value}");
      for (size_t i = 0; i < node["env"].size(); ++i) {
        std::string entry = absl::StrCat(path, ".env[", i, "]");
        if (!node["env"][i].IsMap()) return Error(doc, entry, "expected {name, value}");
        auto name = Scalar(doc, node["env"][i]["name"], entry + ".name");
        if (!name.ok()) return name.status();
        auto value = OptionalScalar(doc, node["env"][i]["value"], entry + ".value");
        if (!value.ok()) return value.status();
        exec.env.emplace_back(*name, *value);
      }
    }
    auto hint = OptionalScalar(doc, node["installHint"], path + ".installHint");
    if (!hint.ok()) return hint.status();
    exec.install_hint = *hint;
    auto provide = OptionalBool(doc, node["provideClusterInfo"], path + ".provideClusterInfo");
    if (!provide.ok()) return provide.status();
    exec.provide_cluster_info = *provide;
    return exec;
  }

  std::vector<Doc> docs_;
};

absl::StatusOr<Doc> ParseDoc(absl::string_view yaml, absl::string_view origin, absl::string_view base_dir) {
  Doc doc;
  doc.origin = std::string(origin);
  doc.base_dir = std::string(base_dir);
  try {
    doc.root = YAML::Load(std::string(yaml));
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("kubeconfig ", origin, ": YAML syntax error at line ",
                                                   e.mark.line + 1, ", column ", e.mark.column + 1, ": ", e.msg));
  }
  return doc;
}

absl::StatusOr<Config> ParseDocs(std::vector<Doc> docs, absl::string_view context) {
  try {
    return Parser(std::move(docs)).Parse(context);
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("kubeconfig: unexpected structure: ", e.what()));
  }
}

}  // namespace

absl::StatusOr<Config> ParseKubeconfig(absl::string_view yaml, absl::string_view origin,
                                       absl::string_view base_dir, absl::string_view context) {
  auto doc = ParseDoc(yaml, origin, base_dir);
  if (!doc.ok()) return doc.status();
  std::vector<Doc> docs;
  docs.push_back(std::move(*doc));
  return ParseDocs(std::move(docs), context);
}

absl::StatusOr<Config> LoadKubeconfig(absl::string_view paths, absl::string_view context) {
  std::vector<Doc> docs;
  for (absl::string_view piece : absl::StrSplit(paths, ':', absl::SkipEmpty())) {
    std::string path(piece);
    std::error_code ec;
    if (!fs::exists(path, ec)) {
      // kubectl skips missing entries of a list but a single explicit file must exist.
      continue;
    }
    auto text = ReadWholeFile(path, "kubeconfig");
    if (!text.ok()) return text.status();
    auto doc = ParseDoc(*text, path, fs::absolute(path).parent_path().string());
    if (!doc.ok()) return doc.status();
    docs.push_back(std::move(*doc));
  }
  if (docs.empty()) {
    return absl::NotFoundError(absl::StrCat("kubeconfig: no readable file in \"", paths,
                                            "\"; set KUBECONFIG or pass --kubeconfig"));
  }
  return ParseDocs(std::move(docs), context);
}

absl::StatusOr<Config> LoadInClusterConfig(absl::string_view secrets_dir) {
  const char* host = std::getenv("KUBERNETES_SERVICE_HOST");
  const char* port = std::getenv("KUBERNETES_SERVICE_PORT");
  if (host == nullptr || *host == '\0' || port == nullptr || *port == '\0') {
    return absl::FailedPreconditionError(
        "in-cluster config: KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT must be set "
        "(not running in a pod?)");
  }
  Config config;
  config.origin = "in-cluster";
  std::string h(host);
  if (h.find(':') != std::string::npos) h = "[" + h + "]";  // IPv6 literal
  config.server = absl::StrCat("https://", h, ":", port);
  fs::path dir{std::string(secrets_dir)};
  config.token_file = (dir / "token").string();
  std::error_code ec;
  if (!fs::exists(config.token_file, ec)) {
    return absl::NotFoundError(absl::StrCat("in-cluster config: service-account token ",
                                            config.token_file, " does not exist"));
  }
  auto ca = ReadWholeFile((dir / "ca.crt").string(), "in-cluster config: ca.crt");
  if (!ca.ok()) return ca.status();
  config.ca_pem = *ca;
  auto ns = ReadWholeFile((dir / "namespace").string(), "in-cluster config: namespace");
  if (ns.ok()) {
    std::string trimmed = *ns;
    while (!trimmed.empty() && (trimmed.back() == '\n' || trimmed.back() == ' ')) trimmed.pop_back();
    if (!trimmed.empty()) config.ns = trimmed;
  }
  return config;
}

absl::StatusOr<Config> LoadDefaultConfig(absl::string_view explicit_path, absl::string_view context) {
  if (!explicit_path.empty()) {
    std::error_code ec;
    if (!fs::exists(std::string(explicit_path), ec)) {
      return absl::NotFoundError(absl::StrCat("kubeconfig ", explicit_path, ": file does not exist"));
    }
    return LoadKubeconfig(explicit_path, context);
  }
  if (const char* env = std::getenv("KUBECONFIG"); env != nullptr && *env != '\0') {
    return LoadKubeconfig(env, context);
  }
  if (const char* home = std::getenv("HOME"); home != nullptr && *home != '\0') {
    std::string path = (fs::path(home) / ".kube" / "config").string();
    std::error_code ec;
    if (fs::exists(path, ec)) return LoadKubeconfig(path, context);
  }
  return LoadInClusterConfig();
}

}  // namespace sluice::kube
