#include "parallel/pipeline_setup.h"

#include "parallel/pipeline_partition.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>

#include "parallel/batch_policy.h"
#include "parallel/engine.h"
#include "runtime/bytes.h"
#include "runtime/error.h"

namespace etr {

ScheduleSpec pipeline_schedule_spec(const TrainConfig& config, int stages, int micro_batches) {
  const auto& p = config.parallel();
  ScheduleSpec s;
  try {
    s.kind = parse_schedule_kind(p.pp_schedule());
  } catch (const ConfigError& e) {
    throw ConfigError(std::string("parallel.pp_schedule: ") + e.what());
  }
  s.stages = stages;
  s.micro_batches = micro_batches;
  s.virtual_stages = p.pp_virtual_stages() > 0 ? p.pp_virtual_stages()
                     : s.kind == ScheduleKind::kInterleaved1F1B || s.kind == ScheduleKind::kZeroBubbleV ? 2
                                                                                                        : 1;
  try {
    check_schedule_spec(s);
    const int64_t vstages = static_cast<int64_t>(s.stages) * s.virtual_stages;
    if (micro_batches > PipelineExecutor::max_micro_batches(vstages)) {
      throw ConfigError("a pipeline of " + std::to_string(vstages) + " virtual stages runs at most " +
                        std::to_string(PipelineExecutor::max_micro_batches(vstages)) +
                        " micro-batches per step, not " + std::to_string(micro_batches) +
                        "; raise batch.micro_batch or lower batch.global_batch.");
    }
  } catch (const ConfigError& e) {
    throw ConfigError(std::string(e.what()) + " (parallel.pp = " + std::to_string(stages) +
                      ", parallel.pp_schedule = " + p.pp_schedule() + ", " +
                      std::to_string(micro_batches) +
                      " micro-batches per replica: batch.global_batch / (ranks / parallel.pp) / "
                      "batch.micro_batch)");
  }
  return s;
}

void check_pipeline_layout(const TrainConfig& config, int world_size) {
  const int pp = config.parallel().pp();
  if (pp <= 1 || world_size % pp != 0) return;
  // (an automatic micro-batch is checked when the memory model picks it: 1 until then)
  const BatchPlan plan = plan_data_parallel_batch(config.batch().global_batch(), world_size / pp,
                                                  std::max(1, config.batch().micro_batch()));
  for (const RankBatch& r : plan.ranks()) {
    pipeline_schedule_spec(config, pp, static_cast<int>(r.accumulation));
  }
}

void check_pipeline_layers(const ScheduleSpec& spec, const LayerStack<float>& model) {
  const int64_t parts = static_cast<int64_t>(spec.stages) * spec.virtual_stages;
  if (parts <= model.size()) return;
  throw ConfigError("parallel.pp = " + std::to_string(spec.stages) +
                    (spec.virtual_stages > 1 ? " x " + std::to_string(spec.virtual_stages) + " chunks"
                                             : std::string()) +
                    " needs at least " + std::to_string(parts) + " layers, but the model has " +
                    std::to_string(model.size()) + " (embedding and head included); use fewer stages.");
}

std::vector<double> layer_parameter_costs(const LayerStack<float>& model) {
  std::vector<double> costs(static_cast<size_t>(model.size()), 0.0);
  for (const TensorEntry& e : model.layout().entries()) costs[static_cast<size_t>(e.layer)] += e.numel();
  for (const SharedParam& s : model.shared()) {
    costs[static_cast<size_t>(s.user)] += model.layout().find(s.name)->numel();
  }
  return costs;
}

std::vector<double> measure_layer_costs(LayerStack<float>& model, Allocator& alloc, int64_t B,
                                        int64_t T, int rounds) {
  const size_t bytes = static_cast<size_t>(model.layout().numel()) * sizeof(float);
  Buffer params(alloc, bytes), grads(alloc, bytes);
  std::memset(params.data(), 0, bytes);
  std::memset(grads.data(), 0, bytes);
  model.bind(static_cast<float*>(params.data()), static_cast<float*>(grads.data()));
  model.plan(alloc, B, T);
  std::vector<int32_t> tokens(static_cast<size_t>(B * T), 1);
  const Batch batch{tokens.data(), tokens.data(), B, T, 1.0 / static_cast<double>(B * T)};
  const size_t n = static_cast<size_t>(model.size());
  std::vector<std::vector<double>> samples(n);
  using Clock = std::chrono::steady_clock;
  Clock::time_point t;
  std::vector<double> round(n);
  StackHooks hooks;
  hooks.before_forward = [&](int i) {
    if (i > 0) round[i - 1] += std::chrono::duration<double>(Clock::now() - t).count();
    t = Clock::now();
  };
  hooks.before_backward = [&](int i) {
    if (i == static_cast<int>(n) - 1) round[n - 1] += std::chrono::duration<double>(Clock::now() - t).count();
    t = Clock::now();
  };
  hooks.after_backward = [&](int i) { round[i] += std::chrono::duration<double>(Clock::now() - t).count(); };
  for (int r = 0; r <= rounds; ++r) {
    std::fill(round.begin(), round.end(), 0.0);
    model.forward(batch, hooks);
    model.backward(batch, hooks);
    if (r == 0) continue;  // warm-up
    for (size_t i = 0; i < n; ++i) samples[i].push_back(round[i]);
  }
  std::vector<double> costs(n);
  for (size_t i = 0; i < n; ++i) {
    std::sort(samples[i].begin(), samples[i].end());
    costs[i] = samples[i][samples[i].size() / 2];
  }
  return costs;
}

std::vector<int> pipeline_bounds(const TrainConfig& config, const LayerStack<float>& model,
                                 const ScheduleSpec& spec, const std::vector<double>& measured) {
  check_pipeline_layers(spec, model);  // parts fit the layers, so an int
  const int parts = spec.stages * spec.virtual_stages;
  const std::string& how = config.parallel().pp_partition();
  if (how == "params") return balance_partition(layer_parameter_costs(model), parts);
  if (how == "measure") return balance_partition(measured, parts);
  try {
    return parse_partition(how, model.size(), parts);
  } catch (const ConfigError& e) {
    throw ConfigError(std::string("parallel.pp_partition: ") + e.what() +
                      " (or give params or measure)");
  }
}

std::string describe_pipeline(const TrainConfig& config, const ScheduleSpec& spec,
                              const std::vector<int>& bounds, const std::vector<double>& costs) {
  char bubble[32];
  std::snprintf(bubble, sizeof bubble, "%.1f %%", 100 * theoretical_bubble(spec));
  std::string s = "pipeline: " + std::string(schedule_name(spec.kind)) + " over " +
                  std::to_string(spec.stages) + " stages";
  if (spec.virtual_stages > 1) s += " x " + std::to_string(spec.virtual_stages) + " chunks";
  s += ", " + std::to_string(spec.micro_batches) + " micro-batches per replica (bubble in theory " +
       bubble + "); " + describe_partition(bounds) + "; cost per part ";
  const std::vector<double> parts = part_costs(costs, bounds);
  double total = 0;
  for (double c : parts) total += c;
  for (size_t i = 0; i < parts.size(); ++i) {
    char x[32];
    std::snprintf(x, sizeof x, "%s%.0f %%", i ? " | " : "", total > 0 ? 100 * parts[i] / total : 0.0);
    s += x;
  }
  return s + " (" + config.parallel().pp_partition() + ")";
}

std::vector<std::string> describe_stages(const TrainConfig& config, const ScheduleSpec& spec,
                                         const LayerStack<float>& model, const std::vector<int>& bounds,
                                         const std::vector<double>& costs, int dp, int64_t B, int64_t T) {
  const Schedule schedule = build_schedule(spec);
  const PipelineCut cut(model, bounds, spec.stages, spec.kind == ScheduleKind::kZeroBubbleV);
  const bool timed = config.parallel().pp_partition() == "measure";
  const double share = zero_state_share(config.parallel().zero_stage(), dp);
  std::vector<std::string> out;
  for (int s = 0; s < spec.stages; ++s) {
    double seconds = 0, state = 0, activations = 0;
    std::string layers;
    const int held = max_in_flight(schedule, s);
    for (int c = 0; c < spec.virtual_stages; ++c) {
      const int j = cut.vstage(s, c);
      const auto [lo, hi] = cut.own_range(j);
      state += 16.0 * static_cast<double>(hi - lo + cut.borrowed_numel(j)) * share;
      for (int i = bounds[j]; i < bounds[j + 1]; ++i) {
        seconds += costs[static_cast<size_t>(i)];
        activations += 4.0 * static_cast<double>(model.layer(i).activation_numel(B, T));
      }
      layers += (c ? ", " : "") + std::to_string(bounds[j]) + "-" + std::to_string(bounds[j + 1] - 1);
    }
    activations *= static_cast<double>(held) / spec.virtual_stages;  // held counts every chunk's
    char predicted[64] = "not timed (parallel.pp_partition is not measure)";
    if (timed) {
      std::snprintf(predicted, sizeof predicted, "%.1f ms of compute per step predicted",
                    1e3 * seconds * spec.micro_batches);
    }
    char line[320];
    std::snprintf(line, sizeof line, "  stage %d: layers %s; %s; state %s + activations %s (%d micro-batch(es) held)",
                  s, layers.c_str(), predicted,
                  format_bytes(state).c_str(), format_bytes(activations).c_str(), held);
    out.push_back(line);
  }
  return out;
}

}  // namespace etr
