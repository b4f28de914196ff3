#include "common/log.h"

#include <unistd.h>

#include <atomic>
#include <ctime>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"

namespace sluice::log {
namespace {

std::atomic<int> min_level{static_cast<int>(Level::kInfo)};
absl::Mutex component_mu;
std::string& ComponentName() {
  static auto* name = new std::string("sluice");
  return *name;
}

const char* LevelName(Level level) {
  switch (level) {
    case Level::kDebug: return "debug";
    case Level::kInfo: return "info";
    case Level::kWarning: return "warn";
    case Level::kError: return "error";
  }
  return "info";
}

bool NeedsQuotes(absl::string_view v) {
  if (v.empty()) return true;
  for (char c : v) {
    if (c == ' ' || c == '"' || c == '=' || c == '\n' || c == '\t') return true;
  }
  return false;
}

void AppendValue(std::string* out, absl::string_view v) {
  if (!NeedsQuotes(v)) {
    out->append(v.data(), v.size());
    return;
  }
  out->push_back('"');
  for (char c : v) {
    if (c == '"' || c == '\\') out->push_back('\\');
    if (c == '\n') {
      out->append("\\n");
      continue;
    }
    out->push_back(c);
  }
  out->push_back('"');
}

}  // namespace

void SetComponent(absl::string_view component) {
  absl::MutexLock lock(&component_mu);
  ComponentName() = std::string(component);
}
void SetMinLevel(Level level) { min_level = static_cast<int>(level); }
Level MinLevel() { return static_cast<Level>(min_level.load()); }

Line::Line(Level level, absl::string_view msg) : enabled_(static_cast<int>(level) >= min_level.load()) {
  if (!enabled_) return;
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  struct tm tm;
  gmtime_r(&ts.tv_sec, &tm);
  std::string component;
  {
    absl::MutexLock lock(&component_mu);
    component = ComponentName();
  }
  text_ = absl::StrFormat("ts=%04d-%02d-%02dT%02d:%02d:%02d.%03dZ level=%s component=%s msg=", tm.tm_year + 1900,
                          tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                          static_cast<int>(ts.tv_nsec / 1000000), LevelName(level), component);
  AppendValue(&text_, msg);
}

Line::~Line() {
  if (!enabled_) return;
  text_.push_back('\n');
  ssize_t ignored = ::write(STDERR_FILENO, text_.data(), text_.size());
  (void)ignored;
}

Line& Line::With(absl::string_view key, absl::string_view value) {
  if (!enabled_) return *this;
  absl::StrAppend(&text_, " ", key, "=");
  AppendValue(&text_, value);
  return *this;
}
Line& Line::With(absl::string_view key, int64_t value) {
  if (enabled_) absl::StrAppend(&text_, " ", key, "=", value);
  return *this;
}
Line& Line::With(absl::string_view key, uint64_t value) {
  if (enabled_) absl::StrAppend(&text_, " ", key, "=", value);
  return *this;
}
Line& Line::With(absl::string_view key, double value) {
  if (enabled_) absl::StrAppend(&text_, " ", key, "=", absl::StrFormat("%.6g", value));
  return *this;
}
Line& Line::With(absl::string_view key, bool value) {
  if (enabled_) absl::StrAppend(&text_, " ", key, "=", value ? "true" : "false");
  return *this;
}

}  // namespace sluice::log
