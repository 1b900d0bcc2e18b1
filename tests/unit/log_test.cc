// Tests of runtime/log.h: level names, the ETR_LOG_LEVEL variable (read when a Logger
// is constructed), filtering by level, and the exact line format written to the sink.
#include "runtime/log.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>

#include "runtime/error.h"
#include "unit/scoped_env.h"

namespace etr {
namespace {

using testing::ScopedEnv;

// A FILE* whose contents the test can read back.
class CapturedSink {
 public:
  CapturedSink() : file_(open_memstream(&buf_, &len_)) {}
  ~CapturedSink() {
    std::fclose(file_);
    std::free(buf_);
  }
  FILE* file() { return file_; }
  std::string text() {
    std::fflush(file_);
    return std::string(buf_, len_);
  }

 private:
  char* buf_ = nullptr;
  size_t len_ = 0;
  FILE* file_;
};

TEST(LogLevel, ParsesEveryName) {
  EXPECT_EQ(parse_log_level("debug"), LogLevel::kDebug);
  EXPECT_EQ(parse_log_level("info"), LogLevel::kInfo);
  EXPECT_EQ(parse_log_level("warn"), LogLevel::kWarn);
  EXPECT_EQ(parse_log_level("warning"), LogLevel::kWarn);
  EXPECT_EQ(parse_log_level("error"), LogLevel::kError);
  EXPECT_EQ(parse_log_level("off"), LogLevel::kOff);
}

TEST(LogLevel, RejectsOtherNamesQuotingThem) {
  for (const char* bad : {"verbose", "INFO", "", "3"}) {
    SCOPED_TRACE(bad);
    try {
      parse_log_level(bad);
      ADD_FAILURE() << "no exception";
    } catch (const ConfigError& e) {
      std::string what = e.what();
      EXPECT_NE(what.find(std::string("'") + bad + "'"), std::string::npos) << what;
      EXPECT_NE(what.find("debug, info, warn, error or off"), std::string::npos) << what;
    }
  }
}

TEST(Logger, LineFormatPerLevel) {
  ScopedEnv env("ETR_LOG_LEVEL", "debug");
  CapturedSink sink;
  Logger log("etr 1/4 host-a", sink.file());
  log.debug("d=", 1);
  log.info("step ", 10, " loss ", 2.5);
  log.warn("slow");
  log.error("broken");
  EXPECT_EQ(sink.text(),
            "[etr 1/4 host-a] debug: d=1\n"
            "[etr 1/4 host-a] step 10 loss 2.5\n"
            "[etr 1/4 host-a] warning: slow\n"
            "[etr 1/4 host-a] error: broken\n");
}

TEST(Logger, DefaultsToInfoWithoutTheVariable) {
  for (const char* value : {static_cast<const char*>(nullptr), ""}) {
    ScopedEnv env("ETR_LOG_LEVEL", value ? std::optional<std::string>(value) : std::nullopt);
    CapturedSink sink;
    Logger log("p", sink.file());
    EXPECT_EQ(log.level(), LogLevel::kInfo);
    log.debug("hidden");
    log.info("shown");
    EXPECT_EQ(sink.text(), "[p] shown\n");
  }
}

TEST(Logger, VariableSetsTheLevel) {
  {
    ScopedEnv env("ETR_LOG_LEVEL", "error");
    CapturedSink sink;
    Logger log("p", sink.file());
    EXPECT_EQ(log.level(), LogLevel::kError);
    log.info("a");
    log.warn("b");
    log.error("c");
    EXPECT_EQ(sink.text(), "[p] error: c\n");
  }
  {
    ScopedEnv env("ETR_LOG_LEVEL", "off");
    CapturedSink sink;
    Logger log("p", sink.file());
    log.error("nothing");
    log.log(LogLevel::kOff, "not even this");
    EXPECT_EQ(sink.text(), "");
  }
}

TEST(Logger, BadVariableThrowsConfigErrorNamingTheValue) {
  ScopedEnv env("ETR_LOG_LEVEL", "chatty");
  try {
    Logger log("p", stderr);
    ADD_FAILURE() << "no exception";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("'chatty'"), std::string::npos) << e.what();
  }
}

TEST(Logger, SetLevelAndPrefix) {
  ScopedEnv env("ETR_LOG_LEVEL", std::nullopt);
  CapturedSink sink;
  Logger log("a", sink.file());
  log.set_level(LogLevel::kWarn);
  EXPECT_FALSE(log.enabled(LogLevel::kInfo));
  EXPECT_TRUE(log.enabled(LogLevel::kError));
  EXPECT_FALSE(log.enabled(LogLevel::kOff));
  log.info("hidden");
  log.set_prefix("b");
  log.warn("w");
  log.set_level(LogLevel::kDebug);
  log.debug("x");
  EXPECT_EQ(sink.text(), "[b] warning: w\n[b] debug: x\n");
}

}  // namespace
}  // namespace etr
