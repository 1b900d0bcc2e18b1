#include "bench/collective_bench.h"

#include <algorithm>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "bench/bench_context.h"
#include "bench/collective_model.h"
#include "bench/collective_settings.h"
#include "bench/memory_bandwidth.h"
#include "bench/mpi_reference.h"
#include "bench/premise.h"
#include "bench/table.h"
#include "bench/test_pattern.h"
#include "collectives/comm_options.h"
#include "collectives/host_communicator.h"
#include "runtime/allocator.h"
#include "runtime/bytes.h"
#include "runtime/error.h"
#include "runtime/host_allocator.h"
#include "runtime/mpi_check.h"

namespace etr::bench {

namespace {

constexpr double kCalibrateSeconds = 5e-3;  // a calibration batch lasts at least this
constexpr double kRepSeconds = 20e-3;       // a timed repetition lasts at least this
constexpr int kStreamReps = 5;
constexpr size_t kCacheBytes = size_t{32} << 20;  // L3 (docs/machine_notes.md); %ceil from here on

// ---------------------------------------------------------------------------------------
// Measurement

using Op = std::function<void()>;

struct Buffers {
  HostAllocator alloc;
  Buffer in, out, check;  // [in_count], [out_count], [out_count] of the largest size
};

// Allocates for the largest size and touches every byte (first touch is slow here).
// Collective: an allocation failure on any rank stops every rank.
std::unique_ptr<Buffers> allocate_buffers(const BenchContext& ctx, DType dtype, const Point& p) {
  auto b = std::make_unique<Buffers>();
  std::string error;
  try {
    size_t esize = dtype_size(dtype);
    b->in = Buffer(b->alloc, static_cast<size_t>(p.in_count) * esize);
    b->out = Buffer(b->alloc, static_cast<size_t>(p.out_count) * esize);
    b->check = Buffer(b->alloc, static_cast<size_t>(p.out_count) * esize);
    fill_pattern(b->in.view(dtype), ctx.rank());
    std::memset(b->out.data(), 0, b->out.size());
    std::memset(b->check.data(), 0, b->check.size());
  } catch (const OutOfMemory& e) {
    error = e.what();
  }
  ctx.agree(error);
  return b;
}

// etr's op or MPI's, writing into `out`.
Op make_etr_op(Kind k, HostCommunicator& comm, ReduceOp op, TensorView in, TensorView out) {
  switch (k) {
    case Kind::kAllreduce:
      return [&comm, op, in, out] { comm.allreduce(in, out, op)->wait(); };
    case Kind::kReduceScatter:
      return [&comm, op, in, out] { comm.reduce_scatter(in, out, op)->wait(); };
    case Kind::kAllgather:
      return [&comm, in, out] { comm.allgather(in, out)->wait(); };
  }
  return {};
}

Op make_mpi_op(Kind k, MPI_Comm comm, const MpiReference& ref, TensorView in, TensorView out) {
  MPI_Datatype type = ref.type();
  MPI_Op op = ref.op();
  switch (k) {
    case Kind::kAllreduce:
      return [=] {
        MPI_CHECK(
            MPI_Allreduce(in.data(), out.data(), static_cast<int>(in.numel()), type, op, comm));
      };
    case Kind::kReduceScatter:
      return [=] {
        MPI_CHECK(MPI_Reduce_scatter_block(in.data(), out.data(), static_cast<int>(out.numel()),
                                           type, op, comm));
      };
    case Kind::kAllgather:
      return [=] {
        MPI_CHECK(MPI_Allgather(in.data(), static_cast<int>(in.numel()), type, out.data(),
                                static_cast<int>(in.numel()), type, comm));
      };
  }
  return {};
}

double seconds_of(int k, const Op& op) {
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < k; ++i) op();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Iterations for one repetition: batches of 1, 2, 4, ... ops until one takes
// kCalibrateSeconds on the slowest rank, then enough ops for kRepSeconds. Every decision
// is taken on a max over ranks, so every rank runs the same number of ops.
int calibrate_iters(const BenchContext& ctx, const Op& op) {
  for (int k = 1;; k *= 2) {
    ctx.barrier();
    double t = ctx.max_over_ranks(seconds_of(k, op));
    if (t >= kCalibrateSeconds || k >= kMaxIters) {
      double per_op = t / k;
      return static_cast<int>(std::clamp(std::ceil(kRepSeconds / per_op), 1.0, double{kMaxIters}));
    }
  }
}

int auto_warmup(size_t bytes) {
  return bytes < (1u << 20) ? 20 : bytes < kCacheBytes ? 5 : 1;
}

struct Timing {
  double time_s = 0;            // median over reps of the slowest rank's mean time per op
  int iters = 0;                // ops per repetition
  double algbw = 0, busbw = 0;  // GB/s
  CpuUse use{.others_seconds = 0, .cpus = {}};  // this rank's timed reps, summed
  double cores_busy = 0;                        // the most cores a rank kept busy over them
  double waiting = 0;  // the largest share of that time a rank waited for a CPU
  nlohmann::json to_json() const {
    return {{"time_us", time_s * 1e6}, {"algbw", algbw},           {"busbw", busbw},
            {"iters", iters},          {"cores_busy", cores_busy}, {"waiting", waiting}};
  }
};

// `t` of `k` ops, adding their CPU use to `into`.
double metered_seconds_of(int k, const Op& op, CpuUse& into) {
  CpuMeter meter;
  const double t = seconds_of(k, op);
  const CpuUse u = meter.stop();
  accumulate(into, u);
  return t;
}

struct Row {
  Point point;
  std::string algo;
  Timing etr, mpi;
  double ratio = 0;                // etr busbw / MPI busbw = MPI time / etr time
  std::optional<double> pct_ceil;  // etr busbw / ceiling, sizes beyond the caches only
  std::string refused;             // why the premise failed; "" when it held
};

// Collective: the premise of a row. Each rank runs one busy thread at a time (MPI's
// call, or etr's progress engine while the caller sleeps in wait()) on a core of its own.
void check_premise(const BenchContext& ctx, Row& row) {
  for (auto [timing, who] : {std::pair{&row.etr, "etr"}, std::pair{&row.mpi, "MPI"}}) {
    std::vector<CpuUse> uses = ctx.gather_cpu_use(timing->use);
    for (const CpuUse& u : uses) {
      timing->cores_busy = std::max(timing->cores_busy, u.cores_busy());
      timing->waiting = std::max(timing->waiting, u.waiting(1));
    }
    // Not the waiting: the caller and etr's progress engine of a bound rank share its
    // core by design (bench/run_allreduce.sh); it is reported in the JSON only.
    const Premise premise{.threads = 1, .max_waiting = -1};
    const std::string why = ranks_premise_failure(premise, uses, ctx.machine().hostnames);
    if (!why.empty() && row.refused.empty()) row.refused = std::string(who) + ": " + why;
  }
}

// The algorithm etr runs for this size, as far as CommOptions decides it.
std::string algo_label(Kind k, const HostCommunicator& comm, size_t bytes) {
  if (k == Kind::kAllreduce) return allreduce_algo_name(comm.choose_allreduce(bytes));
  return "ring";
}

Row run_point(const BenchContext& ctx, HostCommunicator& comm, const MpiReference& ref,
              const Settings& s, const Buffers& bufs, const Point& p,
              std::optional<double> ceiling_gbps) {
  TensorView in = bufs.in.view(s.dtype).slice(0, p.in_count);
  TensorView out = bufs.out.view(s.dtype).slice(0, p.out_count);
  TensorView check = bufs.check.view(s.dtype).slice(0, p.out_count);
  MPI_Comm mpi_comm = ctx.world().group().comm();
  Op etr_op = make_etr_op(s.kind, comm, s.op, in, out);
  Op mpi_op = make_mpi_op(s.kind, mpi_comm, ref, in, out);

  Row row;
  row.point = p;
  row.algo = algo_label(s.kind, comm, p.bytes);

  // Verify once: etr into `out`, MPI into `check`, both first filled with different junk.
  std::memset(out.data(), 0xA5, out.nbytes());
  std::memset(check.data(), 0x5A, check.nbytes());
  // A refusal (e.g. --algo mpi for a dtype MPI lacks) comes on every rank alike: agree on
  // it, so that every rank stops with one message instead of ending the job.
  std::string refused;
  try {
    etr_op();
  } catch (const Error& e) {
    refused = e.what();
  }
  ctx.agree(refused);
  make_mpi_op(s.kind, mpi_comm, ref, in, check)();
  std::string diff = compare_outputs(out, check, ref.divide_by_size() ? ctx.size() : 1);
  if (!diff.empty()) {
    diff = std::string("etr's ") + kind_name(s.kind) + " of " + std::to_string(p.bytes) +
           " bytes (" + std::string(dtype_name(s.dtype)) + " " + reduce_op_name(s.op) + ", algo " +
           row.algo + ") does not match " + mpi_call_name(s.kind) + ": " + diff;
  }
  ctx.agree(diff);

  int warmup = s.warmup >= 0 ? s.warmup : auto_warmup(p.bytes);
  seconds_of(warmup, etr_op);
  seconds_of(warmup, mpi_op);
  row.etr.iters = s.iters ? s.iters : calibrate_iters(ctx, etr_op);
  row.mpi.iters = s.iters ? s.iters : calibrate_iters(ctx, mpi_op);

  std::vector<double> etr_times, mpi_times;
  for (int r = 0; r < s.reps; ++r) {
    ctx.barrier();
    double t[2];
    t[0] = metered_seconds_of(row.etr.iters, etr_op, row.etr.use) / row.etr.iters;
    ctx.barrier();
    t[1] = metered_seconds_of(row.mpi.iters, mpi_op, row.mpi.use) / row.mpi.iters;
    ctx.max_over_ranks(t, 2);
    etr_times.push_back(t[0]);
    mpi_times.push_back(t[1]);
  }
  double factor = bus_factor(s.kind, ctx.size());
  for (auto [timing, times] : {std::pair{&row.etr, &etr_times}, std::pair{&row.mpi, &mpi_times}}) {
    timing->time_s = median(*times);
    timing->algbw = static_cast<double>(p.bytes) / timing->time_s / 1e9;
    timing->busbw = timing->algbw * factor;
  }
  row.ratio = row.mpi.time_s / row.etr.time_s;
  if (ceiling_gbps && p.bytes >= kCacheBytes) row.pct_ceil = 100.0 * row.etr.busbw / *ceiling_gbps;
  check_premise(ctx, row);
  return row;
}

// ---------------------------------------------------------------------------------------
// Output

Table make_table() {
  Table t;
  t.add_column("size", 11).add_column("count", 10).add_column("type", 4).add_column("op", 3);
  t.add_column("algo", 4);
  for (const char* group : {"etr", "MPI"}) {
    t.add_column("time(us)", 9, group).add_column("algbw", 6, group).add_column("busbw", 6, group);
    t.add_column("busy", 4, group);
  }
  t.add_column("ratio", 5).add_column("%ceil", 8);
  return t;
}

std::string time_cell(double seconds) {
  double us = seconds * 1e6;
  return us < 1e4 ? cell("%.2f", us) : us < 1e5 ? cell("%.1f", us) : cell("%.0f", us);
}

std::vector<std::string> row_cells(const Settings& s, const Row& r, bool have_ceiling) {
  std::vector<std::string> c = {std::to_string(r.point.bytes), std::to_string(r.point.count),
                                std::string(dtype_name(s.dtype)),
                                s.kind == Kind::kAllgather ? "-" : reduce_op_name(s.op), r.algo};
  const bool refused = !r.refused.empty();
  for (const Timing* t : {&r.etr, &r.mpi}) {
    c.push_back(refused ? "-" : time_cell(t->time_s));
    c.push_back(refused ? "-" : cell("%.2f", t->algbw));
    c.push_back(refused ? "-" : cell("%.2f", t->busbw));
    c.push_back(cell("%.2f", t->cores_busy));
  }
  if (refused) {
    c.push_back("-");
    c.push_back("-");
    return c;
  }
  c.push_back(cell("%.2f", r.ratio));
  c.push_back(r.pct_ceil                    ? cell("%.0f%%", *r.pct_ceil)
              : !have_ceiling               ? "n/a"
              : r.point.bytes < kCacheBytes ? "in cache"
                                            : "n/a");
  return c;
}

nlohmann::json row_json(const Row& r) {
  if (!r.refused.empty()) {
    return {{"bytes", r.point.bytes},
            {"count", r.point.count},
            {"algo", r.algo},
            {"etr_cores_busy", r.etr.cores_busy},
            {"mpi_cores_busy", r.mpi.cores_busy},
            {"premise_failed", r.refused}};
  }
  return {{"bytes", r.point.bytes},
          {"count", r.point.count},
          {"algo", r.algo},
          {"etr", r.etr.to_json()},
          {"mpi", r.mpi.to_json()},
          {"ratio", r.ratio},
          {"pct_ceiling", r.pct_ceil ? nlohmann::json(*r.pct_ceil) : nlohmann::json(nullptr)}};
}

std::string reference_text(Kind k, const MpiReference& ref) {
  return k == Kind::kAllgather ? ref.type_name() : ref.description();
}

std::string header_text(const BenchContext& ctx, const Settings& s, const CommOptions& opts,
                        const MpiReference& ref, const std::optional<StreamBandwidth>& bw,
                        std::optional<double> ceiling_gbps) {
  const MachineInfo& m = ctx.machine();
  std::string cpus;
  for (size_t r = 0; r < m.cpus.size(); ++r) cpus += (r ? " | " : "") + m.cpus[r];
  std::string h = std::string("# etr-bench ") + kind_name(s.kind) + "\n";
  h += "# world: " + m.placement() + "; CPUs allowed per rank: " + cpus + "\n";
  h += "# machine: " + m.cpu_model + ", " + std::to_string(m.cpus_online) + " CPUs online\n";
  h += "# data: " + std::string(dtype_name(s.dtype)) +
       (s.kind == Kind::kAllgather ? "" : std::string(", op ") + reduce_op_name(s.op)) +
       "; size = bytes of the whole buffer" +
       (s.kind == Kind::kReduceScatter ? " (the input, n x M; each rank keeps one block of M)"
        : s.kind == Kind::kAllgather   ? " (the output, n x M; each rank gives one block of M)"
                                       : "") +
       ", count = its elements\n";
  h += "# etr: HostCommunicator, " + opts.str() + "\n";
  h += "# MPI: " + m.mpi_library + "; reference " + mpi_call_name(s.kind) + "(" +
       reference_text(s.kind, ref) + ") on the same buffers\n";
  if (bw) {
    h += "# memory bandwidth (a[i] += b[i] on 2 x " +
         format_bytes(static_cast<double>(bw->array_bytes)) +
         " f32 per rank, all ranks at once, median of " + std::to_string(bw->reps) +
         ", bytes read + written per second): B = " + bw->str() + "\n";
  }
  h += std::string("# traffic model (S = size, n = ranks): ") + traffic_model_text(s.kind) + "\n";
  if (ceiling_gbps) {
    h += cell("# ceiling busbw = %.2f GB/s; %%ceil = etr busbw / ceiling for size >= ",
              *ceiling_gbps) +
         format_bytes(static_cast<double>(kCacheBytes)) +
         " (smaller sizes fit in the L3: \"in cache\")\n";
  } else {
    h += "# no ceiling: " +
         std::string(!bw                    ? "--stream-bytes 0"
                     : !bw->refused.empty() ? "the memory bandwidth's premise failed"
                                            : "one rank moves no bytes between ranks") +
         "\n";
  }
  h += "# time = median over " + std::to_string(s.reps) +
       " reps of the slowest rank's mean time per op (etr and MPI interleaved per rep; " +
       (s.iters ? std::to_string(s.iters) + " ops per rep"
                : std::string("ops per rep chosen for >= 20 ms")) +
       "); algbw = size / time; busbw = algbw x " + bus_factor_text(s.kind) +
       "; ratio = etr busbw / MPI busbw\n";
  h += "# busy = the most cores a rank kept busy over the timed reps (CPU / wall time); each "
       "rank claims one busy thread on a core of its own: a row beyond 1.15 cores, or with "
       "ranks sharing CPUs, shows \"premise failed\" instead of its figures\n";
  return h;
}

void run_collective(BenchContext& ctx, const Settings& s) {
  ctx.require_own_cores(std::string("etr-bench ") + kind_name(s.kind), {.threads = 1});
  std::vector<Point> points = plan_sizes(s, ctx.size());
  // Measured before the communicator exists, so that nothing of etr's runs beside it.
  std::optional<StreamBandwidth> bw;
  if (s.stream_bytes) bw = measure_stream_bandwidth(ctx, s.stream_bytes, kStreamReps);
  std::optional<double> ceiling_gbps;
  if (auto f = ceiling_factor(s.kind, ctx.size()); f && bw && bw->refused.empty()) {
    ceiling_gbps = *f * bw->per_rank_gbps;
  }

  CommOptions opts = CommOptions::from_env();
  if (s.algo) opts.allreduce_algo = *s.algo;
  HostCommunicator comm(ctx.world().group(), opts);
  MpiReference ref(s.dtype, s.op);
  std::unique_ptr<Buffers> bufs = allocate_buffers(ctx, s.dtype, points.back());

  ctx.print(header_text(ctx, s, opts, ref, bw, ceiling_gbps));
  Table table = make_table();
  ctx.print(table.header());
  nlohmann::json rows = nlohmann::json::array();
  int refused = 0;
  for (const Point& p : points) {
    Row row = run_point(ctx, comm, ref, s, *bufs, p, ceiling_gbps);
    std::string line = table.row(row_cells(s, row, ceiling_gbps.has_value()));
    if (!row.refused.empty()) line.insert(line.size() - 1, "  " + refused_cell(row.refused));
    ctx.print(line);
    rows.push_back(row_json(row));
    refused += !row.refused.empty();
  }

  if (!s.json.empty()) {
    nlohmann::json mem = bw ? bw->to_json() : nlohmann::json(nullptr);
    if (bw) {
      mem["traffic_model"] = traffic_model_text(s.kind);
      mem["ceiling_busbw_gbps"] =
          ceiling_gbps ? nlohmann::json(*ceiling_gbps) : nlohmann::json(nullptr);
      mem["ceiling_from_bytes"] = kCacheBytes;
    }
    nlohmann::json options = s.to_json();
    options["comm_options"] = opts.str();
    options["mpi_reference"] =
        std::string(mpi_call_name(s.kind)) + "(" + reference_text(s.kind, ref) + ")";
    options["bus_factor"] = bus_factor_text(s.kind);
    ctx.write_json(s.json, {{"benchmark", kind_name(s.kind)},
                            {"machine", ctx.machine().to_json()},
                            {"options", options},
                            {"memory_bandwidth", mem},
                            {"rows", rows}});
  }
  if (refused) throw_refused(refused);
}

}  // namespace

void add_collective_subcommands(CLI::App& app, SubcommandList& list) {
  struct Entry {
    Kind kind;
    const char* help;
  };
  for (Entry e :
       {Entry{Kind::kAllreduce, "etr's allreduce beside MPI_Allreduce"},
        Entry{Kind::kReduceScatter, "etr's reduce_scatter beside MPI_Reduce_scatter_block"},
        Entry{Kind::kAllgather, "etr's allgather beside MPI_Allgather"}}) {
    auto args = std::make_shared<Args>();
    CLI::App* cmd = app.add_subcommand(kind_name(e.kind), e.help);
    add_collective_options(cmd, *args, e.kind);
    Kind kind = e.kind;
    list.push_back({cmd, [args, kind](BenchContext& ctx) {
                      run_collective(ctx, parse_settings(kind, *args));
                    }});
  }
}

}  // namespace etr::bench
