// What the batch-policy tests (batch_memory_test, batch_shares_test) share: a run's state
// after some steps, the comparisons (bitwise, or within the summation-order tolerance the
// pipeline tests state), and an environment variable set for a scope.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "examples/train/trainer.h"
#include "runtime/state_names.h"

namespace etr::train::batch_testing {

struct State {
  std::vector<float> param, m, v;
  std::vector<double> losses;
  uint64_t samples = 0;
};

// `steps` steps; `on_step` sees each step's figures.
inline State train(Trainer& t, int steps,
                   const std::function<void(const StepStats&)>& on_step = {}) {
  State s;
  for (int i = 0; i < steps; ++i) {
    const StepStats st = t.train_step();
    s.losses.push_back(st.loss);
    if (on_step) on_step(st);
  }
  s.param = t.gather_state(state::kParam);
  s.m = t.gather_state(state::kAdamM);
  s.v = t.gather_state(state::kAdamV);
  s.samples = t.session().position().samples_seen;
  return s;
}

inline bool bitwise(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() &&
         (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

inline void expect_bitwise(const State& want, const State& got, const std::string& what) {
  EXPECT_TRUE(bitwise(want.param, got.param)) << what << ": parameters differ";
  EXPECT_TRUE(bitwise(want.m, got.m)) << what << ": adam.m differs";
  EXPECT_TRUE(bitwise(want.v, got.v)) << what << ": adam.v differs";
  EXPECT_EQ(want.losses, got.losses) << what;
  EXPECT_EQ(want.samples, got.samples) << what << ": samples seen";
}

// Summation order only (a micro-batch or share split differently): 2e-5 absolute on
// parameters and moments, 1e-5 on losses, as the pipeline tests state.
inline void expect_near(const State& want, const State& got, const std::string& what) {
  ASSERT_EQ(want.param.size(), got.param.size()) << what;
  double worst = 0;
  for (size_t i = 0; i < want.param.size(); ++i) {
    worst = std::max({worst, std::fabs(double(want.param[i]) - got.param[i]),
                      std::fabs(double(want.m[i]) - got.m[i]),
                      std::fabs(double(want.v[i]) - got.v[i])});
  }
  EXPECT_LT(worst, 2e-5) << what;
  ASSERT_EQ(want.losses.size(), got.losses.size()) << what;
  for (size_t i = 0; i < want.losses.size(); ++i)
    EXPECT_NEAR(want.losses[i], got.losses[i], 1e-5) << what;
  EXPECT_EQ(want.samples, got.samples) << what << ": samples seen";
}

// Sets an environment variable for the life of the object.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const std::string& value) : name_(name) {
    setenv(name, value.c_str(), 1);
  }
  ~ScopedEnv() { unsetenv(name_); }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
};

}  // namespace etr::train::batch_testing
