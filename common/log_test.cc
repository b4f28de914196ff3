#include "common/log.h"

#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <string>

namespace sluice::log {
namespace {

// Captures what is written to stderr while `fn` runs.
template <typename Fn>
std::string CaptureStderr(Fn fn) {
  std::fflush(stderr);
  int saved = ::dup(STDERR_FILENO);
  char path[] = "/tmp/sluice-log-XXXXXX";
  int fd = ::mkstemp(path);
  ::dup2(fd, STDERR_FILENO);
  fn();
  ::dup2(saved, STDERR_FILENO);
  ::close(saved);
  ::lseek(fd, 0, SEEK_SET);
  std::string out;
  char buf[1024];
  ssize_t n;
  while ((n = ::read(fd, buf, sizeof(buf))) > 0) out.append(buf, static_cast<size_t>(n));
  ::close(fd);
  ::unlink(path);
  return out;
}

TEST_CASE("log lines are logfmt with quoting") {
  SetComponent("test");
  std::string out = CaptureStderr([] {
    SLUICE_LOG(Info, "worker registered").With("address", "127.0.0.1:5000").With("tasks", 3).With("note", "two words");
  });
  CHECK_THAT(out, Catch::Contains("level=info component=test msg=\"worker registered\" address=127.0.0.1:5000 tasks=3 note=\"two words\""));
  CHECK(out.back() == '\n');
  SetMinLevel(Level::kWarning);
  std::string quiet = CaptureStderr([] { SLUICE_LOG(Info, "hidden"); });
  CHECK(quiet.empty());
  SetMinLevel(Level::kInfo);
}

}  // namespace
}  // namespace sluice::log
