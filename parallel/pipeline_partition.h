// The pipeline partitioner: which contiguous range of the model's layers each pipeline
// part holds. Pure functions of the per-layer costs, so every rank computes the same split.
//
// A model is an ordered list of n layers (for GPT-2: the embedding, n_layer transformer
// blocks, the head; the costs say that the embedding and the head are heavier than a
// block). A pipeline of `parts` = P stages times v virtual stages cuts it into contiguous,
// non-empty ranges described by boundaries b (size parts + 1):
//
//   b[0] = 0 < b[1] < ... < b[parts] = n,   part i holds layers [b[i], b[i+1])
//
// A part's cost is the sum of its layers' costs, added in layer order starting from 0.0
// (part_costs); balance_partition compares exactly these sums, so the largest part cost of
// its answer is exactly the smallest any contiguous split can reach.
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace etr {

// Boundaries b (size parts + 1) that minimise the largest part's sum of costs, exactly.
//
// Algorithm: the optimum L* is the smallest double L for which the greedy "extend each part
// while its sum stays <= L" needs at most `parts` parts; feasibility is monotone in L and
// non-negative doubles order like their bit patterns, so a binary search over the bits
// finds L* in at most 64 greedy passes. Among the splits whose every part costs <= L*,
// boundary k is then chosen, front to back, as the one whose prefix cost is closest to
// k / parts of the total (ties: the smaller boundary) while the rest can still be split
// into the remaining parts within L*. The layers between heavy ones are so shared evenly
// ("10 | 1 1 1 | 1 1 1 | 10", not "10 | 1 1 1 1 1 | 1 | 10"). Deterministic; O(64 n) for
// L* plus O(n * longest part) for the split (O(n^2) at worst).
//
// ConfigError when parts < 1, parts > n ("cannot split N layers into P pipeline stages:
// each stage needs at least one layer"), or a cost is negative or not finite.
std::vector<int> balance_partition(std::span<const double> costs, int parts);

// An explicit split such as "3,2,2": the number of layers of each part, each >= 1, exactly
// `parts` numbers that sum to n_layers; whitespace around the numbers is allowed. Returns
// the boundaries as above. ConfigError (one sentence naming the text and what is wrong)
// otherwise.
std::vector<int> parse_partition(std::string_view text, int n_layers, int parts);

// The cost of each part for boundaries b: costs added in layer order from 0.0.
// InvalidArgument when b is not a valid split of costs.size() layers.
std::vector<double> part_costs(std::span<const double> costs, std::span<const int> bounds);

// A one-line description of boundaries for the start-up log: "layers 0-2 | 3-4 | 5-6"; a
// part of one layer is written as its index alone ("layers 0 | 1-12 | 13").
// InvalidArgument when b is not a valid split (b[0] = 0, strictly increasing, size >= 2).
std::string describe_partition(std::span<const int> bounds);

}  // namespace etr
