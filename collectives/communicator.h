// Communicator: the collectives over one process group (docs/design.md, "Collectives").
//
// Every call returns a Work; calls run in issue order on every rank, so the same
// program order everywhere gives the same collective order. Buffers are TensorViews of
// host or device memory; a backend rejects buffers on a device it does not drive.
//
// Shapes (n = size(), r = rank()):
//   allreduce       in [N] -> out [N]                  (in == out: in place)
//   reduce_scatter  in [n * M] -> out [M], block r     (out == in block r: in place)
//   allgather       in [M] -> out [n * M], block r=in  (in == out block r: in place)
//   broadcast       inout [N] from root
//   send / recv     [N] to / from one peer, matched by tag
#pragma once

#include <string>

#include "collectives/work.h"
#include "runtime/tensor.h"

namespace etr {

enum class ReduceOp { kSum, kAvg, kMax, kMin };

const char* reduce_op_name(ReduceOp op);

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual const std::string& name() const = 0;
  virtual Device device() const = 0;

  virtual WorkPtr allreduce(TensorView in, TensorView out, ReduceOp op) = 0;
  WorkPtr allreduce(TensorView inout, ReduceOp op) { return allreduce(inout, inout, op); }
  virtual WorkPtr reduce_scatter(TensorView in, TensorView out, ReduceOp op) = 0;
  virtual WorkPtr allgather(TensorView in, TensorView out) = 0;
  virtual WorkPtr broadcast(TensorView inout, int root) = 0;
  virtual WorkPtr send(TensorView in, int peer, int tag = 0) = 0;
  virtual WorkPtr recv(TensorView out, int peer, int tag = 0) = 0;
  virtual WorkPtr barrier() = 0;

  // A hint: the caller is (true) or no longer (false) blocked waiting for this
  // communicator's work, so its core is free and the backend may trade CPU for latency
  // (spin instead of sleeping). Backends without such a trade-off ignore it.
  virtual void set_caller_waiting(bool /*waiting*/) {}
};

// Argument checks shared by every backend; each throws InvalidArgument with a sentence.
namespace check_args {
void allreduce(const Communicator& c, const TensorView& in, const TensorView& out, ReduceOp op);
void reduce_scatter(const Communicator& c, const TensorView& in, const TensorView& out,
                    ReduceOp op);
void allgather(const Communicator& c, const TensorView& in, const TensorView& out);
void broadcast(const Communicator& c, const TensorView& inout, int root);
void point_to_point(const Communicator& c, const TensorView& buf, int peer, int tag,
                    const char* what);
}  // namespace check_args

}  // namespace etr
