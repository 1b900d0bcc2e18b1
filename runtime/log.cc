#include "runtime/log.h"

#include <cstdlib>
#include <string>

#include "runtime/error.h"
#include "runtime/env.h"

namespace etr {

LogLevel parse_log_level(std::string_view name) {
  if (name == "debug") return LogLevel::kDebug;
  if (name == "info") return LogLevel::kInfo;
  if (name == "warn" || name == "warning") return LogLevel::kWarn;
  if (name == "error") return LogLevel::kError;
  if (name == "off") return LogLevel::kOff;
  throw ConfigError("unknown log level '" + std::string(name) +
                    "'; use debug, info, warn, error or off");
}

Logger::Logger(std::string prefix, FILE* sink)
    : prefix_(std::move(prefix)), sink_(sink), level_(LogLevel::kInfo) {
  if (const char* env = env_value("ETR_LOG_LEVEL"); env && *env) level_ = parse_log_level(env);
}

void Logger::write(LogLevel level, const std::string& message) {
  static const char* kTags[] = {"debug", "", "warning", "error"};
  std::lock_guard<std::mutex> lock(mutex_);
  const char* tag = kTags[static_cast<int>(level)];
  std::fprintf(sink_, "[%s] %s%s%s\n", prefix_.c_str(), tag, *tag ? ": " : "", message.c_str());
  std::fflush(sink_);
}

}  // namespace etr
