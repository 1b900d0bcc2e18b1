// IndexPermutation: cycle-walking Feistel network (see index_permutation.h).
#include "examples/data/index_permutation.h"

#include <string>

#include "runtime/error.h"

namespace etr::data {

uint64_t mix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

IndexPermutation::IndexPermutation(uint64_t size, uint64_t key) : size_(size) {
  if (size > kMaxSize) {
    throw InvalidArgument("cannot permute " + std::to_string(size) + " indices; at most 2^62 " +
                          "are supported");
  }
  half_bits_ = 0;
  while ((uint64_t{1} << (2 * half_bits_)) < size) ++half_bits_;
  half_mask_ = (uint64_t{1} << half_bits_) - 1;
  uint64_t state = key;
  for (uint64_t& k : round_keys_) {
    state = mix64(state);
    k = state;
  }
}

uint64_t IndexPermutation::round_function(uint64_t half, int round) const {
  return mix64(half + round_keys_[static_cast<size_t>(round)]) & half_mask_;
}

uint64_t IndexPermutation::encrypt(uint64_t x) const {
  uint64_t left = x >> half_bits_;
  uint64_t right = x & half_mask_;
  for (int r = 0; r < kRounds; ++r) {
    uint64_t next_right = left ^ round_function(right, r);
    left = right;
    right = next_right;
  }
  return (left << half_bits_) | right;
}

uint64_t IndexPermutation::decrypt(uint64_t x) const {
  uint64_t left = x >> half_bits_;
  uint64_t right = x & half_mask_;
  for (int r = kRounds - 1; r >= 0; --r) {
    uint64_t prev_left = right ^ round_function(left, r);
    right = left;
    left = prev_left;
  }
  return (left << half_bits_) | right;
}

uint64_t IndexPermutation::operator()(uint64_t i) const {
  if (i >= size_) {
    throw InvalidArgument("index " + std::to_string(i) + " is outside the permutation of " +
                          std::to_string(size_) + " indices");
  }
  uint64_t x = encrypt(i);
  while (x >= size_) x = encrypt(x);
  return x;
}

uint64_t IndexPermutation::inverse(uint64_t image) const {
  if (image >= size_) {
    throw InvalidArgument("index " + std::to_string(image) + " is outside the permutation of " +
                          std::to_string(size_) + " indices");
  }
  uint64_t x = decrypt(image);
  while (x >= size_) x = decrypt(x);
  return x;
}

}  // namespace etr::data
