// A pipeline's tied parameters at dp 3 x pp 2 (np 6): GPT-2's wte lives on the first stage
// (the embedding) and, borrowed, on the last (the head). With three replicas the two
// stages' rings add the replicas' gradients in different orders, so the copies would drift
// apart by rounding if each stage kept its own sum; the last stage takes the first
// stage's reduced gradient instead (PipelineEngine::sync_ties). After 4 steps, at every
// ZeRO stage, the two copies are bitwise equal and the model is within float rounding of
// the single-process run.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "examples/gpt/model_presets.h"
#include "examples/train/trainer.h"
#include "mpi/mpi_test_main.h"
#include "mpi/pipeline_test_config.h"
#include "runtime/config/train_config.h"
#include "runtime/state_names.h"

namespace etr::train {
namespace {

// pipeline_test's config with the tiny preset's 2 blocks and micro-batches of 2.
TrainConfig config(std::vector<std::string> extra) {
  extra.insert(extra.begin(), {"model.n_layer=2", "batch.micro_batch=2"});
  return testing_config::pipeline_config(extra);
}

TEST(PipelineTies, CopiesStayBitwiseEqualWithThreeReplicas) {
  World& w = testing::world();
  if (w.group().size() != 6) GTEST_SKIP() << "dp 3 x pp 2 needs 6 ranks";
  Group self(MPI_COMM_SELF, "self", false);
  Trainer single(config({}), self, w.log());
  for (int i = 0; i < 4; ++i) single.train_step();
  const std::vector<float> want = single.gather_state(state::kParam);
  for (int z = 0; z <= 3; ++z) {
    Trainer t(config({"parallel.pp=2", "parallel.zero_stage=" + std::to_string(z)}), w);
    for (int i = 0; i < 4; ++i) t.train_step();
    const std::vector<float> got = t.gather_state(state::kParam);
    double diff = 0;
    for (size_t i = 0; i < want.size(); ++i) diff = std::max(diff, std::fabs(double(want[i]) - got[i]));
    EXPECT_LE(diff, 2e-5) << "ZeRO " << z << ": parameters against the single process";
    PipelineEngine& p = *t.pipeline();
    Engine& last = p.chunk_engine(p.chunks() - 1);
    last.materialize_parameters();
    if (!t.grid().is_last_stage()) continue;
    const TensorEntry* copy = p.chunk_stack(p.chunks() - 1).layout().find("wte.weight");
    const TensorEntry* owner = t.model().layout().find("wte.weight");
    ASSERT_NE(copy, nullptr);
    EXPECT_EQ(0, std::memcmp(last.parameters() + copy->offset, got.data() + owner->offset,
                             static_cast<size_t>(owner->numel()) * sizeof(float)))
        << "ZeRO " << z << ": the tied copies differ on replica " << t.grid().dp_rank();
  }
}

}  // namespace
}  // namespace etr::train
