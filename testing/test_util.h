// Small helpers shared by tests: temporary directories and source/binary tree paths.
#ifndef SLUICE_TESTING_TEST_UTIL_H_
#define SLUICE_TESTING_TEST_UTIL_H_

#include <filesystem>
#include <string>

namespace sluice::testing {

// A fresh directory under the system temp dir, removed on destruction.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }
  std::string File(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

// Writes `contents` to `path`, creating parent directories.
void WriteFile(const std::string& path, const std::string& contents);
std::string ReadFile(const std::string& path);

// The source tree root (from $SLUICE_SOURCE_DIR, set by ctest) and the build root.
std::string SourceDir();
std::string BinaryDir();

}  // namespace sluice::testing

#endif  // SLUICE_TESTING_TEST_UTIL_H_
