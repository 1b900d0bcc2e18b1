// What a pipeline chunk's step list asks of the executor: the buffers it holds at most
// (needs_of), and the engine calls of the step, in order (parallel/pipeline_executor.h), so
// that a rank whose compute failed part-way through a step (out of memory: a ZeRO window,
// a device buffer, anything) can make the calls it has not made yet without computing,
// as EngineCallLog (parallel/engine_call_log.h) does for one stack: its dp peers meet it in
// every collective those calls start, and its pipeline neighbours get their transfers
// (with bytes that do not matter: every rank discards the step).
//
// A chunk of L layers makes, for each of its compute actions in list order:
//   kForward         before_forward(0) .. before_forward(L-1)
//   kBackward        begin_backward(final), then for layer L-1 .. 0: before_backward,
//                    and after_backward (the tied gradient's exchange at its layer, then
//                    layer_grads_final) when `final`
//   kBackwardInput   before_backward(L-1) .. before_backward(0)
//   kBackwardWeight  as kBackward
// where `final` is true for the chunk's last backward (or W) of the step.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "parallel/pipeline_schedule.h"

namespace etr {

enum class EngineCallKind : uint8_t { kBeforeForward, kBeginBackward, kBeforeBackward, kAfterBackward };

struct EngineCall {
  EngineCallKind kind = EngineCallKind::kBeforeForward;
  int layer = 0;       // kBeginBackward: none
  bool final = false;  // kBeginBackward: the argument
};

// "before_forward layer 3", "begin_backward": a trace span's name.
std::string engine_call_name(const EngineCall& call);

// What chunk `chunk` holds at most at once, in list order, as the executor takes and frees
// it: activation slots (a forward to its weight gradients and, but on the model's first
// virtual stage, its input gradient's send), received inputs (the receive's post to the
// same), and received output gradients (the post to the backward, or B, that reads it).
struct Needs {
  int slots = 0, inputs = 0, douts = 0;
};
Needs needs_of(const std::vector<PipeAction>& list, int chunk, int m, bool first);

// The lists to run when a chunk's F, B and W take `costs`: build_schedule(spec, costs)
// where that simulates to a shorter step at those times than the unit-time list and needs
// no more buffers on any stage and chunk (needs_of, so the memory planned for the unit
// list holds); else the unit-time list. A pure function: every stage picks the same.
Schedule list_at_costs(const ScheduleSpec& spec, const ActionCosts& costs);

// Appends the calls compute action `a` makes on a chunk of `layers` layers.
void append_engine_calls(const PipeAction& a, int layers, bool final, std::vector<EngineCall>& out);

}  // namespace etr
