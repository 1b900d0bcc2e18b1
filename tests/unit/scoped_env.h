// ScopedEnv: sets (or unsets) one environment variable for the life of a test and puts
// the previous value back afterwards, so tests that read ETR_* variables do not leak
// settings into each other.
#pragma once

#include <cstdlib>
#include <optional>
#include <string>

namespace etr::testing {

class ScopedEnv {
 public:
  // `value` nullopt: the variable is unset for the scope.
  ScopedEnv(std::string name, std::optional<std::string> value) : name_(std::move(name)) {
    if (const char* old = std::getenv(name_.c_str())) old_ = old;
    if (value)
      ::setenv(name_.c_str(), value->c_str(), 1);
    else
      ::unsetenv(name_.c_str());
  }
  ~ScopedEnv() {
    if (old_)
      ::setenv(name_.c_str(), old_->c_str(), 1);
    else
      ::unsetenv(name_.c_str());
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  std::string name_;
  std::optional<std::string> old_;
};

}  // namespace etr::testing
