// FaultInjection: the training session's test hooks, read from the environment once at
// start-up (each a step, 1-based as the progress line counts, for one rank or all):
//
//   ETR_FAIL_AT_STEP=S[:R]             rank R throws at the start of step S (0-based here:
//                                      the step count when it starts)
//   ETR_TEST_HANG_AT_STEP=S[:R]        rank R stops at the start of step S for good, its
//                                      heartbeat still beating (in the first launch of an
//                                      etr-run job only, so that the relaunch goes on)
//   ETR_NONFINITE_AT_STEP=S[:R]        a NaN in rank R's gradients at step S
//   ETR_OOM_IN_BACKWARD_AT_STEP=S[:R]  an out-of-memory error inside backward of the last
//                                      micro-batch of step S, after the middle layer's
//                                      backward (once)
//   ETR_TEST_FAIL_ALLOCATION=S:N[:R]   the N-th host allocation event (HostAllocator::
//                                      events: an allocation or a window's charge) from the
//                                      start of step S fails (once)
//   ETR_TEST_BUDGET_CUT=S:BYTES[:R]    inside step S, after the step boundary's check, the
//                                      budget drops to BYTES (as a cgroup cut between two
//                                      checks would) and stays there; with
//                                      ETR_TEST_BUDGET_CUT_MODE=boundary before that
//                                      step's check instead (which re-plans)
//   ETR_SLOW_RANK=R:F                  rank R runs F times slower (after each micro-batch
//                                      it sleeps F - 1 times as long as it took), F in [1, 100]
//   ETR_TEST_HOST_DEVICE_ENGINE=1      the GPU's engines, staged communicators and a
//                                      pipeline's staged transfers on host memory
//
// (Two hooks live below parallel/: ETR_TEST_RANKS_PER_NODE in collectives/host_topology.h
// and ETR_TEST_STOP_AT in runtime/control_ops.h.)
//
// Without :R every rank; a malformed value is a ConfigError naming the variable.
#pragma once

#include <cstddef>
#include <cstdint>

namespace etr {

struct FaultInjection {
  int64_t fail_at_step = -1;
  int64_t hang_at_step = -1;
  int64_t nonfinite_at_step = -1;
  int64_t oom_in_backward_at_step = -1;
  int64_t fail_allocation_step = -1;
  uint64_t fail_allocation_event = 0;
  struct BudgetCut {
    int64_t step = 0;  // 0: none
    size_t bytes = 0;
    bool boundary = false;
  } budget_cut;
  double slow_factor = 1;
  bool host_device_engine = false;

  // The hooks that apply to `rank`.
  static FaultInjection from_env(int rank);
};

// The environment variable `name` = S[:R]: S for rank R (every rank without :R), -1 for
// the others and when it is unset.
int64_t step_for_rank_from_env(const char* name, int rank);

}  // namespace etr
