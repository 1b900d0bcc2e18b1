// The compute orders of the zero-bubble schedules, ZB-H1 and ZB-V (Qi et al.), each placed
// by a list-scheduling run with unit times (parallel/pipeline_schedule.cc adds the
// transfers and checks the lists; pipeline_schedule.h says what each gives).
#pragma once

#include <vector>

#include "parallel/pipeline_schedule.h"

namespace etr {

// Stage by stage, the compute actions (F, B, W) in the order each stage runs them.
std::vector<std::vector<PipeAction>> zero_bubble_h1_compute(const ScheduleSpec& spec);
// ZB-V's list placed with the given times of a chunk's F, B and W (pipeline_schedule.h).
std::vector<std::vector<PipeAction>> zero_bubble_v_compute(const ScheduleSpec& spec,
                                                           const ActionCosts& costs = {});

// 1F1B's compute order of stage `stage`, each backward `backward` (kBackward; kBackwardInput
// for the order ZB-H1 starts from).
std::vector<PipeAction> one_f_one_b_compute(const ScheduleSpec& spec, int stage, PipeOp backward);

}  // namespace etr
