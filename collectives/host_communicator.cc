#include "collectives/host_communicator.h"

#include <sched.h>

#include <algorithm>
#include <cstring>
#include <thread>

#include "collectives/chain_broadcast.h"
#include "collectives/hierarchical.h"
#include "collectives/mpi_transport.h"
#include "collectives/op_context.h"
#include "collectives/progress_engine.h"
#include "collectives/recursive_doubling.h"
#include "collectives/reduce_kernels.h"
#include "collectives/ring_algorithms.h"
#include "collectives/ring_common.h"
#include "runtime/cpu_affinity.h"
#include "runtime/error.h"
#include "runtime/log.h"
#include "runtime/mpi_check.h"

namespace etr {

// What a collective's body gets when it runs on the engine (or inline).
struct HostCommunicator::AlgoSetup {
  OpContext& ctx;
  AlgoParams params(DType dtype) const {
    return comm.algo_params(*comm.transport_, ctx, dtype, comm.topology_.nodes > 1);
  }
  const HostCommunicator& comm;
};

namespace {

OpDescription describe(const char* op, const TensorView& v, const char* detail,
                       const std::string& group) {
  OpDescription d;
  d.op = op;
  d.dtype = dtype_name(v.dtype()).data();
  d.count = v.numel();
  d.detail = detail;
  d.group = &group;
  return d;
}

MPI_Datatype mpi_type(DType t) {
  switch (t) {
    case DType::kF32: return MPI_FLOAT;
    case DType::kF64: return MPI_DOUBLE;
    case DType::kI32: return MPI_INT;
    default: return MPI_DATATYPE_NULL;
  }
}

// MPI's own allreduce, for comparison (the `mpi` algorithm); non-blocking so that the
// deadline still applies.
void mpi_allreduce(OpContext& ctx, MPI_Comm comm, const TensorView& in, const TensorView& out,
                   ReduceOp op) {
  MPI_Op mop = op == ReduceOp::kMax ? MPI_MAX : op == ReduceOp::kMin ? MPI_MIN : MPI_SUM;
  const void* src = in.data() == out.data() ? MPI_IN_PLACE : in.data();
  MPI_Request req;
  MPI_CHECK(MPI_Iallreduce(src, out.data(), static_cast<int>(out.numel()), mpi_type(out.dtype()),
                           mop, comm, &req));
  for (;;) {
    int done = 0;
    MPI_CHECK(MPI_Test(&req, &done, MPI_STATUS_IGNORE));
    if (done) break;
    ctx.idle(-1);
  }
  if (op == ReduceOp::kAvg) divide(out.dtype(), out.data(), out.numel(), ctx.size());
}

}  // namespace

namespace {

// Ranks of `group` on this node, against the cores this process may run on.
bool node_oversubscribed(const Group& group) {
  const int local_size = ranks_on_this_node(group);
  cpu_set_t cpus;
  int cores = sched_getaffinity(0, sizeof cpus, &cpus) == 0 ? CPU_COUNT(&cpus) : 1;
  // With every rank bound to one core, affinity shows 1: count the machine's cores then.
  if (cores == 1) cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  return local_size > cores;
}

}  // namespace

HostCommunicator::HostCommunicator(const Group& group, CommOptions options, Logger* log)
    : options_(options),
      group_(group.dup(group.name())),
      p2p_group_(group.dup(group.name())),
      topology_(discover_host_topology(group_)),
      world_ranks_(group_.world_ranks()),
      transport_(std::make_unique<MpiTransport>(group_.comm())),
      p2p_transport_(std::make_unique<MpiTransport>(p2p_group_.comm())),
      scratch_(std::make_unique<RingScratch>()),
      caller_waiting_(std::make_unique<CallerWaiting>()),
      deadlines_(std::make_unique<LearnedDeadlines>(options.timeout, options.learned_timeout_multiple,
                                                    options.learned_timeout_floor)),
      engine_(std::make_unique<ProgressEngine>(group.name())) {
  if (options_.spin_polls < 0) {
    options_.spin_polls =
        node_oversubscribed(group_) ? 16 : static_cast<int>(OpContext::kDefaultSpinPolls);
  }
  if (options_.yield_polls < 0) options_.yield_polls = static_cast<int>(OpContext::kDefaultYieldPolls);
  if (options_.max_idle_sleep.count() < 0) options_.max_idle_sleep = IdlePolicy::kFirstSleep;
  // Slots for the pipelined pieces are allocated and touched now, not in the first step.
  scratch_->get(scratch_->slots, options_.chunk_bytes * std::clamp(options_.depth, 1, 64));
  build_host_groups(log);
}

// The groups of the hierarchical allreduce, when it can run and may be chosen (asked for,
// or auto with at least 2 ranks a host: with 1 it is the ring, and the two splits would
// only cost every start); otherwise, if it was asked for, one line saying that the ring
// runs instead.
void HostCommunicator::build_host_groups(Logger* log) {
  const bool asked = options_.allreduce_algo == AllreduceAlgo::kHierarchical;
  if (topology_.hierarchical_possible() && (asked || topology_.ranks_per_node() >= 2)) {
    const std::string host = std::to_string(topology_.node);
    const std::string local = std::to_string(topology_.local_rank);
    host_group_ = group_.split(topology_.node, group_.rank(), name() + "/host" + host);
    alternating_ = topology_.nodes == 2 && topology_.ranks_per_node() >= 2;
    if (alternating_) {
      cross_group_ = group_.split(0, topology_.local_rank * 2 + topology_.node,
                                  name() + "/alternating");
    } else {
      cross_group_ =
          group_.split(topology_.local_rank, topology_.node, name() + "/across" + local);
    }
    host_transport_ = std::make_unique<MpiTransport>(host_group_->comm());
    cross_transport_ = std::make_unique<MpiTransport>(cross_group_->comm());
    host_world_ranks_ = host_group_->world_ranks();
    cross_world_ranks_ = cross_group_->world_ranks();
    return;
  }
  if (!asked || group_.rank() != 0) return;
  Logger fallback;
  (log ? *log : fallback)
      .warn("allreduce on group '", name(), "': hier needs at least 2 hosts with the same "
            "number of ranks on each, here ", topology_.str(), "; running the ring instead");
}

IdlePolicy HostCommunicator::idle_policy() const {
  return IdlePolicy{static_cast<unsigned>(options_.spin_polls),
                    static_cast<unsigned>(options_.yield_polls), options_.max_idle_sleep,
                    caller_waiting_.get()};
}

AlgoParams HostCommunicator::algo_params(Transport& transport, OpContext& ctx, DType dtype,
                                         bool across_hosts) const {
  const int64_t chunk =
      std::max<int64_t>(1, static_cast<int64_t>(options_.chunk_bytes / dtype_size(dtype)));
  return AlgoParams{transport, ctx, *scratch_, dtype, chunk, std::clamp(options_.depth, 1, 64),
                    across_hosts};
}

HostCommunicator::~HostCommunicator() { engine_.reset(); }

void HostCommunicator::set_caller_waiting(bool waiting) { caller_waiting_->set(waiting); }

int HostCommunicator::rank() const { return group_.rank(); }
int HostCommunicator::size() const { return group_.size(); }
const std::string& HostCommunicator::name() const { return group_.name(); }

// The ring pays 2(n-1) message latencies and reduces (n-1)/n of the data; recursive
// doubling pays log2(n) latencies but moves and reduces all of it log2(n) times. The
// crossover therefore grows with n. Measured at np=2 (f32 sum, interleaved runs):
// rd 2.2 / 3.7 / 9.2 / 14.0 / 24.7 us against ring 2.5 / 3.9 / 6.5 / 14.7 / 20.9 us at
// 4 / 8 / 16 / 32 / 64 KiB, so 16 KiB x (n-1); oversubscribed np=3 and np=4 runs put
// the crossover higher still (64-256 KiB), consistent with the scaling.
//
// Across hosts, a ring with its ranks placed host by host sends 2(n-1)/n of the buffer
// over each host's link; the hierarchical allreduce 2(H-1)/H (H hosts), the rest staying
// in shared memory: auto takes it where the ring would, given >= 2 hosts of L >= 2 ranks
// each (with L = 1 it is the ring itself).
AllreduceAlgo HostCommunicator::choose_allreduce(size_t bytes) const {
  const AllreduceAlgo asked = options_.allreduce_algo;
  const bool hier = topology_.hierarchical_possible();
  if (asked == AllreduceAlgo::kHierarchical) return hier ? asked : AllreduceAlgo::kRing;
  if (asked != AllreduceAlgo::kAuto) return asked;
  const size_t limit = options_.small_bytes * static_cast<size_t>(std::max(1, size() - 1));
  if (bytes < limit) return AllreduceAlgo::kRecursiveDoubling;
  return hier && topology_.ranks_per_node() >= 2 ? AllreduceAlgo::kHierarchical
                                                 : AllreduceAlgo::kRing;
}

WorkPtr HostCommunicator::submit_collective(OpDescription description, size_t bytes,
                                            std::function<void(AlgoSetup&)> body) {
  auto work = std::make_shared<HostWork>(description);
  // The step's collectives learn their deadlines; a broadcast or barrier (start-up, rare
  // points) keeps the fixed timeout.
  const std::string_view op = description.op;
  std::string key;
  if (op == "allreduce" || op == "reduce_scatter" || op == "allgather") {
    key = LearnedDeadlines::key(description.op, bytes);
  }
  auto task = [this, work, key = std::move(key), body = std::move(body)]() -> ProgressEngine::Poll {
    const LearnedLimit limit = key.empty() ? LearnedLimit{options_.timeout} : deadlines_->limit(key);
    OpContext ctx(*work, rank(), size(), limit.timeout, idle_policy());
    ctx.set_world_ranks(&world_ranks_);
    if (limit.learned) ctx.set_learned(deadlines_->describe(key, limit));
    AlgoSetup setup{ctx, *this};
    body(setup);
    if (!key.empty()) deadlines_->record(key, OpContext::Clock::now() - ctx.start());
    return {};
  };
  engine_->submit(work, std::move(task), bytes <= options_.inline_bytes);
  return work;
}

WorkPtr HostCommunicator::allreduce(TensorView in, TensorView out, ReduceOp op) {
  check_args::allreduce(*this, in, out, op);
  const AllreduceAlgo algo = choose_allreduce(in.nbytes());
  if (algo == AllreduceAlgo::kMpi && mpi_type(in.dtype()) == MPI_DATATYPE_NULL) {
    throw InvalidArgument("allreduce on group '" + name() + "': the mpi algorithm has no " +
                          std::string(dtype_name(in.dtype())) + " type; use ring or rd");
  }
  const OpDescription d = describe("allreduce", in, reduce_op_name(op), name());
  return submit_collective(
      d, in.nbytes(), [this, d, in, out, op, algo](AlgoSetup& s) {
        switch (algo) {
          case AllreduceAlgo::kMpi:
            return mpi_allreduce(s.ctx, group_.comm(), in, out, op);
          case AllreduceAlgo::kHierarchical:
            return run_hierarchical(d, in, out, op, s.ctx);
          case AllreduceAlgo::kRecursiveDoubling:
            return recursive_doubling_allreduce(s.params(in.dtype()), in.data(), out.data(),
                                                in.numel(), op);
          default:
            return ring_allreduce(s.params(in.dtype()), in.data(), out.data(), in.numel(), op);
        }
      });
}

// The rings within the host and across hosts each time out naming their own group and
// ranks; their contexts start with the operation, so they share its deadline.
void HostCommunicator::run_hierarchical(const OpDescription& d, TensorView in, TensorView out,
                                        ReduceOp op, const OpContext& outer) {
  OpDescription host_d = d, cross_d = d;
  host_d.group = &host_group_->name();
  cross_d.group = &cross_group_->name();
  const HostWork host_work(host_d), cross_work(cross_d);
  OpContext host_ctx(host_work, host_group_->rank(), host_group_->size(), outer.timeout(),
                     idle_policy());
  OpContext cross_ctx(cross_work, cross_group_->rank(), cross_group_->size(), outer.timeout(),
                      idle_policy());
  host_ctx.set_learned(outer.learned_note());
  cross_ctx.set_learned(outer.learned_note());
  host_ctx.set_world_ranks(&host_world_ranks_);
  cross_ctx.set_world_ranks(&cross_world_ranks_);
  const AlgoParams local = algo_params(*host_transport_, host_ctx, in.dtype(), false);
  const AlgoParams cross = algo_params(*cross_transport_, cross_ctx, in.dtype(), true);
  if (alternating_) {
    return two_host_allreduce(local, cross, topology_.node, in.data(), out.data(), in.numel(),
                              op);
  }
  hierarchical_allreduce(local, cross, in.data(), out.data(), in.numel(), op);
}

WorkPtr HostCommunicator::reduce_scatter(TensorView in, TensorView out, ReduceOp op) {
  check_args::reduce_scatter(*this, in, out, op);
  return submit_collective(describe("reduce_scatter", in, reduce_op_name(op), name()),
                           in.nbytes(), [in, out, op](AlgoSetup& s) {
                             ring_reduce_scatter(s.params(in.dtype()), in.data(), out.data(),
                                                 out.numel(), op);
                           });
}

WorkPtr HostCommunicator::allgather(TensorView in, TensorView out) {
  check_args::allgather(*this, in, out);
  return submit_collective(describe("allgather", out, nullptr, name()), out.nbytes(),
                           [in, out](AlgoSetup& s) {
                             ring_allgather(s.params(in.dtype()), in.data(), out.data(),
                                            in.numel());
                           });
}

WorkPtr HostCommunicator::broadcast(TensorView inout, int root) {
  check_args::broadcast(*this, inout, root);
  OpDescription d = describe("broadcast", inout, nullptr, name());
  d.peer_label = "root";
  d.peer = root;
  return submit_collective(d,
                           inout.nbytes(), [inout, root](AlgoSetup& s) {
                             chain_broadcast(s.params(inout.dtype()), inout.data(), inout.numel(),
                                             root);
                           });
}

WorkPtr HostCommunicator::barrier() {
  OpDescription d;
  d.op = "barrier";
  d.dtype = "-";
  d.group = &name();
  return submit_collective(d, 0,
                           [this](AlgoSetup& s) { dissemination_barrier(*transport_, s.ctx); });
}

WorkPtr HostCommunicator::submit_point_to_point(bool is_send, TensorView buf, int peer, int tag) {
  OpDescription d = describe(is_send ? "send" : "recv", buf, nullptr, name());
  d.peer_label = is_send ? "to rank" : "from rank";
  d.peer = peer;
  d.tag = tag;
  auto work = std::make_shared<HostWork>(d);
  auto task = [this, work, is_send, buf, peer, tag]() -> ProgressEngine::Poll {
    MpiTransport& t = *p2p_transport_;
    Transport::Request req = is_send ? t.isend(buf.data(), buf.nbytes(), peer, tag)
                                     : t.irecv(buf.data(), buf.nbytes(), peer, tag);
    auto ctx = std::make_shared<OpContext>(*work, rank(), size(), options_.timeout);
    ctx->set_world_ranks(&world_ranks_);
    return [&t, req, ctx, peer, work]() {
      if (t.test(req)) return true;
      try {
        ctx->check_deadline(peer);
      } catch (...) {
        t.cancel(req);
        throw;
      }
      return false;
    };
  };
  engine_->submit(work, std::move(task), false);
  return work;
}

WorkPtr HostCommunicator::send(TensorView in, int peer, int tag) {
  check_args::point_to_point(*this, in, peer, tag, "send");
  return submit_point_to_point(true, in, peer, tag);
}

WorkPtr HostCommunicator::recv(TensorView out, int peer, int tag) {
  check_args::point_to_point(*this, out, peer, tag, "recv");
  return submit_point_to_point(false, out, peer, tag);
}

}  // namespace etr
