// TempDir: a fresh directory removed with everything in it when the object dies.
#pragma once

#include <filesystem>
#include <string>

namespace idempotency::testing {

class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  /// path() is the directory.
  const std::filesystem::path& path() const { return path_; }
  /// file() returns a path inside the directory.
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

}  // namespace idempotency::testing
