#include "parallel/pipeline_engine.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>

#include "checkpoint/shard_plan.h"
#include "parallel/pipeline_calls.h"
#include "parallel/range_exchange.h"
#include "runtime/bytes.h"
#include "runtime/error.h"
#include "runtime/kernels/device_ops.h"
#include "runtime/mpi_check.h"
#include "runtime/mpi_wait.h"
#include "runtime/state_names.h"

namespace etr {

PipelineEngine::PipelineEngine(LayerStack<float>& model, std::vector<std::unique_ptr<Layer<float>>> layers,
                               const ProcessGrid& grid, HostAllocator& alloc, Allocator& work_alloc,
                               PipelineOptions options, const EngineFactory& make_engine, Tracer* tracer)
    : model_(model),
      grid_(grid),
      alloc_(alloc),
      options_(std::move(options)),
      cut_(model, options_.bounds, grid.pp_size(), options_.schedule.kind == ScheduleKind::kZeroBubbleV) {
  tracer_ = tracer;
  std::vector<PipelineChunk> run;
  for (int c = 0; c < cut_.virtual_stages(); ++c) {
    const int j = cut_.vstage(grid_.pp_rank(), c);
    chunks_.push_back(cut_.make_chunk(layers, j));
    chunks_.back()->set_context(model_.context());
    engines_.push_back(make_engine(*chunks_.back(), cut_.borrowed_numel(j)));
    run.push_back(PipelineChunk{j, chunks_.back().get(), engines_.back().get()});
  }
  executor_ = std::make_unique<PipelineExecutor>(cut_, grid_, std::move(run), work_alloc, tracer,
                                                 options_.device);
}

PipelineEngine::~PipelineEngine() = default;

void PipelineEngine::plan(int micro_batches, int64_t B, int64_t T) {
  ScheduleSpec spec = options_.schedule;
  spec.micro_batches = micro_batches;
  check_schedule_spec(spec);
  executor_->plan(build_schedule(spec), B, T);
  theory_ = simulate_schedule(executor_->schedule()).bubble_fraction;
  plan_B_ = B, plan_T_ = T;
  steps_planned_ = placements_ = 0;
  std::fill(std::begin(timed_), std::end(timed_), 0.0);
  adapt_pending_ = adapted_ = forced_ = false;
}

void PipelineEngine::adapt_list(const ActionCosts& costs) {
  costs_ = costs;
  adapt_pending_ = forced_ = true;
}

size_t PipelineEngine::planned_bytes(int micro_batches, int64_t B, int64_t T) const {
  ScheduleSpec spec = options_.schedule;
  spec.micro_batches = micro_batches;
  check_schedule_spec(spec);
  return executor_->bytes_for(build_schedule(spec), B, T);
}

Engine::WindowBytes PipelineEngine::predicted_windows(int micro_batches) const {
  WindowBytes w;
  for (const auto& e : engines_) {
    const WindowBytes c = e->predicted_windows(micro_batches);
    w.grads += c.grads;  // each chunk's window is its own
    w.params += c.params;
  }
  return w;
}

// states(): what each chunk's engine stages (the pipeline itself stages nothing).
size_t PipelineEngine::predicted_checkpoint_staging() const {
  size_t bytes = 0;
  for (const auto& e : engines_) bytes += e->predicted_checkpoint_staging();
  return bytes;
}

void PipelineEngine::run_step(std::span<const Batch> batches, std::span<const double> weights,
                              double* loss_sum) {
  if (adapt_pending_) {
    adapt_pending_ = false;
    Schedule list = list_at_costs(executor_->schedule().spec, costs_);
    if (list.stages != executor_->schedule().stages) {
      executor_->plan(list, plan_B_, plan_T_);
      adapted_ = list.stages != build_schedule(list.spec).stages;
      ++placements_;
    }
  }
  executor_->run(batches, weights, loss_sum);
}

void PipelineEngine::restored() {
  for (auto& e : engines_) e->restored();
}

void PipelineEngine::initialize_parameters(const std::function<void(const ParamLayout&, float*)>& init) {
  // The whole model's initial parameters on world rank 0 only (from the budget: an
  // initialisation draws its tensors in the model's order), moved into each chunk: its
  // own range in one exchange, then its borrowed tensors one by one (as many exchanges on
  // every rank: the most any virtual stage borrows).
  const ParamLayout& whole = model_.layout();
  Buffer all;
  std::vector<FlatPiece> pieces;
  if (grid_.rank() == 0) {
    all = Buffer(alloc_, static_cast<size_t>(whole.numel()) * sizeof(float));
    float* p = static_cast<float*>(all.data());
    std::memset(p, 0, all.size());
    if (init) init(whole, p);
    pieces.push_back({0, whole.numel(), p});
  }
  size_t most_borrowed = 0;
  for (int j = 0; j < cut_.num_vstages(); ++j) {
    size_t n = 0;
    for (const Tie& t : cut_.ties()) n += t.user_vstage == j;
    most_borrowed = std::max(most_borrowed, n);
  }
  for (size_t c = 0; c < engines_.size(); ++c) {
    const int j = cut_.vstage(grid_.pp_rank(), static_cast<int>(c));
    engines_[c]->initialize_parameters([&](const ParamLayout& l, float* p) {
      const auto [lo, hi] = cut_.own_range(j);
      exchange_pieces(grid_.world_group(), pieces, p + cut_.borrowed_numel(j), lo, hi);
      std::vector<const TensorEntry*> borrowed;
      for (const Tie& t : cut_.ties()) {
        if (t.user_vstage == j) borrowed.push_back(l.find(t.name));
      }
      for (size_t k = 0; k < most_borrowed; ++k) {
        const TensorEntry* w = k < borrowed.size() ? whole.find(borrowed[k]->name) : nullptr;
        exchange_pieces(grid_.world_group(), pieces, w ? p + borrowed[k]->offset : nullptr,
                        w ? w->offset : 0, w ? w->offset + w->numel() : 0);
      }
    });
  }
}

std::vector<std::vector<NamedState>> PipelineEngine::chunk_states() {
  std::vector<std::vector<NamedState>> out;
  for (auto& e : engines_) out.push_back(e->states());
  return out;
}

std::vector<StatePiece> PipelineEngine::own_pieces(const std::vector<std::vector<NamedState>>& held,
                                                   std::string_view name) const {
  std::vector<StatePiece> out;
  for (size_t c = 0; c < engines_.size(); ++c) {
    const int j = cut_.vstage(grid_.pp_rank(), static_cast<int>(c));
    const ParamLayout& l = chunks_[c]->layout();
    for (const NamedState& s : held[c]) {
      if (s.name != name) continue;
      for (const StatePiece& p : owned_pieces(s, l, grid_.dp_size(), grid_.dp_rank())) {
        const int64_t a = std::max(p.begin, cut_.borrowed_numel(j));
        if (a >= p.end) continue;
        const int64_t shift = cut_.own_offset(j);
        out.push_back(StatePiece{a + shift, p.end + shift, p.data + (a - p.begin)});
      }
    }
  }
  std::sort(out.begin(), out.end(),
            [](const StatePiece& x, const StatePiece& y) { return x.begin < y.begin; });
  return out;
}

void PipelineEngine::collect(const std::vector<std::vector<NamedState>>& held, std::string_view name,
                             float* out, int64_t begin, int64_t end) {
  std::vector<FlatPiece> pieces;
  for (const StatePiece& p : own_pieces(held, name)) pieces.push_back({p.begin, p.end, p.data});
  exchange_pieces(grid_.world_group(), pieces, out, begin, end);
}

// The owners are every rank's pieces, agreed once (gather_ranges over the world at the
// first call; the chunks' blocks do not move while the engine lives). Worked out from the
// chunk engines' owners, as own_pieces() takes them from the held states (which hold at
// least what their owners name), so without reading any state.
std::shared_ptr<const ShardOwners> PipelineEngine::checkpoint_owners() {
  if (owners_) return owners_;
  std::vector<std::pair<int64_t, int64_t>> mine;
  for (size_t c = 0; c < engines_.size(); ++c) {
    const int j = cut_.vstage(grid_.pp_rank(), static_cast<int>(c));
    const std::shared_ptr<const ShardOwners> chunk = engines_[c]->checkpoint_owners();
    const std::vector<std::pair<int64_t, int64_t>> owned =
        chunk ? chunk->at(static_cast<size_t>(grid_.dp_rank()))
              : std::vector{ShardPlan(chunks_[c]->layout(), grid_.dp_size(), {std::string(state::kParam)})
                                .flat_range(grid_.dp_rank())};
    for (const auto& [lo, hi] : owned) {
      const int64_t a = std::max(lo, cut_.borrowed_numel(j));
      if (a < hi) mine.emplace_back(a + cut_.own_offset(j), hi + cut_.own_offset(j));
    }
  }
  std::sort(mine.begin(), mine.end());
  std::vector<std::pair<int64_t, int64_t>> merged;
  for (const auto& r : mine) {
    if (!merged.empty() && merged.back().second == r.first) {
      merged.back().second = r.second;
    } else {
      merged.push_back(r);
    }
  }
  owners_ = std::make_shared<const ShardOwners>(gather_ranges(grid_.world_group(), merged));
  return owners_;
}

// Each rank writes the pieces it holds (no exchange).
std::vector<NamedState> PipelineEngine::states() {
  const auto held = chunk_states();
  std::vector<NamedState> out;
  for (std::string_view name : {state::kParam, state::kAdamM, state::kAdamV}) {
    out.emplace_back(std::string(name));
    out.back().pieces = own_pieces(held, name);
  }
  const std::shared_ptr<const ShardOwners> owners = checkpoint_owners();
  for (NamedState& s : out) s.owners = owners;
  return out;
}

void PipelineEngine::gather_state(std::string_view name, float* out) {
  std::fill(out, out + model_.layout().numel(), 0.0f);
  collect(chunk_states(), name, out, 0, model_.layout().numel());
}

std::vector<HeldState> PipelineEngine::held_states() {
  std::vector<HeldState> out;
  for (auto& e : engines_) {
    for (HeldState& h : e->held_states()) out.push_back(std::move(h));
  }
  return out;
}

void PipelineEngine::materialize_parameters() {
  for (auto& e : engines_) e->materialize_parameters();
  const int64_t n = model_.layout().numel();
  const bool root = grid_.rank() == 0;
  if (root && whole_params_.size() == 0) {
    whole_params_ = Buffer(alloc_, static_cast<size_t>(n) * sizeof(float));
    whole_grads_ = Buffer(alloc_, static_cast<size_t>(n) * sizeof(float));
    std::memset(whole_grads_.data(), 0, whole_grads_.size());
  }
  float* p = root ? static_cast<float*>(whole_params_.data()) : nullptr;
  collect(chunk_states(), state::kParam, p, 0, root ? n : 0);
  if (root) model_.bind(p, static_cast<float*>(whole_grads_.data()));
}

float* PipelineEngine::parameters() {
  if (grid_.rank() != 0 || whole_params_.size() == 0) {
    throw InvalidArgument("a pipeline's whole parameters are on world rank 0 after "
                          "materialize_parameters() only");
  }
  return static_cast<float*>(whole_params_.data());
}

float* PipelineEngine::gradients() { return engines_.back()->gradients(); }

EngineMemory PipelineEngine::memory() const {
  EngineMemory m = engines_.front()->memory();
  for (size_t c = 1; c < engines_.size(); ++c) {
    const EngineMemory o = engines_[c]->memory();
    m.psi += o.psi;
    m.params += o.params;
    m.grads += o.grads;
    m.optimizer += o.optimizer;
    m.gathered_peak = std::max(m.gathered_peak, o.gathered_peak);
    m.unreduced_peak += o.unreduced_peak;
    m.checkpoint_staging += o.checkpoint_staging;
  }
  return m;
}

std::string PipelineEngine::describe() const {
  std::string s = "pipeline " + std::string(schedule_name(options_.schedule.kind)) + ", " +
                  std::to_string(grid_.pp_size()) + " stages";
  if (cut_.virtual_stages() > 1) s += " x " + std::to_string(cut_.virtual_stages()) + " chunks";
  s += "; this rank's chunks: ";
  for (size_t c = 0; c < engines_.size(); ++c) {
    s += (c ? "; " : "") + engines_[c]->describe();
  }
  return s;
}

void PipelineEngine::begin_step() {
  begin_failure_.clear();
  for (auto& e : engines_) {
    try {
      e->begin_step();
    } catch (const OutOfMemory& x) {  // the step goes on, to be discarded at its end
      if (begin_failure_.empty()) begin_failure_ = x.what();
      e->finish_begin_step();
    }
  }
}

void PipelineEngine::begin_backward(bool) {
  throw InvalidArgument("a pipeline's backward is run by its executor (run_step), not layer by layer");
}

void PipelineEngine::layer_grads_final(int) {
  throw InvalidArgument("a pipeline's backward is run by its executor (run_step), not layer by layer");
}

ReduceStats PipelineEngine::end_backward() {
  ReduceStats s;
  for (auto& e : engines_) s += e->end_backward();
  sync_ties();
  return s;
}

std::vector<GradRange> PipelineEngine::reduced_gradients(bool) {
  throw InvalidArgument("a pipeline's gradients are in its chunks' layouts; ask chunk_engine(c)");
}

void PipelineEngine::sync_ties() {
  if (cut_.ties().empty()) return;
  // On a device the owner's reduced gradients are downloaded first and the sums uploaded
  // into the user's copy after (host memory: both read and written in place).
  const DeviceOps& ops = device_ops(options_.device ? options_.device->device : Device::cpu());
  void* stream = options_.device ? options_.device->stream : nullptr;
  // The ties side by side in one index space: tie i at [base[i], base[i] + numel).
  std::vector<int64_t> base(cut_.ties().size() + 1, 0);
  for (size_t i = 0; i < cut_.ties().size(); ++i) {
    base[i + 1] = base[i] + model_.layout().find(cut_.ties()[i].name)->numel();
  }
  std::vector<FlatPiece> pieces;
  bool user = false;
  for (size_t c = 0; c < engines_.size(); ++c) {
    const int j = cut_.vstage(grid_.pp_rank(), static_cast<int>(c));
    for (size_t i = 0; i < cut_.ties().size(); ++i) {
      const Tie& t = cut_.ties()[i];
      user = user || t.user_vstage == j;
      if (t.owner_vstage != j) continue;
      const int64_t at = chunks_[c]->layout().find(t.name)->offset, n = base[i + 1] - base[i];
      for (const GradRange& g : engines_[c]->reduced_gradients(true)) {
        const int64_t lo = std::max(at, g.range.begin), hi = std::min(at + n, g.range.end);
        if (lo < hi) pieces.push_back({base[i] + lo - at, base[i] + hi - at, g.data + (lo - g.range.begin)});
      }
    }
  }
  std::vector<float> owned;  // a device's pieces, downloaded
  if (options_.device) {
    int64_t total = 0;
    for (const FlatPiece& p : pieces) total += p.end - p.begin;
    owned.resize(static_cast<size_t>(total));
    float* at = owned.data();
    for (FlatPiece& p : pieces) {
      ops.download(at, p.data, static_cast<size_t>(p.end - p.begin) * sizeof(float), stream);
      p.data = at;
      at += p.end - p.begin;
    }
    ops.synchronize(stream);
  }
  std::vector<float> owners(user ? static_cast<size_t>(base.back()) : 0);
  exchange_pieces(grid_.world_group(), pieces, owners.data(), 0, user ? base.back() : 0);
  for (size_t c = 0; user && c < engines_.size(); ++c) {
    const int j = cut_.vstage(grid_.pp_rank(), static_cast<int>(c));
    for (size_t i = 0; i < cut_.ties().size(); ++i) {
      if (cut_.ties()[i].user_vstage != j) continue;
      const int64_t at = chunks_[c]->layout().find(cut_.ties()[i].name)->offset, n = base[i + 1] - base[i];
      for (const GradRange& g : engines_[c]->reduced_gradients(false)) {
        const int64_t lo = std::max(at, g.range.begin), hi = std::min(at + n, g.range.end);
        if (lo < hi) {
          ops.upload(g.data + (lo - g.range.begin), owners.data() + base[i] + (lo - at),
                     static_cast<size_t>(hi - lo) * sizeof(float), stream);
        }
      }
    }
  }
  ops.synchronize(stream);  // (before `owners` goes)
}

double PipelineEngine::grad_norm() {
  // The squares, and this stage's F, B, W seconds and counts of the step (ZB-V's times).
  const PipelineStepStats& t = executor_->last_step();
  double sums[7] = {0, t.forward_seconds, double(t.forwards), t.input_grad_seconds, double(t.input_grads),
                    t.weight_grad_seconds, double(t.weight_grads)};
  for (auto& e : engines_) {
    const double n = e->grad_norm();
    sums[0] += n * n;
  }
  const auto t0 = std::chrono::steady_clock::now();
  Tracer::Scope span(tracer_, TraceTrack::kWait, "gradient norm over stages", "pipeline");  // with the flush
  MPI_Request r = MPI_REQUEST_NULL;  // with the collectives' timeout: a stuck stage is an error
  MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, sums, 7, MPI_DOUBLE, MPI_SUM, grid_.pp_group().comm(), &r));
  wait_with_timeout(r, "the gradient norm's sum over the pipeline stages");
  norm_wait_seconds_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  // Every stage sees the same sums, so all rebuild the same list at the same step. The
  // second step's times: the first's carry first touches and warm-up. A step that met an
  // out-of-memory error ran no compute (its counts fall short).
  const ScheduleSpec& spec = executor_->schedule().spec;
  const double actions = double(spec.stages) * spec.virtual_stages * spec.micro_batches;
  if (spec.kind == ScheduleKind::kZeroBubbleV && !forced_ && ++steps_planned_ >= 2 && sums[2] == actions &&
      sums[4] == actions && sums[6] == actions) {
    for (int k = 0; k < 6; ++k) timed_[k] += sums[k + 1];
    // Steps 2, 4, 8, 16, ... of the plan: the means over its steps from the second on.
    if ((steps_planned_ & (steps_planned_ - 1)) == 0) {
      costs_ = ActionCosts{timed_[0] / timed_[1], timed_[2] / timed_[3], timed_[4] / timed_[5], 0};
      adapt_pending_ = true;
    }
  }
  return std::sqrt(sums[0]);
}


void PipelineEngine::optimizer_step(const OptimizerStep& step) {
  for (auto& e : engines_) e->optimizer_step(step);
}

}  // namespace etr
