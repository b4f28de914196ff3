#include "tools/sluice/trainer_process.h"

#include <signal.h>
#include <sys/wait.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "tools/sluice/dataservice_commands.h"

namespace sluice::tools {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// Parses a JSON object; exceptions from nlohmann stop here.
absl::StatusOr<json> ParseObject(absl::string_view line, absl::string_view what) {
  json j = json::parse(line.begin(), line.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": not a JSON object: '", line.substr(0, 120), "'"));
  }
  return j;
}

absl::StatusOr<double> Number(const json& j, const char* field, absl::string_view what, bool required) {
  auto it = j.find(field);
  if (it == j.end() || it->is_null()) {
    if (required) return absl::InvalidArgumentError(absl::StrCat(what, ": field '", field, "' is missing"));
    return -1.0;
  }
  if (!it->is_number()) return absl::InvalidArgumentError(absl::StrCat(what, ": field '", field, "' is not a number"));
  const double v = it->get<double>();
  if (!(v >= 0)) return absl::InvalidArgumentError(absl::StrCat(what, ": field '", field, "' is negative or NaN"));
  return v;
}

}  // namespace

absl::StatusOr<TrainerProgress> ParseTrainerProgress(absl::string_view line) {
  constexpr absl::string_view kWhat = "trainer progress line";
  absl::StatusOr<json> j = ParseObject(line, kWhat);
  if (!j.ok()) return j.status();
  TrainerProgress p;
  auto phase = j->find("phase");
  if (phase == j->end() || !phase->is_string()) {
    return absl::InvalidArgumentError(absl::StrCat(kWhat, ": field 'phase' is missing or not a string"));
  }
  p.phase = phase->get<std::string>();
  if (p.phase != "train" && p.phase != "eval" && p.phase != "done") {
    return absl::InvalidArgumentError(absl::StrCat(kWhat, ": field 'phase' is '", p.phase,
                                                   "'; expected train, eval or done"));
  }
  absl::StatusOr<double> elements = Number(*j, "elements", kWhat, true);
  absl::StatusOr<double> wait = Number(*j, "wait_s", kWhat, true);
  absl::StatusOr<double> step = Number(*j, "step_s", kWhat, true);
  absl::StatusOr<double> loss = Number(*j, "loss", kWhat, false);
  for (const auto* s : {&elements, &wait, &step, &loss}) {
    if (!s->ok()) return s->status();
  }
  p.elements = static_cast<int64_t>(*elements);
  p.wait_seconds = *wait;
  p.step_seconds = *step;
  p.loss = *loss;
  return p;
}

absl::StatusOr<TrainerResult> ParseTrainerResult(absl::string_view line) {
  constexpr absl::string_view kWhat = "trainer result";
  absl::StatusOr<json> j = ParseObject(line, kWhat);
  if (!j.ok()) return j.status();
  TrainerResult r;
  absl::StatusOr<double> elements = Number(*j, "elements", kWhat, true);
  absl::StatusOr<double> seconds = Number(*j, "train_seconds", kWhat, true);
  absl::StatusOr<double> stall = Number(*j, "stall", kWhat, true);
  absl::StatusOr<double> loss = Number(*j, "final_loss", kWhat, false);
  absl::StatusOr<double> accuracy = Number(*j, "test_accuracy", kWhat, false);
  for (const auto* s : {&elements, &seconds, &stall, &loss, &accuracy}) {
    if (!s->ok()) return s->status();
  }
  r.elements = static_cast<int64_t>(*elements);
  r.train_seconds = *seconds;
  r.stall = *stall;
  r.final_loss = *loss;
  r.test_accuracy = *accuracy;
  return r;
}

absl::StatusOr<std::string> TrainerScriptPath(const std::string& name, const std::string& bin_dir) {
  if (name != "fashion-mnist-cnn") {
    return absl::InvalidArgumentError(
        absl::StrCat("--trainer: unknown trainer '", name, "'; the trainers there are: fashion-mnist-cnn"));
  }
  const std::string relative = "examples/trainers/fashion_mnist_cnn.py";
  if (std::optional<std::string> found = cli::FindProjectFile(relative, bin_dir)) return *found;
  return absl::NotFoundError(absl::StrCat("--trainer ", name, ": ", relative,
                                          " is not in the working directory, next to the build (", bin_dir,
                                          "/../..) or in ", bin_dir, "/../share/sluice"));
}

absl::StatusOr<std::unique_ptr<TrainerProcess>> TrainerProcess::Start(const TrainerOptions& o) {
  std::error_code ec;
  if (!fs::exists(o.python, ec)) {
    return absl::NotFoundError(absl::StrCat("--trainer needs ", o.python, " (Debian's python3, with python3-torch)"));
  }
  if (!fs::exists(fs::path(o.python_path) / "sluice", ec)) {
    return absl::NotFoundError(absl::StrCat("--trainer needs the build's Python module in ", o.python_path,
                                            " (build it: scripts/build.sh)"));
  }
  const std::string progress = absl::StrCat(o.log_dir, "/trainer-progress.jsonl");
  const std::string log = absl::StrCat(o.log_dir, "/trainer.log");
  fs::remove(progress, ec);
  local::ChildProcessOptions c;
  c.argv = {"/usr/bin/env",
            absl::StrCat("PYTHONPATH=", o.python_path),
            o.python,
            o.script,
            "--dispatcher", o.dispatcher,
            "--pipeline", o.pipeline,
            "--job-name", o.job_name,
            "--train-seconds", absl::StrCat(o.train_seconds),
            "--eval-seconds", absl::StrCat(o.eval_seconds),
            "--progress", progress};
  c.log_file = log;
  absl::StatusOr<std::unique_ptr<local::ChildProcess>> p = local::ChildProcess::Start(std::move(c));
  if (!p.ok()) return p.status();
  return std::unique_ptr<TrainerProcess>(new TrainerProcess(*std::move(p), progress, log));
}

std::optional<TrainerProgress> TrainerProcess::Latest() {
  // Reads only what was appended since the last call; a line without its newline may be half
  // written and waits for the next call.
  std::ifstream in(progress_file_, std::ios::binary);
  if (in) {
    in.seekg(progress_offset_);
    std::string line;
    while (std::getline(in, line)) {
      if (in.eof()) break;  // no newline yet
      progress_offset_ += static_cast<std::streamoff>(line.size()) + 1;
      if (line.empty()) continue;
      if (absl::StatusOr<TrainerProgress> p = ParseTrainerProgress(line); p.ok()) latest_ = *p;
    }
  }
  return latest_;
}

absl::StatusOr<TrainerResult> TrainerProcess::Result() {
  absl::StatusOr<int> status = process_->Wait(absl::Seconds(1));
  if (!status.ok()) return status.status();
  std::vector<std::string> lines = absl::StrSplit(process_->Output(), '\n', absl::SkipEmpty());
  for (auto it = lines.rbegin(); it != lines.rend(); ++it) {
    if (!it->empty() && (*it)[0] == '{') return ParseTrainerResult(*it);
  }
  std::string tail;
  for (size_t i = lines.size() > 5 ? lines.size() - 5 : 0; i < lines.size(); ++i) absl::StrAppend(&tail, "\n  ", lines[i]);
  return absl::InternalError(absl::StrCat("the trainer exited (",
                                          WIFEXITED(*status) ? absl::StrCat("status ", WEXITSTATUS(*status))
                                                             : absl::StrCat("signal ", WTERMSIG(*status)),
                                          ") without its result line; its last output (", log_file_, "):", tail));
}

void TrainerProcess::Stop() {
  if (process_->Exited()) return;
  process_->Signal(SIGTERM);
  if (!process_->Wait(absl::Seconds(5)).ok()) process_->KillGroup();
}

}  // namespace sluice::tools
