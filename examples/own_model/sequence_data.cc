#include "sequence_data.h"

namespace own {
namespace {

uint64_t mix(uint64_t x) {  // splitmix64's finaliser: a well-spread start token per sample
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

}  // namespace

void SequenceData::sample(uint64_t stream, uint64_t index, int32_t* inputs,
                          int32_t* targets) const {
  int64_t t = static_cast<int64_t>(mix(mix(seed_ ^ stream) ^ index) % static_cast<uint64_t>(vocab_));
  for (int64_t i = 0; i < seq_len_; ++i) {
    inputs[i] = static_cast<int32_t>(t);
    t = (5 * t + 3) % vocab_;
    targets[i] = static_cast<int32_t>(t);
  }
}

void SequenceData::gather(uint64_t first, uint64_t count, std::span<int32_t> inputs,
                          std::span<int32_t> targets) const {
  for (uint64_t s = 0; s < count; ++s) {
    sample(0, first + s, inputs.data() + s * seq_len_, targets.data() + s * seq_len_);
  }
}

void SequenceData::gather_eval(uint64_t first, uint64_t count, std::span<int32_t> inputs,
                               std::span<int32_t> targets) const {
  for (uint64_t s = 0; s < count; ++s) {
    sample(1, first + s, inputs.data() + s * seq_len_, targets.data() + s * seq_len_);
  }
}

}  // namespace own
