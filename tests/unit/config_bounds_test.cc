// Bounds on the config's numbers (issue 13): a non-finite real is refused alike from a
// config file and from --set; runtime.threads by the machine's CPUs; the model's and the
// micro-batch's memory, computed before allocating (GptConfig::training_memory), against
// what GptModel actually allocates from a HostAllocator (the independent reference).
#include <gtest/gtest.h>

#include <climits>
#include <cmath>
#include <string>
#include <thread>
#include <vector>

#include "config_test_util.h"
#include "examples/gpt/gpt_config.h"
#include "examples/gpt/gpt_model.h"
#include "runtime/host_allocator.h"
#include "runtime/kernels/cpu/threads.h"
#include "examples/gpt/model_presets.h"
#include "runtime/config/pipeline_settings.h"

namespace etr::config_testing {
namespace {

// Every real field of the config, each with inf, -inf and nan: the config file and the
// command line give the same one sentence.
TEST(ConfigBounds, NonFiniteRealsAreRefusedAlikeFromFileAndFlag) {
  const std::vector<std::pair<std::string, std::string>> fields = {
      {"optimizer", "lr"},        {"optimizer", "weight_decay"}, {"optimizer", "eps"},
      {"optimizer", "grad_clip"}, {"optimizer", "beta1"},        {"optimizer", "beta2"},
      {"model", "init_std"},      {"schedule", "min_lr_ratio"},  {"data", "val_fraction"}};
  for (const auto& [section, field] : fields) {
    for (const std::string value : {"inf", "-inf", "nan"}) {
      const std::string path = section + "." + field;
      SCOPED_TRACE(path + " = " + value);
      const std::string from_file = config_error([&] {
        const std::string item = field + ": " + value;
        TrainConfig c = parse_config(section == "data" ? "data { synthetic: true " + item + " }"
                                                       : "data { synthetic: true } " + section +
                                                             " { " + item + " }");
        resolve(c, gpt::model_presets());
      });
      const std::string from_flag = resolve_error({path + "=" + value});
      EXPECT_EQ(from_file, path + " = " + value +
                               " is out of range: expected a finite number such as 0.02 or 1e-3.");
      EXPECT_EQ(from_flag, from_file);
    }
  }
}

TEST(ConfigBounds, ThreadsAreBoundedByTheMachinesCpus) {
  const int cpus = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  EXPECT_NO_THROW(resolved({"runtime.threads=" + std::to_string(cpus)}));
  EXPECT_EQ(resolve_error({"runtime.threads=" + std::to_string(cpus + 1)}),
            "runtime.threads is " + std::to_string(cpus + 1) + ", more than the " +
                std::to_string(cpus) + " CPUs of this machine; set at most " +
                std::to_string(cpus) + ", or 0 for automatic.");
  EXPECT_THAT(resolve_error({"runtime.threads=65536"}), HasSubstr("runtime.threads is 65536"));
}

// Counts whose products feed the step's sample counter, and the sample's length.
TEST(ConfigBounds, CountsAreBounded) {
  EXPECT_EQ(resolve_error({"batch.global_batch=8", "schedule.max_steps=1152921504606846976"}),
            "schedule.max_steps = 1152921504606846976 x batch.global_batch = 8 sequences "
            "overflow the sample counter; set at most 1152921504606846975 steps.");
  EXPECT_NO_THROW(resolved({"batch.global_batch=8", "schedule.max_steps=1152921504606846975"}));
  EXPECT_EQ(resolve_error({"log.sample_tokens=2147483647"}),
            "log.sample_tokens is 2147483647; it must be at most 100000 (a sample is for "
            "reading in the log).");
  EXPECT_NO_THROW(resolved({"log.sample_tokens=100000"}));
}

// The pipeline's settings are checked with parallel.pp at 1 too: a value wrong in every
// layout is refused whether or not a pipeline runs.
TEST(ConfigBounds, PipelineSettingsAreCheckedWithoutAPipeline) {
  EXPECT_THAT(resolve_error({"parallel.pp_schedule=bogus"}),
              HasSubstr("parallel.pp_schedule = \"bogus\" is not a pipeline schedule"));
  EXPECT_THAT(resolve_error({"parallel.pp_partition=bogus"}),
              HasSubstr("parallel.pp_partition = \"bogus\" is not params, measure, nor a list"));
  EXPECT_THAT(resolve_error({"parallel.pp_partition=1,x"}), HasSubstr("is not params, measure"));
  EXPECT_THAT(resolve_error({"parallel.pp_partition=0,6"}), HasSubstr("is not params, measure"));
  EXPECT_THAT(resolve_error({"parallel.pp_virtual_stages=1000000"}),
              HasSubstr("parallel.pp_virtual_stages = 1000000 asks for more virtual stages"));
  EXPECT_THAT(resolve_error({"parallel.pp_virtual_stages=2"}), HasSubstr("needs parallel.pp_schedule = interleaved"));
  EXPECT_THAT(resolve_error({"parallel.pp_schedule=zb-v", "parallel.pp_virtual_stages=3"}),
              HasSubstr("runs 2 chunks per stage"));
  const TrainConfig c = resolved();
  const int layers = c.model().n_layer() + 2;
  EXPECT_THAT(resolve_error({"parallel.pp_partition=1," + std::to_string(layers)}),
              HasSubstr("covers " + std::to_string(layers + 1) + " layers"));
  for (std::string_view s : pipeline_schedule_names()) {
    EXPECT_NO_THROW(resolved({"parallel.pp_schedule=" + std::string(s)})) << s;
  }
  EXPECT_NO_THROW(resolved({"parallel.pp_partition= 1, " + std::to_string(layers - 1)}));
  EXPECT_NO_THROW(resolved({"parallel.pp_schedule=interleaved", "parallel.pp_virtual_stages=3"}));
}

// The estimate against the bytes GptModel takes from its allocator: the parameter and
// gradient buffers at construction, the activations and scratch at plan(B, T).
TEST(ConfigBounds, TrainingMemoryIsWhatTheModelAllocates) {
  for (int threads : {1, 2}) {
    gpt::GptConfig g;
    g.n_layer = 3;
    g.n_head = 2;
    g.d_model = 12;
    g.seq_len = 70;      // more than the attention backward's 64 rows
    g.vocab_size = 100;  // padded to 128
    const int64_t B = 3;
    cpu::set_num_threads(threads);
    HostAllocator alloc(size_t{1} << 30);
    gpt::GptModel<float> model(g, alloc);
    const size_t after_model = alloc.stats().in_use;
    model.plan(B, g.seq_len);
    const size_t after_plan = alloc.stats().in_use;
    const gpt::GptConfig::Memory m = g.training_memory(B, threads);
    EXPECT_EQ(g.layout_numel(), static_cast<double>(model.layout().numel()));
    // Params and grads now; AdamW's m and v (the same size) come later from the trainer.
    EXPECT_EQ(m.state, 2.0 * static_cast<double>(after_model));
    EXPECT_EQ(m.activations, static_cast<double>(after_plan - after_model)) << threads;
  }
  cpu::set_num_threads(1);
}

TEST(ConfigBounds, ModelTooLargeForTheBudgetIsOneSentenceWithoutOverflow) {
  gpt::GptConfig g;
  g.n_layer = INT_MAX;
  g.n_head = 2;
  g.d_model = 64;
  g.seq_len = 64;
  g.vocab_size = 256;
  const double budget = 8.0 * (1 << 30);
  EXPECT_GT(g.training_memory(4, 2).state, 1e15);  // ~1.5 PiB, not a wrapped int64
  const std::string e = config_error([&] { g.require_fits(4, 2, budget); });
  EXPECT_THAT(e, StartsWith("the model (model.n_layer = 2147483647, model.d_model = 64,"));
  EXPECT_THAT(e, HasSubstr("for parameters, gradients and AdamW state, more than the 8 GiB "
                           "host memory budget"));
  g.d_model = INT_MAX - 1;  // C * C * 12 alone overflows int64
  g.n_head = 1;
  g.n_layer = 1;
  EXPECT_THAT(config_error([&] { g.require_fits(1, 1, budget); }), HasSubstr("needs"));
  // A small model with a huge micro-batch: the activations are named.
  g.d_model = 64;
  g.n_head = 2;
  const std::string a = config_error([&] { g.require_fits(INT_MAX, 1, budget); });
  EXPECT_THAT(a, StartsWith("batch.micro_batch = 2147483647 with model.seq_len = 64 needs"));
  EXPECT_NO_THROW(g.require_fits(4, 2, budget));
}

}  // namespace
}  // namespace etr::config_testing
