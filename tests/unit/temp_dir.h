// A directory of a unit test's own under the system's temporary directory, removed (with
// whatever the test left in it, permissions restored first) when the object goes.
#pragma once

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

namespace etr::testing {

class TempDir {
 public:
  explicit TempDir(const std::string& prefix = "etr-test") {
    std::string tmpl = (std::filesystem::temp_directory_path() / (prefix + "-XXXXXX")).string();
    if (::mkdtemp(tmpl.data()) == nullptr) ADD_FAILURE() << "mkdtemp: " << std::strerror(errno);
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::permissions(path_, std::filesystem::perms::owner_all, ec);
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::filesystem::path& path() const { return path_; }
  // Writes `text` to <dir>/name with permissions `mode`; returns the path.
  std::string write(const std::string& name, const std::string& text, mode_t mode = 0644) const {
    const std::filesystem::path p = path_ / name;
    std::ofstream(p, std::ios::binary | std::ios::trunc) << text;
    ::chmod(p.c_str(), mode);
    return p.string();
  }

 private:
  std::filesystem::path path_;
};

}  // namespace etr::testing
