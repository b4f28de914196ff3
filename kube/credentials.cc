#include "kube/credentials.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "nlohmann/json.hpp"

extern char** environ;

namespace sluice::kube {
namespace {

using nlohmann::json;

std::string Trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r' || s.back() == ' ' || s.back() == '\t')) s.pop_back();
  size_t start = 0;
  while (start < s.size() && (s[start] == ' ' || s[start] == '\t')) ++start;
  return s.substr(start);
}

}  // namespace

absl::StatusOr<std::string> FileTokenSource::Token() {
  struct stat st {};
  if (stat(path_.c_str(), &st) != 0) {
    return absl::UnauthenticatedError(absl::StrCat("token file ", path_, ": ", std::strerror(errno)));
  }
  int64_t stamp = static_cast<int64_t>(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec + st.st_size;
  {
    absl::MutexLock lock(&mu_);
    if (stamp == stamp_ && !token_.empty()) return token_;
  }
  std::ifstream in(path_);
  if (!in) return absl::UnauthenticatedError(absl::StrCat("token file ", path_, ": cannot read"));
  std::stringstream buffer;
  buffer << in.rdbuf();
  std::string token = Trim(buffer.str());
  if (token.empty()) return absl::UnauthenticatedError(absl::StrCat("token file ", path_, ": empty"));
  absl::MutexLock lock(&mu_);
  token_ = token;
  stamp_ = stamp;
  return token;
}

bool FileTokenSource::Invalidate() {
  absl::MutexLock lock(&mu_);
  stamp_ = -1;
  return true;
}

absl::StatusOr<ProcessResult> RunProcess(const std::vector<std::string>& argv,
                                         const std::vector<std::pair<std::string, std::string>>& extra_env,
                                         absl::Duration timeout) {
  if (argv.empty()) return absl::InvalidArgumentError("RunProcess: empty command");
  std::vector<std::string> env_strings;
  for (char** e = environ; *e != nullptr; ++e) {
    absl::string_view entry(*e);
    bool overridden = false;
    for (const auto& [name, value] : extra_env) {
      if (entry.size() > name.size() && entry.substr(0, name.size()) == name && entry[name.size()] == '=') {
        overridden = true;
      }
    }
    if (!overridden) env_strings.emplace_back(entry);
  }
  for (const auto& [name, value] : extra_env) env_strings.push_back(name + "=" + value);
  std::vector<char*> envp;
  for (std::string& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::vector<std::string> args = argv;
  std::vector<char*> argp;
  for (std::string& s : args) argp.push_back(s.data());
  argp.push_back(nullptr);

  int out_pipe[2], err_pipe[2];
  if (pipe2(out_pipe, O_CLOEXEC) != 0) return absl::InternalError("pipe failed");
  if (pipe2(err_pipe, O_CLOEXEC) != 0) {
    close(out_pipe[0]);
    close(out_pipe[1]);
    return absl::InternalError("pipe failed");
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, out_pipe[1], 1);
  posix_spawn_file_actions_adddup2(&actions, err_pipe[1], 2);
  pid_t pid = 0;
  int rc = argv[0].find('/') != std::string::npos
               ? posix_spawn(&pid, argp[0], &actions, nullptr, argp.data(), envp.data())
               : posix_spawnp(&pid, argp[0], &actions, nullptr, argp.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  close(out_pipe[1]);
  close(err_pipe[1]);
  if (rc != 0) {
    close(out_pipe[0]);
    close(err_pipe[0]);
    return absl::NotFoundError(absl::StrCat("cannot run ", argv[0], ": ", std::strerror(rc)));
  }
  ProcessResult result;
  absl::Time deadline = absl::Now() + timeout;
  pollfd fds[2] = {{out_pipe[0], POLLIN, 0}, {err_pipe[0], POLLIN, 0}};
  int open_fds = 2;
  bool timed_out = false;
  char buf[4096];
  while (open_fds > 0) {
    int wait_ms = static_cast<int>(absl::ToInt64Milliseconds(deadline - absl::Now()));
    if (wait_ms <= 0) {
      timed_out = true;
      break;
    }
    int n = poll(fds, 2, wait_ms);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) continue;
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || fds[i].revents == 0) continue;
      ssize_t got = read(fds[i].fd, buf, sizeof(buf));
      if (got > 0) {
        (i == 0 ? result.out : result.err).append(buf, static_cast<size_t>(got));
      } else if (got == 0 || (errno != EINTR && errno != EAGAIN)) {
        close(fds[i].fd);
        fds[i].fd = -1;
        --open_fds;
      }
    }
  }
  for (pollfd& p : fds) {
    if (p.fd >= 0) close(p.fd);
  }
  if (timed_out) kill(pid, SIGKILL);
  int wstatus = 0;
  while (waitpid(pid, &wstatus, 0) < 0 && errno == EINTR) {
  }
  if (timed_out) {
    return absl::DeadlineExceededError(
        absl::StrCat(argv[0], " did not finish within ", absl::FormatDuration(timeout)));
  }
  result.exit_code = WIFEXITED(wstatus) ? WEXITSTATUS(wstatus) : 128 + WTERMSIG(wstatus);
  return result;
}

absl::StatusOr<ExecCredential> ParseExecCredential(absl::string_view json_text,
                                                   absl::string_view expected_api_version,
                                                   absl::string_view command) {
  auto fail = [&](absl::string_view what) {
    return absl::UnauthenticatedError(absl::StrCat("exec plugin ", command, ": ", what));
  };
  json doc = json::parse(json_text.begin(), json_text.end(), nullptr, false);
  if (doc.is_discarded() || !doc.is_object()) return fail("stdout is not a JSON object (ExecCredential)");
  if (!doc.contains("kind") || doc["kind"] != "ExecCredential") return fail("kind: expected \"ExecCredential\"");
  if (!doc.contains("apiVersion") || !doc["apiVersion"].is_string() ||
      doc["apiVersion"].get<std::string>() != expected_api_version) {
    return fail(absl::StrCat("apiVersion: expected \"", expected_api_version, "\""));
  }
  if (!doc.contains("status") || !doc["status"].is_object()) return fail("status: missing");
  const json& status = doc["status"];
  ExecCredential credential;
  if (status.contains("token")) {
    if (!status["token"].is_string()) return fail("status.token: expected a string");
    credential.token = status["token"].get<std::string>();
  }
  if (status.contains("clientCertificateData") && status["clientCertificateData"].is_string()) {
    credential.client_cert_pem = status["clientCertificateData"].get<std::string>();
  }
  if (status.contains("clientKeyData") && status["clientKeyData"].is_string()) {
    credential.client_key_pem = status["clientKeyData"].get<std::string>();
  }
  if (credential.token.empty() && credential.client_cert_pem.empty()) {
    return fail("status: neither token nor clientCertificateData is set");
  }
  if (status.contains("expirationTimestamp") && !status["expirationTimestamp"].is_null()) {
    if (!status["expirationTimestamp"].is_string()) return fail("status.expirationTimestamp: expected a string");
    absl::Time t;
    std::string error;
    if (!absl::ParseTime(absl::RFC3339_full, status["expirationTimestamp"].get<std::string>(), &t, &error)) {
      return fail(absl::StrCat("status.expirationTimestamp: not RFC 3339: ", error));
    }
    credential.expiration = t;
  }
  return credential;
}

ExecTokenSource::ExecTokenSource(ExecConfig exec, std::string server, Clock* clock, absl::Duration timeout)
    : exec_(std::move(exec)), server_(std::move(server)), clock_(clock), timeout_(timeout) {}

int ExecTokenSource::runs() const {
  absl::MutexLock lock(&mu_);
  return runs_;
}

bool ExecTokenSource::Invalidate() {
  absl::MutexLock lock(&mu_);
  cached_.reset();
  return true;
}

absl::StatusOr<std::string> ExecTokenSource::Token() {
  absl::MutexLock run_lock(&run_mu_);
  {
    absl::MutexLock lock(&mu_);
    // Refresh slightly before expiry so a request does not carry a token about to lapse.
    if (cached_ && (!cached_->expiration || clock_->Now() + absl::Seconds(10) < *cached_->expiration)) {
      return cached_->token;
    }
  }
  json info = {{"apiVersion", exec_.api_version},
               {"kind", "ExecCredential"},
               {"spec", {{"interactive", false}}}};
  if (exec_.provide_cluster_info) info["spec"]["cluster"] = {{"server", server_}};
  std::vector<std::pair<std::string, std::string>> env = exec_.env;
  env.emplace_back("KUBERNETES_EXEC_INFO", info.dump());
  std::vector<std::string> argv = {exec_.command};
  argv.insert(argv.end(), exec_.args.begin(), exec_.args.end());
  {
    absl::MutexLock lock(&mu_);
    ++runs_;
  }
  auto result = RunProcess(argv, env, timeout_);
  if (!result.ok()) {
    std::string hint = exec_.install_hint.empty() ? "" : absl::StrCat(" (", exec_.install_hint, ")");
    return absl::UnauthenticatedError(absl::StrCat("exec plugin: ", result.status().message(), hint));
  }
  if (result->exit_code != 0) {
    return absl::UnauthenticatedError(absl::StrCat("exec plugin ", exec_.command, " exited with code ",
                                                   result->exit_code, ": ", result->err.substr(0, 500)));
  }
  auto credential = ParseExecCredential(result->out, exec_.api_version, exec_.command);
  if (!credential.ok()) return credential.status();
  if (credential->token.empty()) {
    return absl::UnimplementedError(absl::StrCat("exec plugin ", exec_.command,
                                                 ": returned a client certificate; only tokens are supported"));
  }
  absl::MutexLock lock(&mu_);
  cached_ = *credential;
  return cached_->token;
}

std::unique_ptr<TokenSource> MakeTokenSource(const Config& config, Clock* clock) {
  if (config.exec) return std::make_unique<ExecTokenSource>(*config.exec, config.server, clock);
  if (!config.token_file.empty()) return std::make_unique<FileTokenSource>(config.token_file);
  if (!config.token.empty()) return std::make_unique<StaticTokenSource>(config.token);
  return nullptr;
}

}  // namespace sluice::kube
