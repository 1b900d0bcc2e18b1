#include "collectives/communicator.h"

#include <string>

#include "runtime/error.h"

namespace etr {

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return "sum";
    case ReduceOp::kAvg: return "avg";
    case ReduceOp::kMax: return "max";
    case ReduceOp::kMin: return "min";
  }
  return "?";
}

namespace check_args {
namespace {

std::string where(const Communicator& c, const char* what) {
  return std::string(what) + " on group '" + c.name() + "'";
}

void check_buffer(const Communicator& c, const TensorView& v, const char* what,
                  const char* role) {
  if (v.device() != c.device()) {
    throw InvalidArgument(where(c, what) + ": the " + role + " buffer is on " +
                          v.device().str() + " but this communicator works on " +
                          c.device().str() + " memory");
  }
  if (v.data() == nullptr && v.numel() > 0) {
    throw InvalidArgument(where(c, what) + ": the " + role + " buffer is null but has " +
                          std::to_string(v.numel()) + " elements");
  }
}

void check_same_dtype(const Communicator& c, const TensorView& in, const TensorView& out,
                      const char* what) {
  if (in.dtype() != out.dtype()) {
    throw InvalidArgument(where(c, what) + ": input is " + std::string(dtype_name(in.dtype())) +
                          " but output is " + std::string(dtype_name(out.dtype())) +
                          "; both must have the same dtype");
  }
}

void check_op(const Communicator& c, DType t, ReduceOp op, const char* what) {
  if (op == ReduceOp::kAvg && t == DType::kI32) {
    throw InvalidArgument(where(c, what) +
                          ": avg is not defined for i32 (integer division would truncate); "
                          "use sum and divide, or a floating dtype");
  }
}

}  // namespace

void allreduce(const Communicator& c, const TensorView& in, const TensorView& out, ReduceOp op) {
  check_buffer(c, in, "allreduce", "input");
  check_buffer(c, out, "allreduce", "output");
  check_same_dtype(c, in, out, "allreduce");
  if (in.numel() != out.numel()) {
    throw InvalidArgument(where(c, "allreduce") + ": input has " + std::to_string(in.numel()) +
                          " elements but output has " + std::to_string(out.numel()) +
                          "; they must match");
  }
  check_op(c, in.dtype(), op, "allreduce");
}

void reduce_scatter(const Communicator& c, const TensorView& in, const TensorView& out,
                    ReduceOp op) {
  check_buffer(c, in, "reduce_scatter", "input");
  check_buffer(c, out, "reduce_scatter", "output");
  check_same_dtype(c, in, out, "reduce_scatter");
  if (in.numel() != out.numel() * c.size()) {
    throw InvalidArgument(where(c, "reduce_scatter") + ": input has " +
                          std::to_string(in.numel()) + " elements but must have size x output = " +
                          std::to_string(c.size()) + " x " + std::to_string(out.numel()));
  }
  check_op(c, in.dtype(), op, "reduce_scatter");
}

void allgather(const Communicator& c, const TensorView& in, const TensorView& out) {
  check_buffer(c, in, "allgather", "input");
  check_buffer(c, out, "allgather", "output");
  check_same_dtype(c, in, out, "allgather");
  if (out.numel() != in.numel() * c.size()) {
    throw InvalidArgument(where(c, "allgather") + ": output has " +
                          std::to_string(out.numel()) + " elements but must have size x input = " +
                          std::to_string(c.size()) + " x " + std::to_string(in.numel()));
  }
}

void broadcast(const Communicator& c, const TensorView& inout, int root) {
  check_buffer(c, inout, "broadcast", "data");
  if (root < 0 || root >= c.size()) {
    throw InvalidArgument(where(c, "broadcast") + ": root " + std::to_string(root) +
                          " is not a rank of this group of " + std::to_string(c.size()));
  }
}

void point_to_point(const Communicator& c, const TensorView& buf, int peer, int tag,
                    const char* what) {
  check_buffer(c, buf, what, "data");
  if (peer < 0 || peer >= c.size() || peer == c.rank()) {
    throw InvalidArgument(where(c, what) + ": peer " + std::to_string(peer) +
                          " must be another rank of this group of " + std::to_string(c.size()) +
                          " (this is rank " + std::to_string(c.rank()) + ")");
  }
  if (tag < 0 || tag > (1 << 20)) {
    throw InvalidArgument(where(c, what) + ": tag " + std::to_string(tag) +
                          " is outside 0..1048576");
  }
}

}  // namespace check_args
}  // namespace etr
