// Helpers of the launcher tests (launcher_test.cc, launcher_hosts_test.cc): a temporary
// directory for hostfiles and scripts, and the message of an expected error.
#pragma once

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "runtime/error.h"
#include "temp_dir.h"
#include "launcher/hosts.h"

namespace etr::launcher_test {

namespace fs = std::filesystem;
using launcher::HostHealth;
using launcher::HostSlots;
using launcher::HostSource;
using ::testing::HasSubstr;
using ::testing::StartsWith;
using HostList = std::vector<HostSlots>;

// The message of the ConfigError `f` throws ("" and a test failure when it throws none).
inline std::string config_error(const std::function<void()>& f) {
  try {
    f();
  } catch (const ConfigError& e) {
    return e.what();
  }
  ADD_FAILURE() << "no ConfigError";
  return "";
}

inline std::string io_error(const std::function<void()>& f) {
  try {
    f();
  } catch (const IoError& e) {
    return e.what();
  }
  ADD_FAILURE() << "no IoError";
  return "";
}

using etr::testing::TempDir;

inline std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace etr::launcher_test
