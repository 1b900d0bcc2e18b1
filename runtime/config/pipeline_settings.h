// The pipeline's settings (parallel.pp_schedule, pp_virtual_stages, pp_partition),
// checked whether or not parallel.pp turns a pipeline on: a value wrong in every layout
// is refused at once; the layout-dependent checks (the partition's count against pp x
// chunks, the micro-batches a schedule needs) are parallel/pipeline_setup's.
#pragma once

#include <span>
#include <string_view>

#include "runtime/config/train_config.h"

namespace etr {

// ConfigError, one sentence naming the setting, for a value wrong in every layout.
void validate_pipeline_settings(const TrainConfig& config);

// The names parallel.pp_schedule accepts (parse_schedule_kind in
// parallel/pipeline_schedule.h maps each to its schedule).
std::span<const std::string_view> pipeline_schedule_names();

}  // namespace etr
