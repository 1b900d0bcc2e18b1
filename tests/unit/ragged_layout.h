// A flat layout whose tensors start and end off the alignment, with padding between them:
// the checkpoint read tests (unit/checkpoint_read_range_test.cc, mpi/peer_read_test.cc)
// read ranges that start and end inside tensors, in padding and on shard-file edges.
#pragma once

#include "runtime/param_layout.h"

namespace etr::testing {

inline ParamLayout ragged_layout() {
  ParamLayout l;
  l.add("a", Shape{7}, 0, false);       // [0, 7), padding to 16
  l.add("b", Shape{13, 5}, 1, true);    // [16, 81), padding to 96
  l.add("c", Shape{1}, 1, false);       // [96, 97), padding to 112
  l.add("d", Shape{2, 3, 5}, 2, true);  // [112, 142)
  return l;
}

}  // namespace etr::testing
