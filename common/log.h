// Structured logging: one line per event, `ts=... level=... component=... msg="..." key=value ...`
// (logfmt), to stderr. Thread-safe: each line is written with a single write(2).
//
//   SLUICE_LOG(INFO, "worker registered").With("address", addr).With("tasks", n);
#ifndef SLUICE_COMMON_LOG_H_
#define SLUICE_COMMON_LOG_H_

#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"

namespace sluice::log {

enum class Level { kDebug = 0, kInfo = 1, kWarning = 2, kError = 3 };

// Process-wide settings; call once at start-up.
void SetComponent(absl::string_view component);
void SetMinLevel(Level level);
Level MinLevel();

// Builds one log line; writes it when destroyed.
class Line {
 public:
  Line(Level level, absl::string_view msg);
  ~Line();
  Line(const Line&) = delete;
  Line& operator=(const Line&) = delete;
  Line& With(absl::string_view key, absl::string_view value);
  Line& With(absl::string_view key, const std::string& value) { return With(key, absl::string_view(value)); }
  Line& With(absl::string_view key, const char* value) { return With(key, absl::string_view(value)); }
  Line& With(absl::string_view key, int64_t value);
  Line& With(absl::string_view key, int value) { return With(key, static_cast<int64_t>(value)); }
  Line& With(absl::string_view key, uint64_t value);
  Line& With(absl::string_view key, double value);
  Line& With(absl::string_view key, bool value);

 private:
  bool enabled_;
  std::string text_;
};

}  // namespace sluice::log

#define SLUICE_LOG(level, msg) ::sluice::log::Line(::sluice::log::Level::k##level, msg)  // level: Debug, Info, Warning, Error

#endif  // SLUICE_COMMON_LOG_H_
