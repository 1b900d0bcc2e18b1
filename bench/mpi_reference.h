// The MPI datatype and reduction that compute, with MPI's own collectives, what etr
// computes for (dtype, op): the reference column of the collective benchmarks.
//
//   f32 f64 i32   native MPI types and MPI_SUM / MPI_MAX / MPI_MIN.
//   bf16 f16      MPI has no such type: MPI_UINT16_T with a user-defined commutative op
//                 (MPI_Op_create) that widens both operands to f32, combines them and
//                 rounds back, i.e. an f32-accumulating sum per pairwise step.
//   avg           MPI has no average: the reference runs MPI_SUM (that is what is timed)
//                 and the comparison divides MPI's result by the world size.
#pragma once

#include <mpi.h>

#include <string>

#include "collectives/communicator.h"
#include "runtime/dtype.h"

namespace etr::bench {

class MpiReference {
 public:
  MpiReference(DType dtype, ReduceOp op);  // creates the user op where one is needed
  ~MpiReference();                         // frees it
  MpiReference(const MpiReference&) = delete;
  MpiReference& operator=(const MpiReference&) = delete;

  MPI_Datatype type() const { return type_; }
  MPI_Op op() const { return op_; }
  // True for avg: MPI's result must be divided by the world size before comparing.
  bool divide_by_size() const { return divide_; }
  // "MPI_FLOAT, MPI_SUM" / "MPI_UINT16_T, user op (bf16 sum accumulated in f32)"
  const std::string& description() const { return description_; }
  // "MPI_FLOAT" / "MPI_UINT16_T": the type alone (allgather reduces nothing).
  const std::string& type_name() const { return type_name_; }

 private:
  MPI_Datatype type_ = MPI_DATATYPE_NULL;
  MPI_Op op_ = MPI_OP_NULL;
  bool user_op_ = false;
  bool divide_ = false;
  std::string description_;
  std::string type_name_;
};

}  // namespace etr::bench
