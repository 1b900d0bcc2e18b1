#include "parallel/pipeline_executor.h"

#include <algorithm>
#include <chrono>

#include "parallel/pipeline_calls.h"
#include "runtime/error.h"

namespace etr {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Tags: transfers 0 .. 2 m (P v) - 1, then the ties from kTieTag: within 32767, the upper
// bound of tags every MPI guarantees.
// A trace scope (nothing without a tracer).
Tracer::Scope scope_of(Tracer* t, TraceTrack track, std::string name, const char* category) {
  return t ? t->scope(track, std::move(name), category) : Tracer::Scope(nullptr, track, {}, nullptr);
}

std::string what(const char* op, const PipeAction& a) {
  return std::string(op) + " mb " + std::to_string(a.micro_batch) + " chunk " + std::to_string(a.chunk);
}

constexpr int kTieTag = 32767 - 255;

void timed_wait(PipeRequest& r, double& seconds, Tracer* tracer = nullptr, const char* name = nullptr) {
  if (r.done()) return;
  auto span = scope_of(name ? tracer : nullptr, TraceTrack::kWait, name ? name : "", "pipeline");
  const auto t0 = Clock::now();
  r.wait();
  seconds += seconds_since(t0);
}

}  // namespace

// A tied parameter's gradient exchange on one side.
struct TieSide {
  int64_t offset = 0, numel = 0;  // in the chunk's layout
  int layer = 0;                  // the chunk's layer whose "final" it precedes
  bool owner = false;
  int peer = 0;                   // in the pp group
  int tag = 0;
  std::vector<float> mine;  // the user's part, sent from a copy (host memory)
  Buffer theirs;            // the owner's: the user's part as received (planned)
  PipeRequestPtr sent;
  bool exchanged = false;  // this step
};

struct PipelineExecutor::ChunkState {
  PipelineChunk c;
  bool first = false, last = false;  // the model's first / last virtual stage
  int64_t in_max = 0, out_max = 0;   // elements for a micro-batch of B x T
  std::vector<Buffer> inputs, douts, dins;
  std::vector<int> free_slots, free_inputs, free_douts;
  std::vector<int> slot_of, input_of, dout_of;  // per micro-batch (-1: none)
  std::vector<PipeRequestPtr> recv_in, recv_dout;  // per micro-batch
  std::vector<PipeRequestPtr> act_sent, grad_sent;  // per slot
  std::vector<uint8_t> weights_done, grad_posted;  // per micro-batch, this step
  size_t final_backward = 0;                    // index of the step's last backward
  std::vector<TieSide> ties;
  std::vector<EngineCall> calls;  // the step's engine calls, in order (pipeline_calls.h)
  std::vector<size_t> calls_end;  // per list index: the end of its action's calls
  size_t made = 0;                // calls made this step
};

PipelineExecutor::PipelineExecutor(const PipelineCut& cut, const ProcessGrid& grid,
                                   std::vector<PipelineChunk> chunks, Allocator& alloc,
                                   Tracer* tracer, std::optional<PipeDevice> device)
    : cut_(cut),
      grid_(grid),
      alloc_(alloc),
      tracer_(tracer),
      ops_(device_ops(device ? device->device : Device::cpu())),
      stream_(device ? device->stream : nullptr) {
  if (cut_.ties().size() > 255) {  // their tags: kTieTag .. 32767
    throw InvalidArgument("a pipeline takes at most 255 tied parameters across stages, not " +
                          std::to_string(cut_.ties().size()));
  }
  link_ = std::make_unique<PipeLink>(grid_.pp_group(), device);
  for (const PipelineChunk& c : chunks) {
    auto s = std::make_unique<ChunkState>();
    s->c = c;
    s->first = c.vstage == 0;
    s->last = c.vstage == cut_.num_vstages() - 1;
    const ParamLayout& l = c.stack->layout();
    for (size_t i = 0; i < cut_.ties().size(); ++i) {
      const Tie& t = cut_.ties()[i];
      if (t.owner_vstage != c.vstage && t.user_vstage != c.vstage) continue;
      TieSide side;
      side.owner = t.owner_vstage == c.vstage;
      const TensorEntry& e = *l.find(t.name);
      side.offset = e.offset;
      side.numel = e.numel();
      side.layer = side.owner ? e.layer : 0;
      side.peer = cut_.stage_of(side.owner ? t.user_vstage : t.owner_vstage);
      side.tag = kTieTag + static_cast<int>(i);
      s->ties.push_back(std::move(side));
    }
    chunks_.push_back(std::move(s));
  }
}

PipelineExecutor::~PipelineExecutor() = default;

int64_t PipelineExecutor::max_micro_batches(int64_t vstages) {
  return kTieTag / 2 / std::max<int64_t>(1, vstages);
}

int PipelineExecutor::tag(int mb, int vstage, bool grad) const {
  return (mb * cut_.num_vstages() + vstage) * 2 + (grad ? 1 : 0);
}

size_t PipelineExecutor::bytes_for(const Schedule& schedule, int64_t B, int64_t T) const {
  const std::vector<PipeAction>& list = schedule.stages.at(static_cast<size_t>(grid_.pp_rank()));
  const int m = schedule.spec.micro_batches;
  bool split = false;
  for (const PipeAction& x : list) split = split || x.op == PipeOp::kBackwardInput;
  size_t bytes = 0;
  for (size_t k = 0; k < chunks_.size(); ++k) {
    const ChunkState& c = *chunks_[k];
    const Needs needs = needs_of(list, static_cast<int>(k), m, c.first);
    const int slots = std::max(1, needs.slots);
    bytes += c.c.stack->activation_bytes(B, T, slots, split);
    const int64_t in = c.first ? 0 : cut_.input_numel(c.c.vstage, B, T);
    const int64_t out = c.last ? 0 : c.c.stack->layer(c.c.stack->size() - 1).output_numel(B, T);
    bytes += static_cast<size_t>(in * needs.inputs + out * needs.douts + in * slots) * sizeof(float);
    for (const TieSide& t : c.ties) bytes += t.owner ? static_cast<size_t>(t.numel) * sizeof(float) : 0;
  }
  return bytes;
}

void PipelineExecutor::plan(const Schedule& schedule, int64_t B, int64_t T) {
  validate_schedule(schedule);
  schedule_ = schedule;
  planned_bytes_ = 0;
  const std::vector<PipeAction>& list = schedule_.stages.at(static_cast<size_t>(grid_.pp_rank()));
  slots_.clear();
  const int m = schedule_.spec.micro_batches;
  if (m > max_micro_batches(cut_.num_vstages())) {
    throw ConfigError("a pipeline of " + std::to_string(cut_.num_vstages()) + " virtual stages runs at most " +
                      std::to_string(max_micro_batches(cut_.num_vstages())) +
                      " micro-batches per step, not " + std::to_string(m) + "; raise batch.micro_batch.");
  }
  bool split = false;  // the schedule splits backward into B and W (ZB-H1)
  for (const PipeAction& x : list) split = split || x.op == PipeOp::kBackwardInput;
  for (size_t k = 0; k < chunks_.size(); ++k) {
    ChunkState& c = *chunks_[k];
    const int chunk = static_cast<int>(k);
    const Needs needs = needs_of(list, chunk, m, c.first);
    const int slots = std::max(1, needs.slots);
    slots_.push_back(slots);
    c.c.stack->plan(alloc_, B, T, slots, split);
    planned_bytes_ += c.c.stack->activation_bytes(B, T, slots, split);
    c.in_max = cut_.input_numel(c.c.vstage, B, T);
    c.out_max = c.c.stack->layer(c.c.stack->size() - 1).output_numel(B, T);
    auto pool = [&](std::vector<Buffer>& v, int64_t numel, int count) {
      v.clear();
      if (numel == 0) return;
      for (int i = 0; i < count; ++i) v.emplace_back(alloc_, static_cast<size_t>(numel) * sizeof(float));
      planned_bytes_ += static_cast<size_t>(numel * count) * sizeof(float);
    };
    pool(c.inputs, c.first ? 0 : c.in_max, needs.inputs);
    pool(c.douts, c.last ? 0 : c.out_max, needs.douts);
    pool(c.dins, c.first ? 0 : c.in_max, slots);
    for (TieSide& t : c.ties) {  // the owner's receive buffer of the user's part
      if (!t.owner || t.theirs.size() > 0) continue;
      t.theirs = Buffer(alloc_, static_cast<size_t>(t.numel) * sizeof(float));
    }
    for (const TieSide& t : c.ties) planned_bytes_ += t.theirs.size();
    c.act_sent.assign(static_cast<size_t>(slots), nullptr);
    c.grad_sent.assign(static_cast<size_t>(slots), nullptr);
    c.final_backward = 0;
    for (size_t i = 0; i < list.size(); ++i) {
      const PipeOp op = list[i].op;
      if (list[i].chunk == chunk && (op == PipeOp::kBackward || op == PipeOp::kBackwardWeight)) {
        c.final_backward = i;
      }
    }
    c.calls.clear();
    c.calls_end.assign(list.size(), 0);
    for (size_t i = 0; i < list.size(); ++i) {
      if (list[i].chunk != chunk) continue;
      append_engine_calls(list[i], c.c.stack->size(), i == c.final_backward, c.calls);
      c.calls_end[i] = c.calls.size();
    }
    c.slot_of.assign(static_cast<size_t>(m), -1);
    c.input_of.assign(static_cast<size_t>(m), -1);
    c.dout_of.assign(static_cast<size_t>(m), -1);
    c.recv_in.assign(static_cast<size_t>(m), nullptr);
    c.recv_dout.assign(static_cast<size_t>(m), nullptr);
  }
}

// The engine's hooks, each call counted (only the step's last backward makes gradients final).
StackHooks PipelineExecutor::hooks_for(ChunkState& c, bool final) {
  StackHooks h;
  h.before_forward = [this, &c](int layer) { make_call(c, {EngineCallKind::kBeforeForward, layer, false}); };
  h.before_backward = [this, &c](int layer) { make_call(c, {EngineCallKind::kBeforeBackward, layer, false}); };
  if (final) {
    h.after_backward = [this, &c](int layer) { make_call(c, {EngineCallKind::kAfterBackward, layer, true}); };
  }
  return h;
}

void PipelineExecutor::make_call(ChunkState& c, const EngineCall& call) {
  Engine& e = *c.c.engine;
  auto span = scope_of(tracer_, TraceTrack::kComm, tracer_ ? engine_call_name(call) : std::string(), "pipeline");
  const auto t0 = Clock::now();
  switch (call.kind) {
    case EngineCallKind::kBeforeForward: e.before_forward(call.layer); break;
    case EngineCallKind::kBeginBackward: e.begin_backward(call.final); break;
    case EngineCallKind::kBeforeBackward: e.before_backward(call.layer); break;
    case EngineCallKind::kAfterBackward:
      for (TieSide& t : c.ties) {
        if (t.layer == call.layer && !t.exchanged) exchange_tie(c, t);
      }
      e.layer_grads_final(call.layer);
      break;
  }
  stats_.engine_seconds += seconds_since(t0);
  ++c.made;  // (a call that threw is not made: complete_calls makes it again)
}

void PipelineExecutor::complete_calls(ChunkState& c, size_t index) {
  const size_t end = c.calls_end.at(index);
  while (c.made < end) make_call(c, c.calls[c.made]);
}

void PipelineExecutor::fail(const OutOfMemory& e) {
  if (failure_.empty()) failure_ = e.what();
}

void PipelineExecutor::exchange_tie(ChunkState& c, TieSide& t) {
  // The user's part goes to the owner, which adds it before its data-parallel reduction
  // (the user's own copy is overwritten by the owner's reduced sum after the step's
  // reductions: PipelineEngine::sync_ties).
  // The engine's reduction may sum the user's gradients in place before the send is over:
  // on the host it goes from a copy; on a device its download is enqueued before the
  // reduction's (after this hook) on the compute stream.
  float* g = c.c.engine->gradients();
  if (!t.owner) {
    const float* from = g + t.offset;
    if (!link_->staged()) {
      t.mine.assign(from, from + t.numel);
      from = t.mine.data();
    }
    t.sent = link_->send(from, t.numel, t.peer, t.tag, "tied gradient");
    t.exchanged = true;
    return;
  }
  // Sent at the user's final backward, which the owner's last backward depends on.
  float* p = static_cast<float*>(t.theirs.data());
  link_->recv(p, t.numel, t.peer, t.tag, "tied gradient")->wait();
  ops_.add(g + t.offset, p, t.numel, stream_);
  t.exchanged = true;
}

void PipelineExecutor::finish_ties() {
  for (auto& c : chunks_) {
    for (TieSide& t : c->ties) {
      if (t.sent) t.sent->wait();
      t.sent.reset();
    }
  }
}

void PipelineExecutor::post_recv(const PipeAction& a, bool grad) {
  ChunkState& c = *chunks_.at(static_cast<size_t>(a.chunk));
  const size_t mb = static_cast<size_t>(a.micro_batch);
  std::vector<int>& free = grad ? c.free_douts : c.free_inputs;
  if (free.empty()) throw InvalidArgument("pipeline: no free receive buffer (the schedule holds too many)");
  const int buf = free.back();
  free.pop_back();
  (grad ? c.dout_of : c.input_of)[mb] = buf;
  const int64_t numel = grad ? c.out_max : c.in_max;  // whole buffers: sizes agree on both sides
  float* p = static_cast<float*>((grad ? c.douts : c.inputs)[static_cast<size_t>(buf)].data());
  const int from_vstage = c.c.vstage + (grad ? 1 : -1);
  auto span = scope_of(tracer_, TraceTrack::kComm,
                       tracer_ ? what(grad ? "post receive gradient" : "post receive activation", a) : "",
                       "pipeline");
  const auto t0 = Clock::now();
  (grad ? c.recv_dout : c.recv_in)[mb] =
      link_->recv(p, numel, cut_.stage_of(from_vstage), tag(a.micro_batch, c.c.vstage, grad),
                  what(grad ? "gradient" : "activation", a));
  stats_.transfer_seconds += seconds_since(t0);
}

void PipelineExecutor::send(const PipeAction& a, bool grad) {
  ChunkState& c = *chunks_.at(static_cast<size_t>(a.chunk));
  const int slot = c.slot_of[static_cast<size_t>(a.micro_batch)];
  const int64_t numel = grad ? c.in_max : c.out_max;
  const float* p = grad ? static_cast<const float*>(c.dins[static_cast<size_t>(slot)].data())
                        : c.c.stack->output(slot);
  const int to_vstage = c.c.vstage + (grad ? -1 : 1);
  {
    auto span = scope_of(tracer_, TraceTrack::kComm, tracer_ ? what(grad ? "send gradient" : "send activation", a) : "",
                         "pipeline");
    const auto t0 = Clock::now();
    (grad ? c.grad_sent : c.act_sent)[static_cast<size_t>(slot)] =
        link_->send(p, numel, cut_.stage_of(to_vstage), tag(a.micro_batch, to_vstage, grad),
                    what(grad ? "gradient" : "activation", a));
    stats_.transfer_seconds += seconds_since(t0);
  }
  if (grad) {
    c.grad_posted[static_cast<size_t>(a.micro_batch)] = 1;
    release_if_done(c, a.micro_batch);
  }
}

void PipelineExecutor::forward(const PipeAction& a, size_t index, std::span<const Batch> batches,
                               std::span<const double> weights, double* loss_sum) {
  ChunkState& c = *chunks_.at(static_cast<size_t>(a.chunk));
  const size_t mb = static_cast<size_t>(a.micro_batch);
  if (c.free_slots.empty()) throw InvalidArgument("pipeline: no free activation slot");
  const int slot = c.free_slots.back();
  c.free_slots.pop_back();
  c.slot_of[mb] = slot;
  if (PipeRequestPtr& w = c.act_sent[static_cast<size_t>(slot)]) {
    timed_wait(*w, stats_.send_wait_seconds, tracer_, "wait send activation");
  }
  const float* input = nullptr;
  if (!c.first) {
    auto wait = scope_of(tracer_, TraceTrack::kWait, what("wait activation", a), "pipeline");
    timed_wait(*c.recv_in[mb], stats_.recv_wait_seconds);
    input = static_cast<const float*>(c.inputs[static_cast<size_t>(c.input_of[mb])].data());
  }
  Batch b = batches[mb];
  if (!c.first) b.tokens = nullptr;
  if (!c.last) b.targets = nullptr;
  if (failure_.empty()) {
    auto span = scope_of(tracer_, TraceTrack::kCompute, what("forward", a), "pipeline");
    const auto t0 = Clock::now();
    try {
      if (c.last) {
        c.c.stack->forward_accumulate(b, loss_sum, weights[mb], 1.0, hooks_for(c, false), slot, input);
      } else {
        c.c.stack->forward(b, hooks_for(c, false), slot, input);
      }
    } catch (const OutOfMemory& e) {
      fail(e);
    }
    const double took = seconds_since(t0);
    stats_.compute_seconds += took;
    stats_.forward_seconds += took;
    ++stats_.forwards;
  }
  if (!failure_.empty()) complete_calls(c, index);  // no compute: the calls only
}

void PipelineExecutor::backward(const PipeAction& a, size_t index, std::span<const Batch> batches) {
  ChunkState& c = *chunks_.at(static_cast<size_t>(a.chunk));
  const size_t mb = static_cast<size_t>(a.micro_batch);
  const int slot = c.slot_of[mb];
  const bool weights_only = a.op == PipeOp::kBackwardWeight;
  const float* dout = nullptr;
  float* din = nullptr;
  if (!weights_only && !c.last) {
    auto wait = scope_of(tracer_, TraceTrack::kWait, what("wait gradient", a), "pipeline");
    timed_wait(*c.recv_dout[mb], stats_.recv_wait_seconds);
    dout = static_cast<const float*>(c.douts[static_cast<size_t>(c.dout_of[mb])].data());
  }
  if (!weights_only && !c.first) {
    if (PipeRequestPtr& w = c.grad_sent[static_cast<size_t>(slot)]) {
      timed_wait(*w, stats_.send_wait_seconds, tracer_, "wait send gradient");
    }
    din = static_cast<float*>(c.dins[static_cast<size_t>(slot)].data());
    ops_.zero(din, static_cast<size_t>(c.in_max) * sizeof(float), stream_);
  }
  // The step's last backward (or W) of the chunk makes its gradients final.
  const bool final = index == c.final_backward;
  Batch b = batches[mb];
  if (!c.first) b.tokens = nullptr;
  if (!c.last) b.targets = nullptr;
  if (failure_.empty()) {
    auto span = scope_of(tracer_, TraceTrack::kCompute,
                         what(a.op == PipeOp::kBackward ? "backward" : weights_only ? "W" : "B", a),
                         "pipeline");
    const auto t0 = Clock::now();
    try {
      if (a.op != PipeOp::kBackwardInput) make_call(c, {EngineCallKind::kBeginBackward, 0, final});
      if (a.op == PipeOp::kBackward) c.c.stack->backward(b, hooks_for(c, final), slot, dout, din);
      if (a.op == PipeOp::kBackwardInput) c.c.stack->backward_input(b, hooks_for(c, false), slot, dout, din);
      if (weights_only) c.c.stack->backward_weight(b, hooks_for(c, final), slot);
    } catch (const OutOfMemory& e) {
      fail(e);
    }
    const double took = seconds_since(t0);
    stats_.compute_seconds += took;
    if (a.op == PipeOp::kBackward) stats_.backward_seconds += took, ++stats_.backwards;
    if (a.op == PipeOp::kBackwardInput) stats_.input_grad_seconds += took, ++stats_.input_grads;
    if (weights_only) stats_.weight_grad_seconds += took, ++stats_.weight_grads;
  }
  if (!failure_.empty()) complete_calls(c, index);  // no compute: the calls only
  if (!weights_only && !c.last) c.free_douts.push_back(c.dout_of[mb]);  // W keeps what it needs
  if (a.op != PipeOp::kBackwardInput) c.weights_done[mb] = 1;
  release_if_done(c, a.micro_batch);
}

void PipelineExecutor::release_if_done(ChunkState& c, int micro_batch) {
  // A micro-batch's slot (and input) is free once its weight gradients are computed and
  // its input gradient is on its way (nothing to send on virtual stage 0).
  const size_t mb = static_cast<size_t>(micro_batch);
  if (!c.weights_done[mb] || !(c.first || c.grad_posted[mb]) || c.slot_of[mb] < 0) return;
  c.free_slots.push_back(c.slot_of[mb]);
  c.slot_of[mb] = -1;
  if (!c.first) c.free_inputs.push_back(c.input_of[mb]);
}

void PipelineExecutor::run(std::span<const Batch> batches, std::span<const double> weights,
                           double* loss_sum) {
  const int m = schedule_.spec.micro_batches;
  if (static_cast<int>(batches.size()) != m || static_cast<int>(weights.size()) != m) {
    throw InvalidArgument("pipeline: the step has " + std::to_string(batches.size()) +
                          " micro-batches but the schedule was planned for " + std::to_string(m));
  }
  for (auto& cp : chunks_) {
    ChunkState& c = *cp;
    auto reset = [](std::vector<int>& v, size_t n) {
      v.clear();
      for (size_t i = n; i-- > 0;) v.push_back(static_cast<int>(i));
    };
    reset(c.free_slots, c.act_sent.size());
    reset(c.free_inputs, c.inputs.size());
    reset(c.free_douts, c.douts.size());
    c.weights_done.assign(c.slot_of.size(), 0);
    c.grad_posted.assign(c.slot_of.size(), 0);
    std::fill(c.slot_of.begin(), c.slot_of.end(), -1);
    c.made = 0;
    for (TieSide& t : c.ties) t.exchanged = false;
  }
  stats_ = {};
  failure_.clear();
  const auto t0 = Clock::now();
  const std::vector<PipeAction>& list = schedule_.stages.at(static_cast<size_t>(grid_.pp_rank()));
  for (size_t i = 0; i < list.size(); ++i) {
    const PipeAction& a = list[i];
    switch (a.op) {
      case PipeOp::kRecvActivation: post_recv(a, false); break;
      case PipeOp::kForward: forward(a, i, batches, weights, loss_sum); break;
      case PipeOp::kSendActivation: send(a, false); break;
      case PipeOp::kRecvGrad: post_recv(a, true); break;
      case PipeOp::kBackward:
      case PipeOp::kBackwardInput:
      case PipeOp::kBackwardWeight: backward(a, i, batches); break;
      case PipeOp::kSendGrad: send(a, true); break;
      case PipeOp::kOptimizerStep: finish_ties(); break;
    }
  }
  for (auto& cp : chunks_) {
    for (PipeRequestPtr& w : cp->act_sent) if (w) timed_wait(*w, stats_.send_wait_seconds, tracer_, "wait sends");
    for (PipeRequestPtr& w : cp->grad_sent) if (w) timed_wait(*w, stats_.send_wait_seconds, tracer_, "wait sends");
  }
  stats_.wall_seconds = seconds_since(t0);
}

double PipelineExecutor::forward_only(const Batch& batch) {
  double loss = 0;
  // Sends are waited for at the end: in a V the turn's stage sends to itself, and its
  // receive is posted only at the next chunk.
  std::vector<PipeRequestPtr> sent;
  for (auto& cp : chunks_) {  // in virtual-stage order (each rank's chunks ascend)
    ChunkState& c = *cp;
    const int64_t in = cut_.input_numel(c.c.vstage, batch.B, batch.T);
    const float* input = nullptr;
    if (!c.first) {
      float* p = static_cast<float*>(c.inputs.at(0).data());
      link_->recv(p, in, cut_.stage_of(c.c.vstage - 1), tag(0, c.c.vstage, false),
                  "evaluation activation")->wait();
      input = p;
    }
    Batch b = batch;
    if (!c.first) b.tokens = nullptr;
    if (!c.last) b.targets = nullptr;
    const double l = c.c.stack->forward(b, {}, 0, input);
    if (c.last) loss = l;
    if (!c.last) {
      const int64_t out = c.c.stack->layer(c.c.stack->size() - 1).output_numel(batch.B, batch.T);
      sent.push_back(link_->send(c.c.stack->output(0), out, cut_.stage_of(c.c.vstage + 1),
                                 tag(0, c.c.vstage + 1, false), "evaluation activation"));
    }
  }
  for (PipeRequestPtr& r : sent) r->wait();
  return loss;
}

}  // namespace etr
