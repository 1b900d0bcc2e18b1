// Pipeline schedules as data (parallel/pipeline_schedule.h), for every kind, every P in
// 1..8, m in 1..16 and (interleaved) v in 2..4 that check_schedule_spec accepts:
//   - the lists pass validate_schedule, end with one optimizer step, and post each receive
//     right after the stage's previous compute action;
//   - max_in_flight: GPipe m on every stage; 1F1B min(m, P - s) on stage s; ZB-H1
//     min(m, P) on every stage (1F1B's peak, on its first stage);
//     interleaved Megatron-LM's min(v m, 2 (P - s - 1) + (v - 1) P + 1) (its warm-up
//     forwards plus the one of the first steady-state pair);
//   - simulate_schedule with unit costs (F = B = W = 1, so a whole backward costs 2) gives
//     theoretical_bubble exactly for every kind: for ZB-H1 Qi et al.'s (P-1)/(3m + P-1)
//     when m >= P (makespan 3m + P - 1; P <= 8, m <= 32, no slack), below 1F1B for P >= 2;
//   - ZB-V (two chunks in a V): (P-1)/(6m + P-1) for 2P <= m <= 32, P <= 8, no slack;
//     placed at unequal F, B, W times, never slower than the unit list at those times;
//   - exact lists for small cases pin the orders; broken lists are refused with a message
//     naming the stage.
#include "parallel/pipeline_schedule.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "parallel/pipeline_calls.h"
#include "runtime/config/pipeline_settings.h"
#include "runtime/error.h"

namespace etr {
namespace {

constexpr ScheduleKind kKinds[] = {ScheduleKind::kGPipe, ScheduleKind::k1F1B,
                                   ScheduleKind::kInterleaved1F1B, ScheduleKind::kZeroBubbleH1,
                                   ScheduleKind::kZeroBubbleV};
constexpr double kTolerance = 1e-9;

// Every spec of the sweep that check_schedule_spec accepts.
std::vector<ScheduleSpec> sweep(ScheduleKind kind) {
  std::vector<ScheduleSpec> out;
  const bool interleaved = kind == ScheduleKind::kInterleaved1F1B;
  const bool v_shape = kind == ScheduleKind::kZeroBubbleV;
  for (int p = 1; p <= 8; ++p) {
    for (int m = 1; m <= 16; ++m) {
      for (int v = interleaved || v_shape ? 2 : 1; v <= (interleaved ? 4 : v_shape ? 2 : 1); ++v) {
        const ScheduleSpec spec{kind, p, m, v};
        try {
          check_schedule_spec(spec);
        } catch (const ConfigError&) {
          continue;
        }
        out.push_back(spec);
      }
    }
  }
  return out;
}

std::string name(const ScheduleSpec& spec) {
  return std::string(schedule_name(spec.kind)) + " P=" + std::to_string(spec.stages) +
         " m=" + std::to_string(spec.micro_batches) + " v=" + std::to_string(spec.virtual_stages);
}

bool is_compute(PipeOp op) {
  return op == PipeOp::kForward || op == PipeOp::kBackward || op == PipeOp::kBackwardInput ||
         op == PipeOp::kBackwardWeight;
}

// Shorthands for hand-written lists: (micro-batch, chunk).
PipeAction fwd(int mb, int c = 0) {
  return {PipeOp::kForward, mb, c};
}
PipeAction bwd(int mb, int c = 0) {
  return {PipeOp::kBackward, mb, c};
}
PipeAction b_in(int mb, int c = 0) {
  return {PipeOp::kBackwardInput, mb, c};
}
PipeAction b_wt(int mb, int c = 0) {
  return {PipeOp::kBackwardWeight, mb, c};
}
PipeAction recv_act(int mb, int c = 0) {
  return {PipeOp::kRecvActivation, mb, c};
}
PipeAction send_act(int mb, int c = 0) {
  return {PipeOp::kSendActivation, mb, c};
}
PipeAction recv_grad(int mb, int c = 0) {
  return {PipeOp::kRecvGrad, mb, c};
}
PipeAction send_grad(int mb, int c = 0) {
  return {PipeOp::kSendGrad, mb, c};
}
PipeAction step() {
  return {PipeOp::kOptimizerStep, -1, 0};
}

std::string show(const std::vector<PipeAction>& list) {
  std::string out;
  for (const PipeAction& a : list) out += to_string(a) + " ";
  return out;
}

void expect_lists(const ScheduleSpec& spec, const std::vector<std::vector<PipeAction>>& want) {
  const Schedule got = build_schedule(spec);
  ASSERT_EQ(got.stages.size(), want.size());
  for (size_t s = 0; s < want.size(); ++s) {
    EXPECT_EQ(got.stages[s], want[s])
        << name(spec) << " stage " << s << "\n got: " << show(got.stages[s])
        << "\nwant: " << show(want[s]);
  }
}

// Expects `fn` to throw E with a message containing every one of `parts`.
template <typename E, typename Fn>
void expect_refused(Fn fn, const std::vector<std::string>& parts) {
  try {
    fn();
    ADD_FAILURE() << "expected a refusal mentioning '" << parts.front() << "'";
  } catch (const E& e) {
    for (const std::string& part : parts) {
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos)
          << "'" << e.what() << "' lacks '" << part << "'";
    }
  }
}

TEST(PipelineSchedule, ParsesNamesAndListsTheChoices) {
  for (ScheduleKind kind : kKinds) EXPECT_EQ(parse_schedule_kind(schedule_name(kind)), kind);
  EXPECT_EQ(parse_schedule_kind("interleaved-1f1b"), ScheduleKind::kInterleaved1F1B);
  for (const char* bad : {"pipedream", "GPipe", "", "zb-h2"}) {
    expect_refused<ConfigError>(
        [&] { parse_schedule_kind(bad); },
        {"'" + std::string(bad) + "'", "gpipe", "1f1b", "interleaved", "zb-h1", "zb-v"});
  }
}

// The config accepts exactly the names this parser knows (runtime/config checks them
// whether or not a pipeline runs).
TEST(PipelineSchedule, TheConfigsNamesAreTheParsersNames) {
  for (std::string_view name : pipeline_schedule_names()) EXPECT_NO_THROW(parse_schedule_kind(name)) << name;
  for (const ScheduleKind kind : kKinds) {
    const std::string_view name = schedule_name(kind);
    EXPECT_NE(std::find(pipeline_schedule_names().begin(), pipeline_schedule_names().end(), name),
              pipeline_schedule_names().end())
        << name;
  }
}

TEST(PipelineSchedule, CheckSpecRefusesWhatCannotBeScheduled) {
  using K = ScheduleKind;
  auto refuse = [](ScheduleSpec spec, const std::string& value) {
    expect_refused<ConfigError>([&] { check_schedule_spec(spec); }, {value});
    expect_refused<ConfigError>([&] { build_schedule(spec); }, {value});
  };
  refuse({K::k1F1B, 0, 4, 1}, "stages = 0");
  refuse({K::kGPipe, -1, 4, 1}, "stages = -1");
  refuse({K::k1F1B, 2, 0, 1}, "micro-batches = 0");
  refuse({K::kZeroBubbleH1, 2, 4, 0}, "virtual stages = 0");
  refuse({K::k1F1B, 2, 4, 2}, "virtual stages = 2");
  refuse({K::kGPipe, 2, 4, 3}, "virtual stages = 3");
  refuse({K::kZeroBubbleH1, 2, 4, 2}, "virtual stages = 2");
  refuse({K::kInterleaved1F1B, 2, 4, 1}, "not 1");
  refuse({K::kInterleaved1F1B, 2, 3, 2}, "micro-batches (3)");
  refuse({K::kInterleaved1F1B, 4, 2, 2}, "micro-batches (2)");
  refuse({K::kInterleaved1F1B, 1, 4, 2}, "not 1");
  refuse({K::kZeroBubbleV, 2, 4, 1}, "not 1");
  refuse({K::kZeroBubbleV, 1, 4, 2}, "not 1");
  refuse({K::kZeroBubbleV, 4, 7, 2}, "not 7");
  EXPECT_NO_THROW(check_schedule_spec({K::kZeroBubbleV, 4, 8, 2}));
  EXPECT_NO_THROW(check_schedule_spec({K::kInterleaved1F1B, 4, 8, 3}));
  EXPECT_NO_THROW(check_schedule_spec({K::kGPipe, 1, 1, 1}));
}

TEST(PipelineSchedule, EveryListIsValidAndPostsReceivesEarly) {
  for (ScheduleKind kind : kKinds) {
    const std::vector<ScheduleSpec> specs = sweep(kind);
    EXPECT_GT(specs.size(), kind == ScheduleKind::kZeroBubbleV ? 40u : 60u) << schedule_name(kind);
    for (const ScheduleSpec& spec : specs) {
      const Schedule schedule = build_schedule(spec);
      ASSERT_NO_THROW(validate_schedule(schedule)) << name(spec);
      for (const std::vector<PipeAction>& list : schedule.stages) {
        ASSERT_FALSE(list.empty());
        EXPECT_EQ(list.back(), step());
        EXPECT_EQ(std::count(list.begin(), list.end(), step()), 1);
        for (size_t i = 0; i < list.size(); ++i) {
          const PipeOp op = list[i].op;
          if (op != PipeOp::kRecvActivation && op != PipeOp::kRecvGrad) continue;
          // Right after the previous compute action (or first), and the next compute
          // action is the one it feeds.
          EXPECT_TRUE(i == 0 || is_compute(list[i - 1].op)) << name(spec) << " at " << i;
          const auto consumer = std::find_if(list.begin() + i, list.end(),
                                             [](const PipeAction& a) { return is_compute(a.op); });
          ASSERT_NE(consumer, list.end());
          EXPECT_EQ(consumer->micro_batch, list[i].micro_batch) << name(spec) << " at " << i;
          EXPECT_EQ(consumer->chunk, list[i].chunk) << name(spec) << " at " << i;
        }
      }
    }
  }
}

TEST(PipelineSchedule, InFlightBounds) {
  for (ScheduleKind kind : kKinds) {
    for (const ScheduleSpec& spec : sweep(kind)) {
      const Schedule schedule = build_schedule(spec);
      const int p = spec.stages, m = spec.micro_batches, v = spec.virtual_stages;
      for (int s = 0; s < p; ++s) {
        int bound = std::min(m, p - s);  // 1F1B
        if (kind == ScheduleKind::kGPipe) bound = m;
        if (kind == ScheduleKind::kZeroBubbleH1) bound = std::min(m, p);
        if (kind == ScheduleKind::kZeroBubbleV) bound = 2 * p;  // chunk-micro-batches: P whole ones
        if (kind == ScheduleKind::kInterleaved1F1B) {
          bound = std::min(v * m, 2 * (p - s - 1) + (v - 1) * p + 1);
        }
        EXPECT_EQ(max_in_flight(schedule, s), bound) << name(spec) << " stage " << s;
      }
    }
  }
  EXPECT_THROW(max_in_flight(build_schedule({ScheduleKind::k1F1B, 2, 2, 1}), 2), InvalidArgument);
}

TEST(PipelineSchedule, SimulatedBubbleIsTheTheory) {
  for (ScheduleKind kind : kKinds) {
    for (const ScheduleSpec& spec : sweep(kind)) {
      const SimulatedRun run = simulate_schedule(build_schedule(spec));
      EXPECT_NEAR(run.bubble_fraction, theoretical_bubble(spec), kTolerance) << name(spec);
      const double per_stage = 3.0 * spec.micro_batches * spec.virtual_stages;
      for (double busy : run.busy) EXPECT_DOUBLE_EQ(busy, per_stage) << name(spec);
    }
  }
}

// ZB-H1 as published: at F = B = W = 1 the makespan is exactly 3m + P - 1 for m >= P, the
// paper's bubble (P-1)/(3m + P-1) with no slack, for P <= 8 and m <= 32; below that the
// 1F1B order's 2m + 2P - 1. No stage holds more than 1F1B's first stage (min(m, P)), every
// stage is busy 3m, and it beats 1F1B for P >= 2.
TEST(PipelineSchedule, ZbH1HasThePapersBubble) {
  for (int p = 1; p <= 8; ++p) {
    for (int m = 1; m <= 32; ++m) {
      const ScheduleSpec spec{ScheduleKind::kZeroBubbleH1, p, m, 1};
      const Schedule schedule = build_schedule(spec);
      const SimulatedRun run = simulate_schedule(schedule);
      const int makespan = m >= p ? 3 * m + p - 1 : 2 * m + 2 * p - 1;
      EXPECT_EQ(run.makespan, makespan) << name(spec);
      if (m >= p) {
        EXPECT_DOUBLE_EQ(run.bubble_fraction, 1.0 - 3.0 * m / (3.0 * m + p - 1)) << name(spec);
        EXPECT_NEAR(run.bubble_fraction, (p - 1.0) / (3.0 * m + p - 1), 1e-15) << name(spec);
      }
      EXPECT_NEAR(run.bubble_fraction, theoretical_bubble(spec), 1e-15) << name(spec);
      const Schedule one_f_one_b = build_schedule({ScheduleKind::k1F1B, p, m, 1});
      for (int s = 0; s < p; ++s) {
        EXPECT_EQ(run.busy[static_cast<size_t>(s)], 3.0 * m) << name(spec) << " stage " << s;
        EXPECT_EQ(max_in_flight(schedule, s), max_in_flight(one_f_one_b, 0)) << name(spec) << " stage " << s;
      }
      if (p >= 2) {
        EXPECT_LT(run.bubble_fraction, simulate_schedule(one_f_one_b).bubble_fraction) << name(spec);
      }
    }
  }
}

// ZB-V: at F = B = W = 1 (a chunk's) the makespan is exactly 6m + P - 1 for P <= 8 and
// 2P <= m <= 32, the bubble (P-1)/(6m + P-1) with no slack, every stage busy 6m; no stage
// holds more than 2P chunk-micro-batches (P whole ones: 1F1B's first stage); below ZB-H1's
// bubble; and stage 0 computes its last W of chunk 1 (the tied embedding's user) before its
// last W of chunk 0 (the owner), which the tied gradient's exchange on one rank needs.
TEST(PipelineSchedule, ZbVHasItsBubble) {
  for (int p = 2; p <= 8; ++p) {
    for (int m = 2 * p; m <= 32; ++m) {
      const ScheduleSpec spec{ScheduleKind::kZeroBubbleV, p, m, 2};
      const Schedule schedule = build_schedule(spec);
      ASSERT_NO_THROW(validate_schedule(schedule)) << name(spec);
      const SimulatedRun run = simulate_schedule(schedule);
      EXPECT_EQ(run.makespan, 6 * m + p - 1) << name(spec);
      EXPECT_DOUBLE_EQ(run.bubble_fraction, 1.0 - 6.0 * m / (6.0 * m + p - 1)) << name(spec);
      EXPECT_NEAR(run.bubble_fraction, theoretical_bubble(spec), 1e-15) << name(spec);
      const Schedule one_f_one_b = build_schedule({ScheduleKind::k1F1B, p, m, 1});
      for (int s = 0; s < p; ++s) {
        EXPECT_EQ(run.busy[static_cast<size_t>(s)], 6.0 * m) << name(spec) << " stage " << s;
        EXPECT_LE(max_in_flight(schedule, s), 2 * max_in_flight(one_f_one_b, 0)) << name(spec);
      }
      EXPECT_LT(run.bubble_fraction, theoretical_bubble({ScheduleKind::kZeroBubbleH1, p, m, 1})) << name(spec);
      const std::vector<PipeAction>& first = schedule.stages[0];
      auto last_w = [&](int chunk) {
        for (size_t i = first.size(); i-- > 0;) {
          if (first[i].op == PipeOp::kBackwardWeight && first[i].chunk == chunk) return i;
        }
        return size_t{0};
      };
      EXPECT_LT(last_w(1), last_w(0)) << name(spec);
    }
  }
  EXPECT_EQ(virtual_stage_of({ScheduleKind::kZeroBubbleV, 4, 8, 2}, 1, 1), 6);
  EXPECT_EQ(stage_of_virtual({ScheduleKind::kZeroBubbleV, 4, 8, 2}, 6), 1);
  EXPECT_EQ(stage_of_virtual({ScheduleKind::kZeroBubbleV, 4, 8, 2}, 7), 0);
  EXPECT_EQ(stage_of_virtual({ScheduleKind::kInterleaved1F1B, 4, 8, 2}, 7), 3);
}

// ZB-V placed at unequal times (list_at_costs): never slower than the unit list at those
// times, within its bounds, every chunk's B's and W's in micro-batch order (the sums do
// not depend on the list), stage 0's last W of chunk 1 before chunk 0's; on 2 stages,
// with B at most 1.5 W, within 1.5 points of the equal-time theory where the unit list is
// up to 13 points over it.
TEST(PipelineSchedule, ZbVPlacedAtMeasuredTimes) {
  for (int p = 2; p <= 4; ++p) {
    for (int m = 2 * p; m <= 16; ++m) {
      const ScheduleSpec spec{ScheduleKind::kZeroBubbleV, p, m, 2};
      const Schedule unit = build_schedule(spec);
      EXPECT_EQ(list_at_costs(spec, ActionCosts{}).stages, unit.stages) << name(spec);
      for (double b : {0.8, 1.2, 1.5}) {
        for (double w : {0.6, 1.0, 1.2}) {
          const ActionCosts costs{1, b, w, 0};
          const std::string what = name(spec) + " B " + std::to_string(b) + " W " + std::to_string(w);
          const Schedule list = list_at_costs(spec, costs);
          ASSERT_NO_THROW(validate_schedule(list)) << what;
          EXPECT_LE(simulate_schedule(list, costs).makespan, simulate_schedule(unit, costs).makespan) << what;
          if (p == 2 && b / w > 1.1) {  // where the unit list idles most: placed again
            EXPECT_NE(list.stages, unit.stages) << what;
          }
          for (int s = 0; s < p; ++s) {
            EXPECT_LE(max_in_flight(list, s), 2 * p) << what;
            for (int c = 0; c < 2; ++c) {
              int next_b = 0, next_w = 0;
              for (const PipeAction& a : list.stages[static_cast<size_t>(s)]) {
                if (a.chunk != c) continue;
                if (a.op == PipeOp::kBackwardInput) {
                  EXPECT_EQ(a.micro_batch, next_b++) << what;
                }
                if (a.op == PipeOp::kBackwardWeight) {
                  EXPECT_EQ(a.micro_batch, next_w++) << what;
                }
              }
            }
          }
          const std::vector<PipeAction>& first = list.stages[0];
          size_t last_w[2] = {0, 0};
          for (size_t i = 0; i < first.size(); ++i) {
            if (first[i].op == PipeOp::kBackwardWeight) last_w[first[i].chunk] = i;
          }
          EXPECT_LT(last_w[1], last_w[0]) << what;
          if (p == 2 && (m == 8 || m == 16) && b / w <= 1.5) {
            EXPECT_LT(simulate_schedule(list, costs).bubble_fraction, theoretical_bubble(spec) + 0.015) << what;
          }
        }
      }
    }
  }
  // The case the unit list handles worst here: 13.7 points over at m 16.
  const ScheduleSpec spec{ScheduleKind::kZeroBubbleV, 2, 16, 2};
  const ActionCosts skew{1, 1.2, 0.6, 0};
  EXPECT_GT(simulate_schedule(build_schedule(spec), skew).bubble_fraction, theoretical_bubble(spec) + 0.1);
}

TEST(PipelineSchedule, SimulationCountsCostsAndCommunication) {
  // GPipe P=2 m=1 with F=1, B=2+3, p2p 0.5: F [0,1], send [1,1.5]; stage 1 F [1.5,2.5],
  // B [2.5,7.5], send [7.5,8]; stage 0 B [8,13].
  const SimulatedRun run =
      simulate_schedule(build_schedule({ScheduleKind::kGPipe, 2, 1, 1}), {1, 2, 3, 0.5});
  EXPECT_DOUBLE_EQ(run.makespan, 13);
  EXPECT_EQ(run.busy, (std::vector<double>{6, 6}));
  EXPECT_DOUBLE_EQ(run.bubble_fraction, 1 - 12.0 / 26);
  const SimulatedRun single = simulate_schedule(build_schedule({ScheduleKind::k1F1B, 1, 4, 1}));
  EXPECT_DOUBLE_EQ(single.makespan, 12);
  EXPECT_DOUBLE_EQ(single.bubble_fraction, 0);
}

TEST(PipelineSchedule, GPipeListsP2M3) {
  expect_lists({ScheduleKind::kGPipe, 2, 3, 1},
               {{fwd(0), send_act(0), fwd(1), send_act(1), fwd(2), recv_grad(0), send_act(2),
                 bwd(0), recv_grad(1), bwd(1), recv_grad(2), bwd(2), step()},
                {recv_act(0), fwd(0), recv_act(1), fwd(1), recv_act(2), fwd(2), bwd(0),
                 send_grad(0), bwd(1), send_grad(1), bwd(2), send_grad(2), step()}});
}

TEST(PipelineSchedule, OneFOneBListsP2M3) {
  expect_lists({ScheduleKind::k1F1B, 2, 3, 1},
               {{fwd(0), send_act(0), fwd(1), recv_grad(0), send_act(1), bwd(0), fwd(2),
                 recv_grad(1), send_act(2), bwd(1), recv_grad(2), bwd(2), step()},
                {recv_act(0), fwd(0), bwd(0), recv_act(1), send_grad(0), fwd(1), bwd(1),
                 recv_act(2), send_grad(1), fwd(2), bwd(2), send_grad(2), step()}});
}

// Stage 1 defers its W's: W0 runs after B1, where it would otherwise wait for F2's input.
TEST(PipelineSchedule, ZbH1ListsP2M3) {
  expect_lists(
      {ScheduleKind::kZeroBubbleH1, 2, 3, 1},
      {{fwd(0), send_act(0), fwd(1), recv_grad(0), send_act(1), b_in(0), b_wt(0), fwd(2),
        recv_grad(1), send_act(2), b_in(1), b_wt(1), recv_grad(2), b_in(2), b_wt(2), step()},
       {recv_act(0), fwd(0), b_in(0), recv_act(1), send_grad(0), fwd(1), b_in(1), send_grad(1),
        b_wt(0), recv_act(2), fwd(2), b_in(2), send_grad(2), b_wt(1), b_wt(2), step()}});
}

TEST(PipelineSchedule, InterleavedListsP2V2M2) {
  // Virtual stages: stage 0 holds 0 and 2, stage 1 holds 1 and 3. Stage 0 warms up with
  // all 4 forwards (2 (P-1) + (v-1) P = 4), stage 1 with 2.
  expect_lists(
      {ScheduleKind::kInterleaved1F1B, 2, 2, 2},
      {{fwd(0, 0),       send_act(0, 0),  fwd(1, 0), recv_act(0, 1),  send_act(1, 0),  fwd(0, 1),
        recv_act(1, 1),  send_act(0, 1),  fwd(1, 1), recv_grad(0, 1), send_act(1, 1),  bwd(0, 1),
        recv_grad(1, 1), send_grad(0, 1), bwd(1, 1), recv_grad(0, 0), send_grad(1, 1), bwd(0, 0),
        recv_grad(1, 0), bwd(1, 0),       step()},
       {recv_act(0, 0),  fwd(0, 0),       recv_act(1, 0),  send_act(0, 0),  fwd(1, 0),
        recv_act(0, 1),  send_act(1, 0),  fwd(0, 1),       bwd(0, 1),       recv_act(1, 1),
        send_grad(0, 1), fwd(1, 1),       bwd(1, 1),       recv_grad(0, 0), send_grad(1, 1),
        bwd(0, 0),       recv_grad(1, 0), send_grad(0, 0), bwd(1, 0),       send_grad(1, 0),
        step()}});
}

TEST(PipelineSchedule, InterleavedComputeOrderP2V2M4) {
  // Megatron-LM's order: forwards go by groups of P micro-batches through the chunks,
  // backwards the same with the chunks mirrored.
  const Schedule schedule = build_schedule({ScheduleKind::kInterleaved1F1B, 2, 4, 2});
  const std::vector<std::vector<PipeAction>> want = {
      {fwd(0, 0), fwd(1, 0), fwd(0, 1), fwd(1, 1), fwd(2, 0), bwd(0, 1), fwd(3, 0), bwd(1, 1),
       fwd(2, 1), bwd(0, 0), fwd(3, 1), bwd(1, 0), bwd(2, 1), bwd(3, 1), bwd(2, 0), bwd(3, 0)},
      {fwd(0, 0), fwd(1, 0), fwd(0, 1), bwd(0, 1), fwd(1, 1), bwd(1, 1), fwd(2, 0), bwd(0, 0),
       fwd(3, 0), bwd(1, 0), fwd(2, 1), bwd(2, 1), fwd(3, 1), bwd(3, 1), bwd(2, 0), bwd(3, 0)}};
  for (int s = 0; s < 2; ++s) {
    std::vector<PipeAction> compute;
    std::copy_if(schedule.stages[s].begin(), schedule.stages[s].end(), std::back_inserter(compute),
                 [](const PipeAction& a) { return is_compute(a.op); });
    EXPECT_EQ(compute, want[s]) << "stage " << s << ": " << show(compute);
  }
}

// `schedule` with actions `what` and `where` of `stage` swapped.
Schedule swapped(Schedule schedule, int stage, PipeAction what, PipeAction where) {
  std::vector<PipeAction>& list = schedule.stages[stage];
  const auto a = std::find(list.begin(), list.end(), what);
  const auto b = std::find(list.begin(), list.end(), where);
  EXPECT_TRUE(a != list.end() && b != list.end());
  std::iter_swap(a, b);
  return schedule;
}

TEST(PipelineSchedule, BrokenListsAreRefused) {
  const Schedule gpipe = build_schedule({ScheduleKind::kGPipe, 2, 2, 1});
  // A send swapped with its own forward: sends what is not computed yet.
  expect_refused<InvalidArgument>(
      [&] { validate_schedule(swapped(gpipe, 0, send_act(1), fwd(1))); },
      {"stage 0", "send-activation(mb 1, chunk 0)", "before its forward"});
  // A send swapped with a backward that waits for it (through stage 1): the lists are
  // well-formed but deadlock.
  const Schedule stuck = swapped(gpipe, 0, send_act(1), bwd(0));
  EXPECT_NO_THROW(validate_schedule(stuck));
  expect_refused<InvalidArgument>(
      [&] { simulate_schedule(stuck); },
      {"deadlock", "stage 0 waits at action 4 (backward(mb 0, chunk 0))",
       "stage 1 waits at action 3 (forward(mb 1, chunk 0))"});
  // The same across the chunks of the interleaved schedule.
  const Schedule interleaved = build_schedule({ScheduleKind::kInterleaved1F1B, 2, 2, 2});
  const Schedule cycle = swapped(interleaved, 1, send_act(1, 0), recv_grad(0, 0));
  EXPECT_NO_THROW(validate_schedule(cycle));
  expect_refused<InvalidArgument>([&] { simulate_schedule(cycle); },
                                  {"deadlock", "stage 0 waits", "stage 1 waits"});
  // A dropped backward.
  Schedule dropped = build_schedule({ScheduleKind::k1F1B, 3, 4, 1});
  auto& middle = dropped.stages[1];
  middle.erase(std::find(middle.begin(), middle.end(), bwd(2)));
  expect_refused<InvalidArgument>([&] { validate_schedule(dropped); },
                                  {"stage 1", "send-grad(mb 2, chunk 0)"});
  // A duplicated forward.
  Schedule twice = build_schedule({ScheduleKind::kZeroBubbleH1, 3, 4, 1});
  auto& last = twice.stages[2];
  last.insert(std::find(last.begin(), last.end(), fwd(1)) + 1, fwd(1));
  expect_refused<InvalidArgument>([&] { validate_schedule(twice); },
                                  {"stage 2", "forward(mb 1, chunk 0)", "forwarded twice"});
  // Stage 0 forwards (and sends) micro-batches 0 and 1 in the other order: each list is
  // well-formed, but the channel pairs stage 0's mb 1 with stage 1's receive of mb 0.
  const Schedule crossed = swapped(swapped(gpipe, 0, fwd(0), fwd(1)), 0, send_act(0), send_act(1));
  expect_refused<InvalidArgument>(
      [&] { validate_schedule(crossed); },
      {"stage 0 sends activations to stage 1 in another order than stage 1 receives them",
       "message 0 is mb 1"});
  // W without its B, and a missing optimizer step.
  Schedule no_b = build_schedule({ScheduleKind::kZeroBubbleH1, 1, 2, 1});
  std::iter_swap(no_b.stages[0].begin() + 1, no_b.stages[0].begin() + 2);
  expect_refused<InvalidArgument>([&] { validate_schedule(no_b); },
                                  {"stage 0", "before its backward-input"});
  Schedule no_step = gpipe;
  no_step.stages[1].pop_back();
  expect_refused<InvalidArgument>([&] { validate_schedule(no_step); },
                                  {"stage 1", "optimizer-step"});
}

}  // namespace
}  // namespace etr
