// A real trainer for `sluice up --trainer`: a Python program (examples/trainers/) run as a child
// process, reading from the local data service through the Python client. It reports its progress
// as JSON lines in a file (phase, elements read, the client's wait and step seconds, loss) and its
// totals as one JSON object on the last line of its output; TrainerProcess reads both.
//
// Threading: one owner thread; Latest() reads what the progress file gained since its last call (two
// lines a second).
#ifndef SLUICE_TOOLS_SLUICE_TRAINER_PROCESS_H_
#define SLUICE_TOOLS_SLUICE_TRAINER_PROCESS_H_

#include <ios>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "local/child_process.h"

namespace sluice::tools {

// One progress line: {"phase": "train"|"eval"|"done", "elements": N, "wait_s": S, "step_s": S, ...}.
struct TrainerProgress {
  std::string phase;
  int64_t elements = 0;
  double wait_seconds = 0;
  double step_seconds = 0;
  double loss = -1;  // -1: not reported
};

// Parses one progress line; InvalidArgument naming the field when it is not one.
absl::StatusOr<TrainerProgress> ParseTrainerProgress(absl::string_view line);

// What the trainer printed last: {"elements", "train_seconds", "stall", "final_loss", "test_accuracy", ...}.
struct TrainerResult {
  int64_t elements = 0;
  double train_seconds = 0;
  double stall = 0;
  double final_loss = -1;
  double test_accuracy = -1;  // -1: not evaluated
};
absl::StatusOr<TrainerResult> ParseTrainerResult(absl::string_view line);

struct TrainerOptions {
  std::string name;         // the trainer, e.g. "fashion-mnist-cnn"
  std::string python = "/usr/bin/python3";
  std::string script;       // the program (TrainerScriptPath)
  std::string python_path;  // PYTHONPATH: the build's Python module (<bin>/../python)
  std::string dispatcher;   // host:port
  std::string pipeline;     // spec file
  std::string job_name;
  double train_seconds = 60;
  double eval_seconds = 45;
  std::string log_dir;      // trainer.log and trainer-progress.jsonl go here
};

// The trainers there are, and where their programs are (looked up like DefaultPipelinePath).
absl::StatusOr<std::string> TrainerScriptPath(const std::string& name, const std::string& bin_dir);

class TrainerProcess {
 public:
  static absl::StatusOr<std::unique_ptr<TrainerProcess>> Start(const TrainerOptions& options);

  // The newest progress line (nullopt before the first).
  std::optional<TrainerProgress> Latest();
  bool Exited() { return process_->Exited(); }
  // After it exited: its totals, or why there are none (its exit status and last output lines).
  absl::StatusOr<TrainerResult> Result();
  void Stop();  // SIGTERM, then SIGKILL after 5 s
  const std::string& log_file() const { return log_file_; }

 private:
  TrainerProcess(std::unique_ptr<local::ChildProcess> process, std::string progress_file, std::string log_file)
      : process_(std::move(process)), progress_file_(std::move(progress_file)), log_file_(std::move(log_file)) {}
  std::unique_ptr<local::ChildProcess> process_;
  std::string progress_file_;
  std::string log_file_;
  std::streamoff progress_offset_ = 0;      // how far Latest() has read
  std::optional<TrainerProgress> latest_;   // the newest line read
};

}  // namespace sluice::tools

#endif  // SLUICE_TOOLS_SLUICE_TRAINER_PROCESS_H_
