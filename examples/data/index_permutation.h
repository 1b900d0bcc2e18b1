// IndexPermutation: a keyed pseudo-random bijection of [0, size), evaluated in O(1) per
// index without materialising the permutation, so that any rank can find the window a
// global sample index stands for by arithmetic alone (the Sampler's shuffle).
//
//   IndexPermutation p(n, key);
//   p(i)            // in [0, n); i -> p(i) is one-to-one and onto for every n >= 0
//   p.inverse(p(i)) == i
//
// Construction (format-preserving encryption by cycle walking, Black and Rogaway 2002):
// let h be the smallest number with 4^h >= size, so the domain D = [0, 4^h) is less than
// 4 * size. A balanced Feistel network over 2h-bit numbers splits x into halves
// (L, R) of h bits and applies kRounds rounds (L, R) -> (R, L xor F_k(R)), where F_k is
// the splitmix64 finaliser of R plus the round key k, cut to h bits; every such network
// is a bijection of D whatever F is. Cycle walking turns it into a bijection of
// [0, size): apply the network again while the result is >= size. Each application lands
// in [0, size) with probability above 1/4, so the expected number of applications is
// below 4. Round keys come from the 64-bit key through splitmix64; the values depend on
// integer arithmetic only and are the same on every platform and in every run.
//
// Sizes up to 2^62 are accepted (InvalidArgument above).
#pragma once

#include <array>
#include <cstdint>

namespace etr::data {

class IndexPermutation {
 public:
  static constexpr int kRounds = 6;
  static constexpr uint64_t kMaxSize = uint64_t{1} << 62;

  IndexPermutation(uint64_t size, uint64_t key);

  uint64_t size() const { return size_; }
  // The image of i; i must be < size() (InvalidArgument otherwise).
  uint64_t operator()(uint64_t i) const;
  // The j with (*this)(j) == image.
  uint64_t inverse(uint64_t image) const;

 private:
  uint64_t encrypt(uint64_t x) const;
  uint64_t decrypt(uint64_t x) const;
  uint64_t round_function(uint64_t half, int round) const;

  uint64_t size_;
  int half_bits_;       // h: each Feistel half has h bits, the domain is 4^h
  uint64_t half_mask_;  // 2^h - 1
  std::array<uint64_t, kRounds> round_keys_;
};

// The splitmix64 finaliser: a bijective 64-bit mixer (Steele, Lea and Flood 2014). Used for
// round keys and for deriving per-epoch keys from a seed.
uint64_t mix64(uint64_t x);

}  // namespace etr::data
