// Bearer-token sources for the REST client: a static token, a token file re-read when it changes
// (service-account token rotation), and exec credential plugins
// (client.authentication.k8s.io/v1 ExecCredential) whose token is cached until its
// expirationTimestamp.
//
// Threading: every TokenSource is thread-safe; Token() may run a plugin process (never while a
// lock is held by the caller's code) and blocks until it finishes or times out.
#ifndef SLUICE_KUBE_CREDENTIALS_H_
#define SLUICE_KUBE_CREDENTIALS_H_

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "kube/clock.h"
#include "kube/config.h"

namespace sluice::kube {

class TokenSource {
 public:
  virtual ~TokenSource() = default;
  // The bearer token to send now.
  virtual absl::StatusOr<std::string> Token() = 0;
  // The server rejected the last token (401): drop caches so the next Token() fetches anew.
  // Returns whether a retry could see a different token.
  virtual bool Invalidate() { return false; }
};

class StaticTokenSource final : public TokenSource {
 public:
  explicit StaticTokenSource(std::string token) : token_(std::move(token)) {}
  absl::StatusOr<std::string> Token() override { return token_; }

 private:
  const std::string token_;
};

// Re-reads the file whenever its modification time or size changes (or after Invalidate()).
class FileTokenSource final : public TokenSource {
 public:
  explicit FileTokenSource(std::string path) : path_(std::move(path)) {}
  absl::StatusOr<std::string> Token() override;
  bool Invalidate() override;

 private:
  const std::string path_;
  absl::Mutex mu_;
  std::string token_ ABSL_GUARDED_BY(mu_);
  int64_t stamp_ ABSL_GUARDED_BY(mu_) = -1;
};

// The result of running a process.
struct ProcessResult {
  int exit_code = -1;
  std::string out{};
  std::string err{};
};
// Runs argv[0] (PATH lookup when it has no '/') with the current environment plus `extra_env`,
// capturing stdout and stderr; the process is killed after `timeout`.
absl::StatusOr<ProcessResult> RunProcess(const std::vector<std::string>& argv,
                                         const std::vector<std::pair<std::string, std::string>>& extra_env,
                                         absl::Duration timeout);

// Parses an ExecCredential JSON document (as printed by a plugin).
struct ExecCredential {
  std::string token{};
  std::optional<absl::Time> expiration{};  // none = valid until the server rejects it
  std::string client_cert_pem;           // parsed but not used by the client (see docs)
  std::string client_key_pem{};
};
absl::StatusOr<ExecCredential> ParseExecCredential(absl::string_view json_text,
                                                   absl::string_view expected_api_version,
                                                   absl::string_view command);

class ExecTokenSource final : public TokenSource {
 public:
  ExecTokenSource(ExecConfig exec, std::string server, Clock* clock = Clock::Real(),
                  absl::Duration timeout = absl::Seconds(60));
  absl::StatusOr<std::string> Token() override;
  bool Invalidate() override;
  // How many times the plugin has run (for tests and diagnostics).
  int runs() const;

 private:
  const ExecConfig exec_;
  const std::string server_;
  Clock* const clock_;
  const absl::Duration timeout_;
  mutable absl::Mutex mu_;
  std::optional<ExecCredential> cached_ ABSL_GUARDED_BY(mu_);
  int runs_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Mutex run_mu_;  // one plugin run at a time
};

// The token source a Config asks for, or nullptr when it uses none (client cert or anonymous).
std::unique_ptr<TokenSource> MakeTokenSource(const Config& config, Clock* clock = Clock::Real());

}  // namespace sluice::kube

#endif  // SLUICE_KUBE_CREDENTIALS_H_
