// The environment registry (runtime/env.h): the only getenv in etr's sources is its own,
// every variable the README's Settings tables list is registered and every registered one
// (but the system's) is listed there, the settings registry's and the launcher's names
// are in it, and reading an unregistered name is refused.
#include "runtime/env.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>

#include "runtime/config/settings.h"
#include "runtime/error.h"

namespace etr {
namespace {

namespace fs = std::filesystem;

std::string read(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// The library's, the programs' and the benchmarks' sources (the tests' own harness may
// read its variables directly).
TEST(EnvRegistry, GetenvAppearsOnlyInTheRegistry) {
  const fs::path root = ETR_SOURCE_DIR;
  int files = 0;
  for (const char* dir :
       {"runtime", "collectives", "checkpoint", "parallel", "launcher", "examples", "bench"}) {
    for (const auto& e : fs::recursive_directory_iterator(root / dir)) {
      const std::string ext = e.path().extension().string();
      if (!e.is_regular_file() || (ext != ".cc" && ext != ".h" && ext != ".cu" && ext != ".cuh")) continue;
      ++files;
      if (e.path() == root / "runtime" / "env.cc") continue;
      const std::string text = read(e.path());
      EXPECT_EQ(text.find("getenv("), std::string::npos)
          << fs::relative(e.path(), root).string() << " reads the environment itself; use env_value (runtime/env.h)";
    }
  }
  EXPECT_GT(files, 100);
}

TEST(EnvRegistry, TheReadmesTablesAreTheRegistry) {
  const std::string readme = read(fs::path(ETR_SOURCE_DIR) / "README.md");
  const size_t begin = readme.find("\n## Settings\n");
  ASSERT_NE(begin, std::string::npos);
  const size_t end = readme.find("\n## ", begin + 1);
  const std::string section = readme.substr(begin, end - begin);
  std::set<std::string> listed;  // the names in each row's first cell
  const std::regex row(R"(\n\| ([^|]*)\|)"), name("`([A-Z][A-Z0-9_]*)`");
  for (std::sregex_iterator it(section.begin(), section.end(), row), stop; it != stop; ++it) {
    const std::string cell = (*it)[1];
    for (std::sregex_iterator n(cell.begin(), cell.end(), name); n != stop; ++n) listed.insert((*n)[1]);
  }
  for (const std::string& name : listed) {
    EXPECT_NE(find_env_var(name), nullptr) << name << " is in the README but not in runtime/env.cc";
  }
  for (const EnvVar& v : env_vars()) {
    if (v.kind == EnvKind::kSystem && v.name != "OPENBLAS_CORETYPE") continue;
    EXPECT_TRUE(listed.count(std::string(v.name))) << v.name << " is registered but the README's Settings does not list it";
  }
}

TEST(EnvRegistry, TheSettingsAndTheLaunchersNamesAreRegistered) {
  for (const EnvSetting& s : env_settings()) {
    const EnvVar* v = find_env_var(s.env);
    ASSERT_NE(v, nullptr) << s.env;
    EXPECT_EQ(v->kind, EnvKind::kSetting) << s.env;
    EXPECT_EQ(v->doc, s.path) << s.env;
  }
  for (const char* n : {EnvNames::kRunDir, EnvNames::kRunRestart, EnvNames::kRunReason, EnvNames::kRunPrevNp,
                        EnvNames::kRunLastStep, EnvNames::kRunEventMs, EnvNames::kRunHosts,
                        EnvNames::kRunCheckpointDir, EnvNames::kRunMemoryHalvings}) {
    ASSERT_NE(find_env_var(n), nullptr) << n;
    EXPECT_EQ(find_env_var(n)->kind, EnvKind::kLauncher) << n;
  }
  std::set<std::string_view> names;
  for (const EnvVar& v : env_vars()) EXPECT_TRUE(names.insert(v.name).second) << v.name << " twice";
}

TEST(EnvRegistry, AnUnregisteredNameIsRefusedAndTheLogLineListsWhatIsSet) {
  EXPECT_THROW(env_value("ETR_NOT_A_VARIABLE"), InvalidArgument);
  ::setenv("ETR_SLOW_RANK", std::string("1:2\x1b").c_str(), 1);
  const std::string line = env_in_effect_line();
  ::unsetenv("ETR_SLOW_RANK");
  EXPECT_NE(line.find("ETR_SLOW_RANK=1:2\\x1b"), std::string::npos) << line;
  EXPECT_EQ(line.find("PATH="), std::string::npos) << line;
  EXPECT_STREQ(env_value("ETR_SLOW_RANK"), nullptr);
}

}  // namespace
}  // namespace etr
