// The checkpoint tests' small layout of odd sizes (unit/checkpoint_offline_test.cc,
// unit/manifest_sense_test.cc) and a manifest's metadata for it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "checkpoint/manifest.pb.h"
#include "runtime/param_layout.h"

namespace etr::testing {

inline const std::vector<std::string> kStates = {"param", "adam.m", "adam.v"};

// Odd sizes: a prime vector, a non-square matrix, a single element, an empty tensor,
// a 3-D tensor; 7 + 221 + 1 + 0 + 30 + 13 = 272 elements, padded to 16 in memory.
inline ParamLayout odd_layout() {
  ParamLayout l;
  l.add("a.bias", Shape{7}, 0, false);
  l.add("b.weight", Shape{13, 17}, 1, true);
  l.add("c.scale", Shape{1}, 1, false);
  l.add("d.empty", Shape{0}, 2, false);
  l.add("e.cube", Shape{2, 3, 5}, 2, true);
  l.add("f.tail", Shape{13}, 3, false);
  return l;
}

inline ckpt::Manifest meta(uint64_t step, int world) {
  ckpt::Manifest m;
  m.set_step(step);
  m.mutable_data()->set_samples_seen(step * 8);
  m.mutable_layout()->set_world_size(world);
  m.mutable_layout()->set_dp_size(world);
  m.mutable_layout()->set_pp_size(1);
  m.set_tier("durable");
  m.set_writer("checkpoint_offline_test");
  return m;
}

}  // namespace etr::testing
