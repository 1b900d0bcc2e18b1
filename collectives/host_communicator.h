// HostCommunicator: the collectives over host memory, driven through MPI point-to-point
// by this communicator's own progress engine (docs/design.md, "Collectives").
//
//   World world(&argc, &argv);
//   HostCommunicator comm(world.group(), CommOptions::from_env());
//   WorkPtr w = comm.allreduce(view, ReduceOp::kSum);   // returns at once (*)
//   ... compute ...
//   w->wait();
//
// Algorithms (one per file): ring reduce-scatter + ring allgather, chunked and
// pipelined, for large allreduces; recursive doubling below CommOptions::small_bytes;
// hierarchical (within each host, then across hosts: collectives/hierarchical.h) when
// the group spans several hosts with the same number of ranks on each; MPI's own
// MPI_Allreduce when asked (for comparison). The communicator duplicates the group's
// MPI communicator, so its traffic never mixes with anybody else's; on several hosts it
// also splits it into the ranks of its host and the ranks of its local index on every
// host (on exactly two hosts of >= 2 ranks: all ranks in alternating host order instead;
// collective, in the constructor), each with a transport of its own.
//
// (*) Collectives up to CommOptions::inline_bytes (64 KiB) run on the calling thread
// when nothing else is queued, and return when done: issue collectives on several
// communicators in the same order on every rank, or set inline_bytes to 0 for a
// communicator whose small operations must never block the caller.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "collectives/learned_deadline.h"
#include "collectives/comm_options.h"
#include "collectives/communicator.h"
#include "collectives/host_topology.h"
#include "runtime/group.h"

namespace etr {

class ProgressEngine;
class MpiTransport;
class Logger;
class OpContext;
class Transport;
struct AlgoParams;
struct IdlePolicy;
struct RingScratch;
struct CallerWaiting;

class HostCommunicator final : public Communicator {
 public:
  // Collective over `group`: every member must construct it. `log` (optional) receives
  // the one line said when `hier` is asked for but cannot run (rank 0 of the group).
  HostCommunicator(const Group& group, CommOptions options = CommOptions::from_env(),
                   Logger* log = nullptr);
  ~HostCommunicator() override;

  int rank() const override;
  int size() const override;
  const std::string& name() const override;
  Device device() const override { return Device::cpu(); }
  const CommOptions& options() const { return options_; }

  WorkPtr allreduce(TensorView in, TensorView out, ReduceOp op) override;
  using Communicator::allreduce;
  WorkPtr reduce_scatter(TensorView in, TensorView out, ReduceOp op) override;
  WorkPtr allgather(TensorView in, TensorView out) override;
  WorkPtr broadcast(TensorView inout, int root) override;
  WorkPtr send(TensorView in, int peer, int tag = 0) override;
  WorkPtr recv(TensorView out, int peer, int tag = 0) override;
  WorkPtr barrier() override;
  void set_caller_waiting(bool waiting) override;

  // The allreduce algorithm that runs for `bytes`: auto's pick, or the one asked for
  // (kRing when kHierarchical was asked for but is not possible).
  AllreduceAlgo choose_allreduce(size_t bytes) const;

  // The hosts the group spans, and the ranks on each (0 when they differ).
  const HostTopology& topology() const { return topology_; }
  int nodes() const { return topology_.nodes; }
  int ranks_per_node() const { return topology_.ranks_per_node(); }

 private:
  struct AlgoSetup;
  WorkPtr submit_collective(OpDescription description, size_t bytes,
                            std::function<void(AlgoSetup&)> body);
  WorkPtr submit_point_to_point(bool is_send, TensorView buf, int peer, int tag);
  IdlePolicy idle_policy() const;
  // `across_hosts`: the transport's ring spans hosts (AlgoParams::across_hosts).
  AlgoParams algo_params(Transport& transport, OpContext& ctx, DType dtype,
                         bool across_hosts) const;
  void build_host_groups(Logger* log);
  void run_hierarchical(const OpDescription& d, TensorView in, TensorView out, ReduceOp op,
                        const OpContext& outer);

  CommOptions options_;
  Group group_;      // collectives' messages
  Group p2p_group_;  // send/recv, so user tags never meet collective traffic
  HostTopology topology_;
  // World ranks of group_'s, host_group_'s and cross_group_'s ranks: a timeout names its
  // peer by it (OpContext::set_world_ranks).
  std::vector<int> world_ranks_, host_world_ranks_, cross_world_ranks_;
  std::optional<Group> host_group_;   // this host's ranks (hierarchical only)
  // The ranks of this local index, one per host; on two hosts of >= 2 ranks, all ranks in
  // the order host 0 rank 0, host 1 rank 0, host 0 rank 1, ... (two_host_allreduce).
  std::optional<Group> cross_group_;
  bool alternating_ = false;  // cross_group_ is the alternating ring
  std::unique_ptr<MpiTransport> transport_;
  std::unique_ptr<MpiTransport> p2p_transport_;
  std::unique_ptr<MpiTransport> host_transport_;
  std::unique_ptr<MpiTransport> cross_transport_;
  std::unique_ptr<RingScratch> scratch_;
  std::unique_ptr<CallerWaiting> caller_waiting_;
  std::unique_ptr<LearnedDeadlines> deadlines_;  // allreduce, reduce-scatter, allgather
  std::unique_ptr<ProgressEngine> engine_;  // last: stopped first
};

}  // namespace etr
