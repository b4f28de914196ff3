// Connection settings for a Kubernetes API server: kubeconfig files (explicit path, $KUBECONFIG,
// ~/.kube/config), and in-cluster service-account configuration.
//
// Loading is pure apart from reading the named files; errors name the file and the field path
// (e.g. "kubeconfig /x/config: users[0].user.client-key-data: not valid base64"). Thread-safe.
#ifndef SLUICE_KUBE_CONFIG_H_
#define SLUICE_KUBE_CONFIG_H_

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/status/statusor.h"

namespace sluice::kube {

// users[].user.exec: a credential plugin (client.authentication.k8s.io/v1 or v1beta1).
struct ExecConfig {
  std::string api_version{};
  std::string command{};  // absolute, PATH-looked-up, or resolved against the kubeconfig's folder
  std::vector<std::string> args{};
  std::vector<std::pair<std::string, std::string>> env{};
  std::string install_hint{};
  bool provide_cluster_info = false;
};

struct Config {
  std::string server{};  // "https://host:port" or "http://127.0.0.1:port"
  std::string ca_pem{};  // CA bundle contents; empty = system roots
  bool insecure_skip_tls_verify = false;
  std::string tls_server_name{};
  std::string client_cert_pem{};
  std::string client_key_pem{};
  std::string token;       // static bearer token
  std::string token_file{};  // bearer token re-read from this file when it changes
  std::optional<ExecConfig> exec{};
  std::string ns = "default";  // the context's (or service account's) namespace
  std::string origin{};          // file or "in-cluster", for messages
};

// Parses kubeconfig YAML. `origin` names it in errors; relative file references are resolved
// against `base_dir`. `context` overrides current-context when non-empty.
absl::StatusOr<Config> ParseKubeconfig(absl::string_view yaml, absl::string_view origin,
                                       absl::string_view base_dir, absl::string_view context = "");
// Loads one kubeconfig file, or a ':'-separated list merged like kubectl does (the first file
// that sets a value wins).
absl::StatusOr<Config> LoadKubeconfig(absl::string_view paths, absl::string_view context = "");

// Service-account configuration inside a pod. `secrets_dir` holds token, ca.crt, namespace.
absl::StatusOr<Config> LoadInClusterConfig(
    absl::string_view secrets_dir = "/var/run/secrets/kubernetes.io/serviceaccount");

// explicit_path if given; else $KUBECONFIG; else ~/.kube/config if it exists; else in-cluster.
absl::StatusOr<Config> LoadDefaultConfig(absl::string_view explicit_path = "",
                                         absl::string_view context = "");

}  // namespace sluice::kube

#endif  // SLUICE_KUBE_CONFIG_H_
