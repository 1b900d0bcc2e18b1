// From a job's configuration to a pipeline (parallel/pipeline_engine.h): the schedule
// (parallel.pp_schedule, pp_virtual_stages) and the cut of the layers into stages
// (parallel.pp_partition: balanced by parameters read or by measured time, or explicit).
#pragma once

#include <string>
#include <vector>

#include "parallel/pipeline_engine.h"
#include "runtime/config/train_config.h"
#include "runtime/layer_stack.h"
#include "runtime/log.h"

namespace etr {

// The schedule of parallel.* for `stages` stages and `micro_batches` micro-batches per
// replica, checked (ConfigError naming the fields) before any communication.
ScheduleSpec pipeline_schedule_spec(const TrainConfig& config, int stages, int micro_batches);

// Before any communication, alike on every rank of a world of `world_size`: ConfigError
// when parallel.pp's schedule cannot run the micro-batches every replica gets (a pp that
// does not divide the world is ProcessGrid's to refuse).
void check_pipeline_layout(const TrainConfig& config, int world_size);

// ConfigError when `model` has fewer layers than spec's stages x virtual stages.
void check_pipeline_layers(const ScheduleSpec& spec, const LayerStack<float>& model);

// Per layer: the parameters it reads (its own, and each shared tensor it uses).
std::vector<double> layer_parameter_costs(const LayerStack<float>& model);

// Per layer: seconds of forward + backward on a micro-batch of B x T, measured with the
// layers of `model` (a probe instance: it is bound to scratch buffers from `alloc` that
// are freed on return, and planned) (OutOfMemory when the whole model's parameters,
// gradients and one micro-batch's activations do not fit). The median of `rounds` after
// one warm-up.
std::vector<double> measure_layer_costs(LayerStack<float>& model, Allocator& alloc, int64_t B,
                                        int64_t T, int rounds = 3);

// The boundaries of parallel.pp_partition for `spec` over `model`'s layers: "params",
// "measure" (costs from `measured`, which the caller provides: the same on every rank),
// or an explicit list. ConfigError when the model has fewer layers than parts.
std::vector<int> pipeline_bounds(const TrainConfig& config, const LayerStack<float>& model,
                                 const ScheduleSpec& spec, const std::vector<double>& measured);

// "pipeline: 1f1b over 2 stages, 8 micro-batches per replica (bubble in theory 11.1 %);
// layers 0-2 | 3-5; cost per part 51 % | 49 % (measure)" for the start-up log.
std::string describe_pipeline(const TrainConfig& config, const ScheduleSpec& spec,
                              const std::vector<int>& bounds, const std::vector<double>& costs);

// One line per stage: its layers, its predicted compute per step (with measured costs:
// the layers' seconds per micro-batch times m), and its predicted memory: the state of
// its layers' parameters at the configured ZeRO stage over `dp` replicas (borrowed tied
// copies included) plus the activations of the schedule's bound on micro-batches of
// B x T held at once.
std::vector<std::string> describe_stages(const TrainConfig& config, const ScheduleSpec& spec,
                                         const LayerStack<float>& model, const std::vector<int>& bounds,
                                         const std::vector<double>& costs, int dp, int64_t B, int64_t T);

}  // namespace etr
