// Pipeline schedules as data (docs/design.md, "Execution of one optimizer step"): a schedule is,
// for each of P pipeline stages (ranks of the pp group), the ordered list of actions that
// stage performs in one optimizer step. The lists are built by pure functions of
// (kind, P, m, v) and run by the executor (parallel/pipeline_executor.h); nothing in them
// depends on timing, so every rank of a stage does the same thing in the same order.
//
// Virtual stages (interleaved 1F1B): the model's layers are cut into P v chunks; rank s
// holds chunks c = 0..v-1, i.e. virtual stages c P + s (Megatron-LM's placement), so the
// activations of virtual stage j go to virtual stage j + 1 on rank (s + 1) % P. Without
// interleaving v = 1 and the chunk is always 0. ZB-V places its 2 chunks in a V: rank s
// holds virtual stages s (chunk 0) and 2P-1-s (chunk 1), so rank P-1 sends to itself at
// the turn and rank 0 holds the first and the last (the loss, and both halves of a tied
// embedding). virtual_stage_of() and stage_of_virtual() say where a chunk is.
//
// Actions of stage s for micro-batch mb of chunk c:
//   kRecvActivation  post the receive of the chunk's input from the previous virtual
//                    stage (never on virtual stage 0: the data is its input)
//   kForward         forward of the chunk (waits for that receive)
//   kSendActivation  send the chunk's output to the next virtual stage (never on the last)
//   kRecvGrad        post the receive of the gradient of the chunk's output (never on the
//                    last virtual stage: the loss is its output)
//   kBackward        the whole backward of the chunk (input and weight gradients)
//   kBackwardInput   B: only the gradient with respect to the chunk's input (ZB-H1)
//   kBackwardWeight  W: only the weight gradients (ZB-H1; after B of the same micro-batch)
//   kSendGrad        send the gradient of the chunk's input to the previous virtual stage
//                    (never on virtual stage 0)
//   kOptimizerStep   the end of the step's pipeline work (once, last, on every stage)
//
// A micro-batch's activations on a chunk are held from its kForward until its kBackward
// (or kBackwardWeight, which reads them too): max_in_flight() counts them in list order.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace etr {

enum class PipeOp : uint8_t {
  kRecvActivation,
  kForward,
  kSendActivation,
  kRecvGrad,
  kBackward,
  kBackwardInput,
  kBackwardWeight,
  kSendGrad,
  kOptimizerStep,
};

struct PipeAction {
  PipeOp op = PipeOp::kForward;
  int micro_batch = -1;  // 0..m-1; -1 for kOptimizerStep
  int chunk = 0;         // 0..v-1 (virtual stage chunk * P + stage)
  bool operator==(const PipeAction&) const = default;
};

enum class ScheduleKind : uint8_t { kGPipe, k1F1B, kInterleaved1F1B, kZeroBubbleH1, kZeroBubbleV };

struct ScheduleSpec {
  ScheduleKind kind = ScheduleKind::k1F1B;
  int stages = 1;          // P
  int micro_batches = 1;   // m, per optimizer step and pipeline (replica)
  int virtual_stages = 1;  // v: chunks per rank (> 1 only for kInterleaved1F1B; 2 for kZeroBubbleV)
};

// The virtual stage of chunk `chunk` on stage `stage` (c P + s; ZB-V: s, and 2P-1-s for
// chunk 1), and the stage holding virtual stage `vstage`.
int virtual_stage_of(const ScheduleSpec& spec, int stage, int chunk);
int stage_of_virtual(const ScheduleSpec& spec, int vstage);

struct Schedule {
  ScheduleSpec spec;
  std::vector<std::vector<PipeAction>> stages;  // [stage s] -> its actions, in order
};

// "gpipe", "1f1b", "interleaved" ("interleaved-1f1b"), "zb-h1", "zb-v" (case as written); throws
// ConfigError naming the choices otherwise.
ScheduleKind parse_schedule_kind(std::string_view name);
std::string_view schedule_name(ScheduleKind kind);

// "forward", "send-grad", ... and "forward(mb 2, chunk 0)": for messages and traces.
std::string_view pipe_op_name(PipeOp op);
std::string to_string(const PipeAction& action);

// Throws ConfigError, one sentence naming the value and the limit, when the spec cannot
// be scheduled: P < 1, m < 1, v < 1, v > 1 for a schedule that is not interleaved,
// interleaved with m not a multiple of P (or m < P), with v < 2 or with P < 2 (its
// chunks would send to their own rank); zb-v with v != 2, P < 2 or m < 2P.
void check_schedule_spec(const ScheduleSpec& spec);

// Time of each kind of action, in any unit; a kBackward costs backward_input +
// backward_weight. A send occupies its stage for `p2p` (0: free); a receive is a post and
// takes no time.
struct ActionCosts {
  double forward = 1;
  double backward_input = 1;
  double backward_weight = 1;
  double p2p = 0;
};

// The schedule of `spec` (check_schedule_spec first). Orders of stage s's compute actions
// (parallel/pipeline_schedule.cc has the details):
//   GPipe        all forwards, then all backwards, in micro-batch order.
//   1F1B         min(P-s-1, m) warm-up forwards, forward/backward pairs, the rest.
//   interleaved  Megatron-LM's order and warm-up, 2(P-s-1) + (v-1)P forwards (at most mv).
//   ZB-H1        1F1B's order with each backward split into B and W; each W placed where
//                the stage would otherwise wait (for a gradient, or for a W to free room
//                under the bound of P micro-batches held until their W: 1F1B's peak).
//   ZB-V         two chunks in a V, split backwards, list-scheduled at `costs` under
//                the bound of 2P chunk-micro-batches held (P whole ones: 1F1B's peak).
// Each receive is posted right after the stage's previous compute action (first in the
// list for the first), each send follows its compute action, and the list ends with one
// kOptimizerStep{micro_batch -1, chunk 0}. `costs`: the times ZB-V's list is placed
// with (a chunk's F, B, W; the others' orders do not depend on them).
Schedule build_schedule(const ScheduleSpec& spec, const ActionCosts& costs = {});

// Most micro-batches whose activations stage `stage` holds at once, over all its chunks,
// counted in list order (kForward adds one; kBackward or kBackwardWeight releases it).
// build_schedule gives: GPipe m; 1F1B min(m, P - s); ZB-H1 min(m, P); ZB-V at most 2P
// chunk-micro-batches (P whole micro-batches); interleaved
// min(v m, 2(P-s-1) + (v-1)P + 1) (Megatron-LM's warm-up plus one).
int max_in_flight(const Schedule& schedule, int stage);

// Throws InvalidArgument, naming the stage and action, unless every stage forwards each
// (micro-batch, chunk) exactly once and backs it up exactly once (kBackward, or
// kBackwardInput then kBackwardWeight), after its forward; sends and receives pair up
// between neighbouring virtual stages in the same order on both sides; and the lists
// end with kOptimizerStep.
void validate_schedule(const Schedule& schedule);

struct SimulatedRun {
  double makespan = 0;       // first action to the last kOptimizerStep (of any stage)
  std::vector<double> busy;  // per stage: time computing
  // 1 - sum(busy) / (P * makespan): the share of stage-time spent waiting.
  double bubble_fraction = 0;
};

// Runs the lists with the given costs: each stage performs its actions in order, an
// action starting when the stage is free and what it waits for has happened (a forward
// its input's send, a backward its output gradient's send). Throws InvalidArgument naming
// a stage and action when the lists deadlock.
SimulatedRun simulate_schedule(const Schedule& schedule, const ActionCosts& costs = {});

// The bubble fraction theory gives with equal forward, input-gradient and weight-gradient
// times: GPipe and 1F1B (P-1)/(m+P-1); interleaved (P-1)/(v m + P-1); ZB-H1 Qi et al.'s
// (P-1)/(3m + P-1) for m >= P (makespan 3m + P - 1), and for m < P, where the 1F1B order
// makes the last stage alternate F and B, 1 - 3m/(2m + 2P - 1) (makespan 2m + 2P - 1: the
// last micro-batch's B leaves the last stage at P + 2m - 1, crosses P - 1 stages, and
// stage 0 runs its W; both expressions agree at m = P). build_schedule's lists simulate to
// exactly these with unit costs. ZB-V, in units of a chunk's F (= B = W): every stage busy
// from its first input (stage s's after s units) to the end, makespan 6m + P - 1, bubble
// (P-1)/(6m + P-1): half of ZB-H1's at the same memory; its lists reach it for m >= 2P.
double theoretical_bubble(const ScheduleSpec& spec);

}  // namespace etr
