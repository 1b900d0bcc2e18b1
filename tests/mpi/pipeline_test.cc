// Pipeline stages (parallel/pipeline_engine.h) at np 2-4 against the single-process run
// with the same global batch: after 3 steps the parameters, AdamW moments and losses of
// every schedule (GPipe, 1F1B, interleaved 1F1B, ZB-H1), with pp = np and with dp 2 x pp 2
// at every ZeRO stage, agree within a stated tolerance, and bitwise with one another (the only differences in summation
// order: the tied wte's two halves are added after, not during, backward, and the
// gradient norm is summed per stage); the tied copies on the first and last stage stay
// bitwise equal; 1F1B holds at most pp - s micro-batches on stage s; a checkpoint saved
// by one split loads bitwise into another (pp np -> 1 and np; dp -> an interleaved
// pipeline at ZeRO 3) and continues as the single-process run; the trace shows each
// stage's forwards, backwards and waits; an impossible layout is one sentence before any
// communication.
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "examples/gpt/model_presets.h"
#include "examples/train/trainer.h"
#include "mpi/checkpoint_test_util.h"
#include "mpi/mpi_test_main.h"
#include "mpi/pipeline_test_config.h"
#include "runtime/config/train_config.h"
#include "runtime/error.h"
#include "runtime/state_names.h"

namespace etr::train {
namespace {

namespace fs = std::filesystem;

// Tolerances: float sums in another order, through 3 AdamW steps at lr 3e-3 (measured
// differences are about 1e-7; a wrong gradient moves parameters by about 1e-3).
constexpr double kParamTol = 2e-5;
constexpr double kLossTol = 1e-5;

TrainConfig config(const std::vector<std::string>& extra) { return testing_config::pipeline_config(extra); }

using testing_config::max_diff;
using testing_config::State;
using testing_config::train;

void expect_close(const State& want, const State& got, const std::string& what) {
  EXPECT_LE(max_diff(want.param, got.param), kParamTol) << what << ": parameters";
  EXPECT_LE(max_diff(want.m, got.m), kParamTol) << what << ": adam.m";
  EXPECT_LE(max_diff(want.v, got.v), kParamTol) << what << ": adam.v";
  ASSERT_EQ(want.losses.size(), got.losses.size());
  for (size_t i = 0; i < want.losses.size(); ++i) {
    EXPECT_NEAR(want.losses[i], got.losses[i], kLossTol) << what << ": loss of step " << i + 1;
  }
}

// The single-process run of `c` (every rank computes it alone).
State reference(const TrainConfig& c, int steps) {
  Group self(MPI_COMM_SELF, "self", false);
  Trainer t(c, self, testing::world().log());
  return train(t, steps);
}

// On the rank holding the last virtual stage: its borrowed wte equals the owner's.
void expect_tied_copies_equal(Trainer& t, const std::vector<float>& whole, const std::string& what) {
  PipelineEngine* p = t.pipeline();
  ASSERT_NE(p, nullptr);
  const int last = p->chunks() - 1;
  Engine& e = p->chunk_engine(last);
  e.materialize_parameters();  // collective over the stage's dp group (ZeRO-3 gathers)
  if (!p->holds_loss()) return;
  const TensorEntry* copy = p->chunk_stack(last).layout().find("wte.weight");
  const TensorEntry* owner = t.model().layout().find("wte.weight");
  ASSERT_NE(copy, nullptr) << what << ": the last stage has no wte";
  EXPECT_EQ(0, std::memcmp(e.parameters() + copy->offset, whole.data() + owner->offset,
                           static_cast<size_t>(owner->numel()) * sizeof(float)))
      << what << ": the tied copies differ";
}

void every_schedule_matches(int pp, const std::vector<std::string>& extra) {
  const int n = testing::world().group().size();
  std::vector<std::string> base = extra;
  const State ref = reference(config(base), 3);
  State first;  // 1F1B's: every schedule sums each gradient in the same order, so all agree bitwise
  for (std::string s : {"1f1b", "gpipe", "interleaved", "zb-h1", "zb-v"}) {
    std::vector<std::string> o = base;
    o.push_back("parallel.pp=" + std::to_string(pp));
    o.push_back("parallel.pp_schedule=" + s);
    Trainer t(config(o), testing::world());
    const std::string what = s + " at pp " + std::to_string(pp) + " on " + std::to_string(n) + " ranks";
    const State got = train(t, 3);
    expect_close(ref, got, what);
    expect_tied_copies_equal(t, got.param, what);
    if (s == "1f1b") {
      first = got;
      continue;
    }
    EXPECT_EQ(0, std::memcmp(first.param.data(), got.param.data(), got.param.size() * sizeof(float)))
        << what << ": the parameters differ from 1F1B's";
    EXPECT_EQ(0, std::memcmp(first.v.data(), got.v.data(), got.v.size() * sizeof(float)))
        << what << ": adam.v differs from 1F1B's";
    EXPECT_EQ(first.losses, got.losses) << what << ": the losses differ from 1F1B's";
  }
}

TEST(Pipeline, EveryScheduleMatchesTheSingleProcessRun) {
  const int n = testing::world().group().size();
  if (n < 2) GTEST_SKIP() << "a pipeline needs 2 ranks";
  every_schedule_matches(n, {});
}

// ZB-V's list placed again from skewed times (as from a machine where B is slower than W)
// runs other orders on every stage and trains bitwise as 1F1B: each chunk still adds its
// micro-batches in the same order.
TEST(Pipeline, ZeroBubbleVPlacedAtMeasuredTimesTrainsTheSame) {
  const int n = testing::world().group().size();
  if (n < 2) GTEST_SKIP() << "a pipeline needs 2 ranks";
  auto run = [&](const std::string& schedule, bool adapt) {
    Trainer t(config({"parallel.pp=" + std::to_string(n), "parallel.pp_schedule=" + schedule}),
              testing::world());
    const double first = t.train_step().loss;
    const Schedule before = t.pipeline()->executor().schedule();
    if (adapt) t.pipeline()->adapt_list(ActionCosts{1, 1.5, 0.6, 0});
    State s = train(t, 2);
    s.losses.insert(s.losses.begin(), first);
    if (adapt) {
      EXPECT_TRUE(t.pipeline()->list_adapted());
      EXPECT_NE(before.stages, t.pipeline()->executor().schedule().stages) << "the list did not change";
    }
    return s;
  };
  const State want = run("1f1b", false);
  const State got = run("zb-v", true);
  expect_bitwise(want, got, "zb-v placed at B 1.5, W 0.6");
}

TEST(Pipeline, DpTimesPpMatchesAtEveryZeroStage) {
  if (testing::world().group().size() != 4) GTEST_SKIP() << "dp 2 x pp 2 needs 4 ranks";
  for (int z = 0; z <= 3; ++z) every_schedule_matches(2, {"parallel.zero_stage=" + std::to_string(z)});
}

TEST(Pipeline, OneFOneBHoldsAtMostPpMinusSMicroBatches) {
  const int n = testing::world().group().size();
  if (n < 2) GTEST_SKIP() << "a pipeline needs 2 ranks";
  for (std::string s : {"1f1b", "gpipe"}) {
    Trainer t(config({"parallel.pp=" + std::to_string(n), "parallel.pp_schedule=" + s}), testing::world());
    const int stage = t.grid().pp_rank();
    const int want = s == "gpipe" ? 12 : std::min(12, n - stage);
    EXPECT_EQ(t.pipeline()->executor().slots().at(0), want) << s << ", stage " << stage;
  }
}

TEST(Pipeline, UnequalStagesFromAnExplicitSplitMatch) {
  if (testing::world().group().size() != 2) GTEST_SKIP() << "the split names 2 stages";
  const State ref = reference(config({}), 2);
  Trainer t(config({"parallel.pp=2", "parallel.pp_partition=1,7"}), testing::world());
  expect_close(ref, train(t, 2), "stages of 1 and 7 layers");
}

// Saved by pp = np at ZeRO 1, loaded by pp = 1 (dp = np) and by the single process: the
// same state bitwise, and 2 more steps as the uninterrupted single-process run.
TEST(Pipeline, CheckpointLoadsIntoAnotherSplit) {
  World& w = testing::world();
  const int n = w.group().size();
  if (n < 2) GTEST_SKIP() << "a pipeline needs 2 ranks";
  // (a directory of this run's own: two test runs on one machine must not share it)
  const testing::SharedTempDir temp(w.group(), "pipeline_ckpt");
  const fs::path& dir = temp.path();
  const std::string ckpt = "checkpoint.dir=" + dir.string();
  State saved;
  {
    Trainer t(config({"parallel.pp=" + std::to_string(n), "parallel.zero_stage=1", ckpt}), w);
    saved = train(t, 2);
    ASSERT_TRUE(t.save_checkpoint("durable"));
    t.flush_checkpoints();
  }
  const State whole = reference(config({}), 4);
  const fs::path step = dir / "step-000000002";
  for (const std::string& pp : {std::string("1"), std::to_string(n)}) {
    Trainer t(config({"parallel.pp=" + pp, "parallel.zero_stage=2", ckpt}), w);
    t.restore(step);
    const State back{t.gather_state(state::kParam), t.gather_state(state::kAdamM),
                     t.gather_state(state::kAdamV), {}};
    EXPECT_EQ(0, std::memcmp(back.param.data(), saved.param.data(), saved.param.size() * sizeof(float)))
        << "pp " << pp << ": restored parameters";
    EXPECT_EQ(0, std::memcmp(back.v.data(), saved.v.data(), saved.v.size() * sizeof(float)))
        << "pp " << pp << ": restored adam.v";
    State more = train(t, 2);
    more.losses.clear();
    State want = whole;
    want.losses.clear();
    expect_close(want, more, "resumed at pp " + pp);
  }
}

// Saved by dp 2 x pp 2 (interleaved: 2 chunks a stage) at ZeRO 2, each rank writing the
// blocks its chunks hold (no exchange before the save), loaded by pp = 1 (dp = 4) and by
// pp = 4: the same state bitwise.
TEST(Pipeline, CheckpointOfDpTimesPpLoadsIntoOtherLayouts) {
  World& w = testing::world();
  if (w.group().size() != 4) GTEST_SKIP() << "dp 2 x pp 2 needs 4 ranks";
  const testing::SharedTempDir temp(w.group(), "pipeline_ckpt_dpxpp");
  const std::string ckpt = "checkpoint.dir=" + temp.path().string();
  State saved;
  {
    Trainer t(config({"parallel.pp=2", "parallel.pp_schedule=interleaved", "parallel.zero_stage=2",
                      ckpt}),
              w);
    saved = train(t, 2);
    ASSERT_TRUE(t.save_checkpoint("durable"));
    t.flush_checkpoints();
  }
  for (const std::string pp : {"1", "4"}) {
    Trainer t(config({"parallel.pp=" + pp, "parallel.zero_stage=1", ckpt}), w);
    t.restore(temp.path() / "step-000000002");
    for (std::string_view s : {state::kParam, state::kAdamM, state::kAdamV}) {
      const std::vector<float> back = t.gather_state(s);
      const std::vector<float>& want =
          s == state::kParam ? saved.param : s == state::kAdamM ? saved.m : saved.v;
      ASSERT_EQ(back.size(), want.size()) << s;
      EXPECT_EQ(0, std::memcmp(back.data(), want.data(), want.size() * sizeof(float)))
          << "pp " << pp << ": " << s;
    }
  }
}

// The other way round: saved at pp = 1 (dp = np),
// loaded by an interleaved pipeline of np stages x 2 chunks at ZeRO 3, bitwise.
TEST(Pipeline, CheckpointOfDataParallelismLoadsIntoAnInterleavedPipeline) {
  World& w = testing::world();
  const int n = w.group().size();
  if (n < 2) GTEST_SKIP() << "a pipeline needs 2 ranks";
  // (a directory of this run's own: two test runs on one machine must not share it)
  const testing::SharedTempDir temp(w.group(), "pipeline_ckpt_dp");
  const fs::path& dir = temp.path();
  const std::string ckpt = "checkpoint.dir=" + dir.string();
  State saved;
  {
    Trainer t(config({ckpt}), w);
    saved = train(t, 1);
    ASSERT_TRUE(t.save_checkpoint("durable"));
    t.flush_checkpoints();
  }
  Trainer t(config({"parallel.pp=" + std::to_string(n), "parallel.pp_schedule=interleaved",
                    "parallel.zero_stage=3", ckpt}),
            w);
  t.restore(dir / "step-000000001");
  for (std::string_view s : {state::kParam, state::kAdamM, state::kAdamV}) {
    const std::vector<float> back = t.gather_state(s);
    const std::vector<float>& want = s == state::kParam ? saved.param : s == state::kAdamM ? saved.m : saved.v;
    EXPECT_EQ(0, std::memcmp(back.data(), want.data(), want.size() * sizeof(float))) << s;
  }
}

// Evaluation runs forward through the stages and gives the single process's held-out
// loss; evaluating and saving in the middle of a run (at ZeRO 3: parameters gathered for
// the evaluation, shards moved to the writers) leave training as it was.
TEST(Pipeline, EvaluationAndASaveMidRunMatchTheSingleProcess) {
  World& w = testing::world();
  const int n = w.group().size();
  if (n < 2) GTEST_SKIP() << "a pipeline needs 2 ranks";
  const int pp = n == 4 ? 2 : n;
  // (a directory of this run's own: two test runs on one machine must not share it)
  const testing::SharedTempDir temp(w.group(), "pipeline_eval");
  const fs::path& dir = temp.path();
  Group self(MPI_COMM_SELF, "self", false);
  Trainer single(config({}), self, w.log());
  single.train_step();
  const double want_eval = single.evaluate();
  for (int i = 0; i < 2; ++i) single.train_step();
  const std::vector<float> want = single.gather_state(state::kParam);
  for (const std::string& s : {std::string("1f1b"), std::string("interleaved")}) {
    Trainer t(config({"parallel.pp=" + std::to_string(pp), "parallel.pp_schedule=" + s,
                      "parallel.zero_stage=3", "checkpoint.dir=" + (dir / s).string()}),
              w);
    t.train_step();
    EXPECT_NEAR(t.evaluate(), want_eval, kLossTol) << s << ": held-out loss";
    ASSERT_TRUE(t.save_checkpoint("durable")) << s;
    for (int i = 0; i < 2; ++i) t.train_step();
    EXPECT_LE(max_diff(want, t.gather_state(state::kParam)), kParamTol) << s << ": parameters";
    t.flush_checkpoints();
  }
}

// The merged trace shows every stage's forwards and backwards per micro-batch and the
// waits for its neighbours.
TEST(Pipeline, TraceShowsEachStagesSchedule) {
  World& w = testing::world();
  const int n = w.group().size();
  if (n < 2) GTEST_SKIP() << "a pipeline needs 2 ranks";
  const testing::SharedTempDir temp(w.group(), "pipeline_trace");
  const fs::path path = temp.path() / "trace.json";
  {
    Trainer t(config({"parallel.pp=" + std::to_string(n), "log.trace_file=" + path.string()}), w);
    t.train_step();
    t.write_trace();
  }
  if (w.rank() != 0) return;
  std::ifstream in(path);
  ASSERT_TRUE(in) << path;
  const nlohmann::json trace = nlohmann::json::parse(in);
  std::vector<int> forwards(n), backwards(n), waits(n), sends(n), receives(n), norms(n), calls(n);
  for (const auto& e : trace["traceEvents"]) {
    if (e["ph"] != "X") continue;
    const int pid = e["pid"];
    const std::string name = e["name"];
    forwards[pid] += name.rfind("forward mb ", 0) == 0;
    backwards[pid] += name.rfind("backward mb ", 0) == 0;
    waits[pid] += name.rfind("wait ", 0) == 0;
    // The transfers' cost on the stage's thread, the engine's calls, the norm's wait.
    sends[pid] += name.rfind("send activation mb ", 0) == 0 || name.rfind("send gradient mb ", 0) == 0;
    receives[pid] += name.rfind("post receive ", 0) == 0;
    norms[pid] += name == "gradient norm over stages";
    calls[pid] += name == "begin_backward";
  }
  for (int r = 0; r < n; ++r) {
    EXPECT_EQ(forwards[r], 12) << "stage " << r << ": one forward per micro-batch";
    EXPECT_EQ(backwards[r], 12) << "stage " << r;
    EXPECT_GT(waits[r], 0) << "stage " << r << ": waits for its neighbours";
    // An inner stage sends and receives both ways per micro-batch, an end stage one way.
    const int ways = (r > 0) + (r < n - 1);
    EXPECT_EQ(sends[r], 12 * ways) << "stage " << r;
    EXPECT_EQ(receives[r], 12 * ways) << "stage " << r;
    EXPECT_EQ(norms[r], 1) << "stage " << r;
    EXPECT_EQ(calls[r], 12) << "stage " << r << ": begin_backward per backward";
  }
  fs::remove(path);
}

TEST(Pipeline, ImpossibleLayoutsAreOneSentenceBeforeAnyCommunication) {
  World& w = testing::world();
  const int n = w.group().size();
  auto refused = [&](std::vector<std::string> o, const std::string& words) {
    try {
      Trainer t(config(o), w);
      ADD_FAILURE() << "accepted: " << o.front();
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
    }
  };
  refused({"parallel.pp=" + std::to_string(n + 1)}, "divide");
  if (n >= 2) {
    refused({"parallel.pp=" + std::to_string(n), "model.n_layer=1", "parallel.pp_schedule=interleaved"},
            "layers");
    refused({"parallel.pp=" + std::to_string(n), "parallel.pp_schedule=interleaved",
             "batch.global_batch=" + std::to_string(n + 1), "batch.micro_batch=1"},
            "multiple");
    refused({"parallel.pp=" + std::to_string(n), "parallel.pp_schedule=pipedream"}, "parallel.pp_schedule");
    refused({"parallel.pp=" + std::to_string(n), "parallel.pp_partition=1,1"}, "parallel.pp_partition");
    refused({"parallel.pp=" + std::to_string(n), "batch.global_batch=2000000", "batch.micro_batch=1"},
            "micro-batches per step");
    refused({"parallel.pp=" + std::to_string(n), "parallel.pp_schedule=interleaved",
             "parallel.pp_virtual_stages=1000000000"},
            "virtual stages");
  }
}

}  // namespace
}  // namespace etr::train
