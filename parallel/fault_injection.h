// FaultInjection: the training session's test hooks, read from the environment once at
// start-up (each a step, 1-based as the progress line counts, for one rank or all):
//
//   ETR_FAIL_AT_STEP=S[:R]             rank R throws at the start of step S (0-based here:
//                                      the step count when it starts)
//   ETR_NONFINITE_AT_STEP=S[:R]        a NaN in rank R's gradients at step S
//   ETR_OOM_IN_BACKWARD_AT_STEP=S[:R]  an out-of-memory error inside backward of the last
//                                      micro-batch of step S, after the middle layer's
//                                      backward (once)
//   ETR_TEST_FAIL_ALLOCATION=S:N[:R]   the N-th host allocation event (HostAllocator::
//                                      events: an allocation or a window's charge) from the
//                                      start of step S fails (once)
//
// Without :R every rank; a malformed value is a ConfigError naming the variable.
#pragma once

#include <cstdint>

namespace etr {

struct FaultInjection {
  int64_t fail_at_step = -1;
  int64_t nonfinite_at_step = -1;
  int64_t oom_in_backward_at_step = -1;
  int64_t fail_allocation_step = -1;
  uint64_t fail_allocation_event = 0;

  // The hooks that apply to `rank`.
  static FaultInjection from_env(int rank);
};

// The environment variable `name` = S[:R]: S for rank R (every rank without :R), -1 for
// the others and when it is unset.
int64_t step_for_rank_from_env(const char* name, int rank);

}  // namespace etr
