// Rank-prefixed logging: "[etr 1/4 host-a] message". A Logger is an explicit object
// (World owns one and hands it out); its level comes from a flag or ETR_LOG_LEVEL.
#pragma once

#include <cstdio>
#include <mutex>
#include <sstream>
#include <string>
#include <string_view>

namespace etr {

enum class LogLevel : int { kDebug = 0, kInfo = 1, kWarn = 2, kError = 3, kOff = 4 };

// "debug", "info", "warn", "error", "off"; throws ConfigError otherwise.
LogLevel parse_log_level(std::string_view name);

class Logger {
 public:
  // Level from ETR_LOG_LEVEL, defaulting to info.
  explicit Logger(std::string prefix = "etr", FILE* sink = stderr);

  void set_level(LogLevel level) { level_ = level; }
  LogLevel level() const { return level_; }
  void set_prefix(std::string prefix) { prefix_ = std::move(prefix); }
  // kOff is a threshold, not a level to log at: log(kOff, ...) prints nothing.
  bool enabled(LogLevel level) const { return level < LogLevel::kOff && level >= level_; }

  template <typename... Args>
  void debug(const Args&... args) { log(LogLevel::kDebug, args...); }
  template <typename... Args>
  void info(const Args&... args) { log(LogLevel::kInfo, args...); }
  template <typename... Args>
  void warn(const Args&... args) { log(LogLevel::kWarn, args...); }
  template <typename... Args>
  void error(const Args&... args) { log(LogLevel::kError, args...); }

  template <typename... Args>
  void log(LogLevel level, const Args&... args) {
    if (!enabled(level)) return;
    std::ostringstream s;
    (s << ... << args);
    write(level, s.str());
  }

 private:
  void write(LogLevel level, const std::string& message);

  std::string prefix_;
  FILE* sink_;
  LogLevel level_;
  std::mutex mutex_;
};

}  // namespace etr
