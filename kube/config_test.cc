#include "kube/config.h"

#include <sys/stat.h>

#include <catch2/catch.hpp>
#include <cstdlib>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "kube/clock.h"
#include "kube/credentials.h"
#include "nlohmann/json.hpp"
#include "testing/test_util.h"

namespace sluice::kube {
namespace {

using sluice::testing::ReadFile;
using sluice::testing::TempDir;
using sluice::testing::WriteFile;

// Scoped environment variable.
class EnvVar {
 public:
  EnvVar(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value) setenv(name, value, 1);
    else unsetenv(name);
  }
  ~EnvVar() {
    if (old_) setenv(name_, old_->c_str(), 1);
    else unsetenv(name_);
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

const char* kBasic = R"(
apiVersion: v1
kind: Config
current-context: dev
contexts:
- name: dev
  context: {cluster: c1, user: u1, namespace: team-a}
- name: other
  context: {cluster: c2, user: u2}
clusters:
- name: c1
  cluster:
    server: https://10.0.0.1:6443/
    certificate-authority-data: Q0EtUEVN
- name: c2
  cluster:
    server: http://127.0.0.1:8080
    insecure-skip-tls-verify: true
users:
- name: u1
  user: {token: abc123}
- name: u2
  user: {tokenFile: tok.txt}
)";

TEST_CASE("kubeconfig: current context with token / CA data and namespace") {
  auto config = ParseKubeconfig(kBasic, "mem", "/base");
  REQUIRE(config.ok());
  CHECK(config->server == "https://10.0.0.1:6443");
  CHECK(config->ca_pem == "CA-PEM");
  CHECK(config->token == "abc123");
  CHECK(config->ns == "team-a");
  CHECK_FALSE(config->insecure_skip_tls_verify);
}

TEST_CASE("kubeconfig: explicit context / plain http / insecure / relative tokenFile") {
  auto config = ParseKubeconfig(kBasic, "mem", "/base", "other");
  REQUIRE(config.ok());
  CHECK(config->server == "http://127.0.0.1:8080");
  CHECK(config->insecure_skip_tls_verify);
  CHECK(config->token_file == "/base/tok.txt");
  CHECK(config->ns == "default");
}

TEST_CASE("kubeconfig: client certificate and key files resolved against the file's folder") {
  TempDir dir;
  WriteFile(dir.File("certs/client.crt"), "CERT");
  WriteFile(dir.File("certs/client.key"), "KEY");
  WriteFile(dir.File("ca.crt"), "CA");
  WriteFile(dir.File("config"), R"(
current-context: x
contexts: [{name: x, context: {cluster: c, user: u}}]
clusters: [{name: c, cluster: {server: "https://k:6443", certificate-authority: ca.crt}}]
users: [{name: u, user: {client-certificate: certs/client.crt, client-key: certs/client.key}}]
)");
  auto config = LoadKubeconfig(dir.File("config"));
  REQUIRE(config.ok());
  CHECK(config->client_cert_pem == "CERT");
  CHECK(config->client_key_pem == "KEY");
  CHECK(config->ca_pem == "CA");
}

TEST_CASE("kubeconfig: inline client certificate data") {
  std::string yaml = absl::StrCat(R"(
current-context: x
contexts: [{name: x, context: {cluster: c, user: u}}]
clusters: [{name: c, cluster: {server: "https://k"}}]
users: [{name: u, user: {client-certificate-data: )", absl::Base64Escape("C"), ", client-key-data: ",
                                  absl::Base64Escape("K"), "}}]\n");
  auto config = ParseKubeconfig(yaml, "mem", "");
  REQUIRE(config.ok());
  CHECK(config->client_cert_pem == "C");
  CHECK(config->client_key_pem == "K");
}

TEST_CASE("kubeconfig: KUBECONFIG list merges files / first value wins") {
  TempDir dir;
  WriteFile(dir.File("a"), "current-context: ctx\nusers: [{name: u, user: {token: from-a}}]\n");
  WriteFile(dir.File("b"), R"(
current-context: ignored
contexts: [{name: ctx, context: {cluster: c, user: u}}]
clusters: [{name: c, cluster: {server: "https://b:1"}}]
users: [{name: u, user: {token: from-b}}]
)");
  EnvVar env("KUBECONFIG", absl::StrCat(dir.File("a"), ":", dir.File("missing"), ":", dir.File("b")).c_str());
  auto config = LoadDefaultConfig();
  REQUIRE(config.ok());
  CHECK(config->server == "https://b:1");
  CHECK(config->token == "from-a");
}

TEST_CASE("kubeconfig: explicit path beats KUBECONFIG beats ~/.kube/config") {
  TempDir dir;
  auto write = [&](const std::string& path, const std::string& server) {
    WriteFile(path, absl::StrCat("current-context: x\ncontexts: [{name: x, context: {cluster: c}}]\n",
                                 "clusters: [{name: c, cluster: {server: \"", server, "\"}}]\n"));
  };
  write(dir.File("explicit"), "https://explicit");
  write(dir.File("env"), "https://env");
  write(dir.File("home/.kube/config"), "https://home");
  EnvVar home("HOME", dir.File("home").c_str());
  {
    EnvVar env("KUBECONFIG", dir.File("env").c_str());
    CHECK(LoadDefaultConfig(dir.File("explicit"))->server == "https://explicit");
    CHECK(LoadDefaultConfig()->server == "https://env");
  }
  EnvVar env("KUBECONFIG", nullptr);
  CHECK(LoadDefaultConfig()->server == "https://home");
  auto missing = LoadDefaultConfig(dir.File("nope"));
  CHECK(absl::IsNotFound(missing.status()));
  CHECK(std::string(missing.status().message()).find(dir.File("nope")) != std::string::npos);
}

// Every malformed input names the file and the field.
TEST_CASE("kubeconfig: malformed inputs name the field") {
  struct Case {
    const char* yaml;
    const char* expected;
  };
  const Case cases[] = {
      {"current-context: [oops\n", "YAML syntax error at line"},
      {"- a\n- b\n", "not a YAML mapping"},
      {"contexts: []\n", "current-context: not set"},
      {"current-context: x\ncontexts: [{name: x, context: {cluster: c}}]\n", "clusters: no entry named \"c\""},
      {"current-context: x\ncontexts: [{name: x, context: {user: u}}]\n", "contexts[0].context.cluster: is required"},
      {"current-context: x\ncontexts: [{context: {}}]\n", "contexts[0].name: is required"},
      {"current-context: x\ncontexts: {x: 1}\n", "contexts: expected a list"},
      {"current-context: x\ncontexts: [{name: x, context: {cluster: c}}]\nclusters: [{name: c, cluster: {}}]\n",
       "clusters[0].cluster.server: is required"},
      {"current-context: x\ncontexts: [{name: x, context: {cluster: c}}]\nclusters: [{name: c, cluster: {server: "
       "\"ftp://x\"}}]\n",
       "clusters[0].cluster.server: must start with https:// or http://"},
      {"current-context: x\ncontexts: [{name: x, context: {cluster: c}}]\nclusters: [{name: c, cluster: {server: "
       "\"https://x\", certificate-authority-data: \"!!notbase64\"}}]\n",
       "clusters[0].cluster.certificate-authority-data: not valid base64"},
      {"current-context: x\ncontexts: [{name: x, context: {cluster: c}}]\nclusters: [{name: c, cluster: {server: "
       "\"https://x\", insecure-skip-tls-verify: maybe}}]\n",
       "clusters[0].cluster.insecure-skip-tls-verify: expected true or false"},
      {"current-context: x\ncontexts: [{name: x, context: {cluster: c, user: u}}]\nclusters: [{name: c, cluster: "
       "{server: \"https://x\"}}]\nusers: [{name: u, user: {client-certificate-data: QQ==}}]\n",
       "users[0].user.client-key: a client certificate needs both"},
      {"current-context: x\ncontexts: [{name: x, context: {cluster: c, user: u}}]\nclusters: [{name: c, cluster: "
       "{server: \"https://x\"}}]\nusers: [{name: u, user: {exec: {apiVersion: client.authentication.k8s.io/v1alpha1, "
       "command: x}}}]\n",
       "users[0].user.exec.apiVersion: unsupported"},
      {"current-context: x\ncontexts: [{name: x, context: {cluster: c, user: u}}]\nclusters: [{name: c, cluster: "
       "{server: \"https://x\"}}]\nusers: [{name: u, user: {exec: {apiVersion: client.authentication.k8s.io/v1, "
       "command: x, args: notalist}}}]\n",
       "users[0].user.exec.args: expected a list"},
      {"current-context: x\ncontexts: [{name: x, context: {cluster: c, user: u}}]\nclusters: [{name: c, cluster: "
       "{server: \"https://x\"}}]\nusers: [{name: u, user: {exec: {apiVersion: client.authentication.k8s.io/v1}}}]\n",
       "users[0].user.exec.command: is required"},
      {"current-context: x\ncontexts: [{name: x, context: {cluster: c, user: u}}]\nclusters: [{name: c, cluster: "
       "{server: \"https://x\"}}]\nusers: [{name: u, user: {exec: {apiVersion: client.authentication.k8s.io/v1, "
       "command: x, env: [{value: 1}]}}}]\n",
       "users[0].user.exec.env[0].name: is required"},
      {"current-context: x\ncontexts: [{name: x, context: {cluster: c, user: u}}]\nclusters: [{name: c, cluster: "
       "{server: \"https://x\"}}]\nusers: [{name: u, user: {auth-provider: {name: gcp}}}]\n",
       "users[0].user.auth-provider: is not supported"},
      {"current-context: x\ncontexts: [{name: x, context: {cluster: c, user: u}}]\nclusters: [{name: c, cluster: "
       "{server: \"https://x\", certificate-authority: /nonexistent/ca.crt}}]\n",
       "clusters[0].cluster.certificate-authority: cannot read file /nonexistent/ca.crt"},
  };
  for (const Case& c : cases) {
    INFO(c.yaml);
    auto config = ParseKubeconfig(c.yaml, "/etc/kube.yaml", "/etc");
    REQUIRE_FALSE(config.ok());
    std::string message(config.status().message());
    INFO(message);
    CHECK(message.find("kubeconfig /etc/kube.yaml") != std::string::npos);
    CHECK(message.find(c.expected) != std::string::npos);
  }
}

TEST_CASE("in-cluster config reads service-account files - token file is re-read on rotation") {
  TempDir dir;
  WriteFile(dir.File("token"), "first-token\n");
  WriteFile(dir.File("ca.crt"), "CA");
  WriteFile(dir.File("namespace"), "kube-ops\n");
  EnvVar host("KUBERNETES_SERVICE_HOST", "10.96.0.1");
  EnvVar port("KUBERNETES_SERVICE_PORT", "443");
  auto config = LoadInClusterConfig(dir.path().string());
  REQUIRE(config.ok());
  CHECK(config->server == "https://10.96.0.1:443");
  CHECK(config->ca_pem == "CA");
  CHECK(config->ns == "kube-ops");
  auto source = MakeTokenSource(*config);
  REQUIRE(source != nullptr);
  CHECK(*source->Token() == "first-token");
  WriteFile(dir.File("token"), "rotated-token-2\n");  // different size: visible even within one mtime tick
  CHECK(*source->Token() == "rotated-token-2");
}

TEST_CASE("in-cluster config errors name what is missing") {
  TempDir dir;
  {
    EnvVar host("KUBERNETES_SERVICE_HOST", nullptr);
    auto config = LoadInClusterConfig(dir.path().string());
    CHECK(std::string(config.status().message()).find("KUBERNETES_SERVICE_HOST") != std::string::npos);
  }
  EnvVar host("KUBERNETES_SERVICE_HOST", "fd00::1");
  EnvVar port("KUBERNETES_SERVICE_PORT", "6443");
  auto config = LoadInClusterConfig(dir.path().string());
  CHECK(std::string(config.status().message()).find(dir.File("token")) != std::string::npos);
  WriteFile(dir.File("token"), "t");
  WriteFile(dir.File("ca.crt"), "CA");
  config = LoadInClusterConfig(dir.path().string());
  REQUIRE(config.ok());
  CHECK(config->server == "https://[fd00::1]:6443");
}

// A tiny exec credential plugin: counts its runs, records KUBERNETES_EXEC_INFO, prints a token.
std::string WritePlugin(const TempDir& dir, const std::string& expiration) {
  std::string script = dir.File("plugin.sh");
  WriteFile(script, absl::StrCat("#!/bin/sh\n",
                                 "echo run >> \"", dir.File("runs"), "\"\n",
                                 "printf '%s' \"$KUBERNETES_EXEC_INFO\" > \"", dir.File("info"), "\"\n",
                                 "n=$(wc -l < \"", dir.File("runs"), "\" | tr -d ' ')\n",
                                 "printf '{\"apiVersion\":\"client.authentication.k8s.io/v1\",\"kind\":\"ExecCredential\",",
                                 "\"status\":{\"token\":\"tok-%s-%s\",\"expirationTimestamp\":\"", expiration,
                                 "\"}}' \"$n\" \"$1$PLUGIN_ENV\"\n"));
  chmod(script.c_str(), 0755);
  return script;
}

TEST_CASE("exec plugin: token cached until expirationTimestamp / args and env passed / info provided") {
  TempDir dir;
  FakeClock clock(absl::FromUnixSeconds(1'900'000'000));
  std::string expiry = absl::FormatTime(absl::RFC3339_sec, clock.Now() + absl::Minutes(5), absl::UTCTimeZone());
  WritePlugin(dir, expiry);
  WriteFile(dir.File("config"), R"(
current-context: x
contexts: [{name: x, context: {cluster: c, user: u}}]
clusters: [{name: c, cluster: {server: "https://k:6443"}}]
users:
- name: u
  user:
    exec:
      apiVersion: client.authentication.k8s.io/v1
      command: ./plugin.sh
      args: [A]
      env: [{name: PLUGIN_ENV, value: B}]
      provideClusterInfo: true
)");
  auto config = LoadKubeconfig(dir.File("config"));
  REQUIRE(config.ok());
  REQUIRE(config->exec.has_value());
  CHECK(config->exec->command == dir.File("plugin.sh"));
  ExecTokenSource source(*config->exec, config->server, &clock);
  auto token = source.Token();
  REQUIRE(token.ok());
  CHECK(*token == "tok-1-AB");
  auto info = nlohmann::json::parse(ReadFile(dir.File("info")));
  CHECK(info["apiVersion"] == "client.authentication.k8s.io/v1");
  CHECK(info["kind"] == "ExecCredential");
  CHECK(info["spec"]["cluster"]["server"] == "https://k:6443");
  clock.Advance(absl::Minutes(4));
  CHECK(*source.Token() == "tok-1-AB");
  CHECK(source.runs() == 1);
  clock.Advance(absl::Minutes(2));  // past expiry
  CHECK(*source.Token() == "tok-2-AB");
  CHECK(source.runs() == 2);
  source.Invalidate();  // e.g. after a 401
  CHECK(*source.Token() == "tok-3-AB");
}

TEST_CASE("exec plugin failures are Unauthenticated and say why") {
  TempDir dir;
  std::string failing = dir.File("fail.sh");
  WriteFile(failing, "#!/bin/sh\necho 'please log in' >&2\nexit 3\n");
  chmod(failing.c_str(), 0755);
  ExecConfig exec{"client.authentication.k8s.io/v1", failing, {}, {}, "install it", false};
  ExecTokenSource source(exec, "https://k");
  auto token = source.Token();
  REQUIRE_FALSE(token.ok());
  CHECK(token.status().code() == absl::StatusCode::kUnauthenticated);
  CHECK(std::string(token.status().message()).find("exited with code 3: please log in") != std::string::npos);

  ExecConfig missing{"client.authentication.k8s.io/v1", dir.File("nope"), {}, {}, "brew install nope", false};
  auto missing_token = ExecTokenSource(missing, "https://k").Token();
  CHECK(std::string(missing_token.status().message()).find("brew install nope") != std::string::npos);
}

TEST_CASE("ExecCredential parsing rejects malformed documents naming the field") {
  const char* v1 = "client.authentication.k8s.io/v1";
  CHECK(std::string(ParseExecCredential("nope", v1, "p").status().message()).find("not a JSON object") != std::string::npos);
  CHECK(std::string(ParseExecCredential(R"({"kind":"Other"})", v1, "p").status().message()).find("kind") != std::string::npos);
  CHECK(std::string(ParseExecCredential(R"({"kind":"ExecCredential","apiVersion":"x","status":{}})", v1, "p")
                        .status().message()).find("apiVersion") != std::string::npos);
  CHECK(std::string(ParseExecCredential(R"({"kind":"ExecCredential","apiVersion":"client.authentication.k8s.io/v1","status":{}})", v1, "p")
                        .status().message()).find("neither token") != std::string::npos);
  CHECK(std::string(ParseExecCredential(R"({"kind":"ExecCredential","apiVersion":"client.authentication.k8s.io/v1","status":{"token":"t","expirationTimestamp":"yesterday"}})", v1, "p")
                        .status().message()).find("status.expirationTimestamp") != std::string::npos);
  auto ok = ParseExecCredential(R"({"kind":"ExecCredential","apiVersion":"client.authentication.k8s.io/v1","status":{"token":"t"}})", v1, "p");
  REQUIRE(ok.ok());
  CHECK(ok->token == "t");
  CHECK_FALSE(ok->expiration.has_value());
}

}  // namespace
}  // namespace sluice::kube
