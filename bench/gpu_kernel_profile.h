// KernelProfile: the time of each of the layers' kernels on a GPU, for `etr-bench train
// --device cuda`'s "slowest kernels" lines.
//
//   KernelProfile<bf16> profile;        // from now on a stack placed on a GPU gets its set
//   Trainer trainer(...);               // ... the trainer's stack is placed here
//   profile.record(true);  trainer.train_step();  profile.record(false);
//   for (auto& k : profile.totals()) ...  // {name, ms} summed over the recorded calls
//
// It installs (override_cuda_kernels, runtime/kernels/dispatch.h) a KernelSet whose every
// member that takes a stream calls the CUDA set's and, while recording, records a CUDA
// event on that stream before and after; totals() waits for the last event and sums each
// member's elapsed times. Not recording, a member is one more indirect call. The device
// operations (AdamW, the norm) and copies are not kernels of the set: the step's time less
// the sum of the totals is theirs plus launch gaps. One profile at a time per type.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "runtime/dtype.h"

namespace etr::bench {

template <typename Real>
class KernelProfile {
 public:
  KernelProfile();
  ~KernelProfile();
  KernelProfile(const KernelProfile&) = delete;
  KernelProfile& operator=(const KernelProfile&) = delete;

  void record(bool on);
  // {kernel, milliseconds} over the recorded calls, the slowest first.
  std::vector<std::pair<std::string, double>> totals() const;
};

}  // namespace etr::bench
