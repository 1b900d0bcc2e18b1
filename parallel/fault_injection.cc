#include "parallel/fault_injection.h"

#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "runtime/bytes.h"
#include "runtime/error.h"
#include "runtime/env.h"

namespace etr {

int64_t step_for_rank_from_env(const char* name, int rank) {
  const char* v = env_value(name);
  if (!v || !*v) return -1;
  const std::string_view s(v);
  const size_t colon = s.find(':');
  int64_t step = -1;
  int at_rank = rank;
  auto number = [](std::string_view text, auto& out) {
    auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
    return ec == std::errc() && end == text.data() + text.size() && out >= 0;
  };
  if (!number(s.substr(0, colon), step) ||
      (colon != std::string_view::npos && !number(s.substr(colon + 1), at_rank))) {
    throw ConfigError(std::string(name) + "='" + std::string(s) +
                      "' is not STEP or STEP:RANK (non-negative integers)");
  }
  return at_rank == rank ? step : -1;
}

namespace {

// ETR_TEST_FAIL_ALLOCATION=STEP:N[:RANK] into `f` (when it applies to `rank`).
void allocation_fault_from_env(int rank, FaultInjection& f) {
  const char* v = env_value("ETR_TEST_FAIL_ALLOCATION");
  if (!v || !*v) return;
  const std::string s(v);
  long long step = 0, n = 0;
  int at_rank = rank, used = 0;
  const int got = std::sscanf(s.c_str(), "%lld:%lld%n:%d%n", &step, &n, &used, &at_rank, &used);
  if (got < 2 || step < 1 || n < 1 || static_cast<size_t>(used) != s.size()) {
    throw ConfigError("ETR_TEST_FAIL_ALLOCATION='" + s + "' is not STEP:N or STEP:N:RANK (positive integers)");
  }
  if (at_rank != rank) return;
  f.fail_allocation_step = static_cast<int64_t>(step);
  f.fail_allocation_event = static_cast<uint64_t>(n);
}

// ETR_TEST_BUDGET_CUT=STEP:BYTES[:RANK] (and its mode) into `f`.
void budget_cut_from_env(int rank, FaultInjection& f) {
  const char* v = env_value("ETR_TEST_BUDGET_CUT");
  if (!v || !*v) return;
  const std::string s(v);
  const char* mode = env_value("ETR_TEST_BUDGET_CUT_MODE");
  const std::string m = mode ? mode : "";
  if (!m.empty() && m != "inside" && m != "boundary") {
    throw ConfigError("ETR_TEST_BUDGET_CUT_MODE='" + m + "' is not inside or boundary");
  }
  const size_t a = s.find(':');
  const size_t b = a == std::string::npos ? a : s.find(':', a + 1);
  try {
    if (a == std::string::npos) throw ConfigError("no BYTES");
    const int64_t step = std::stoll(s.substr(0, a));
    const size_t bytes = parse_bytes(s.substr(a + 1, b == std::string::npos ? b : b - a - 1));
    const int at_rank = b == std::string::npos ? rank : std::stoi(s.substr(b + 1));
    if (step < 1) throw ConfigError("STEP < 1");
    if (at_rank == rank) f.budget_cut = {step, bytes, m == "boundary"};
  } catch (const std::exception&) {
    throw ConfigError("ETR_TEST_BUDGET_CUT='" + s + "' is not STEP:BYTES[:RANK] (e.g. 3:200MiB:1)");
  }
}

// ETR_SLOW_RANK=RANK:FACTOR into `f`.
void slow_rank_from_env(int rank, FaultInjection& f) {
  const char* v = env_value("ETR_SLOW_RANK");
  if (!v || !*v) return;
  const std::string s(v);
  const size_t colon = s.find(':');
  try {
    if (colon == std::string::npos) throw ConfigError("no FACTOR");
    size_t used = 0;
    const int at_rank = std::stoi(s.substr(0, colon), &used);
    const double factor = std::stod(s.substr(colon + 1));
    if (used != colon || !(factor >= 1) || factor > 100) throw ConfigError("bad");
    if (at_rank == rank) f.slow_factor = factor;
  } catch (const std::exception&) {
    throw ConfigError("ETR_SLOW_RANK='" + s + "' is not RANK:FACTOR with a factor in [1, 100] (e.g. 1:2)");
  }
}

}  // namespace

FaultInjection FaultInjection::from_env(int rank) {
  FaultInjection f;
  f.fail_at_step = step_for_rank_from_env("ETR_FAIL_AT_STEP", rank);
  f.hang_at_step = step_for_rank_from_env("ETR_TEST_HANG_AT_STEP", rank);
  f.nonfinite_at_step = step_for_rank_from_env("ETR_NONFINITE_AT_STEP", rank);
  f.oom_in_backward_at_step = step_for_rank_from_env("ETR_OOM_IN_BACKWARD_AT_STEP", rank);
  allocation_fault_from_env(rank, f);
  budget_cut_from_env(rank, f);
  slow_rank_from_env(rank, f);
  const char* host = env_value("ETR_TEST_HOST_DEVICE_ENGINE");
  f.host_device_engine = host && std::string_view(host) == "1";
  return f;
}


}  // namespace etr
