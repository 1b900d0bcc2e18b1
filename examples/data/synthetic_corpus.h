// SyntheticCorpus: deterministic, human-readable text with learnable structure, for the
// example GPT's tests and demo. One line per sentence, each ending in '\n'; lines are
// independent draws from this grammar (weights in brackets, every other choice uniform):
//
//   line      := sentence [4] | sum [3] | count [2] | spell [1]            (of 10)
//   sentence  := Np verb np "."   e.g. "The small cats chase the dog."
//                np = "the" [adjective, p 1/4] noun, noun singular or plural (p 1/2);
//                Np is np capitalised; the verb agrees with the subject's number
//                adjective: big small red old
//                noun:      cat/cats dog/dogs bird/birds fox/foxes child/children
//                           mouse/mice
//                verb:      sees/see chases/chase likes/like finds/find follows/follow
//   sum       := "a + b = c."  a, b in 0..9, c = a + b           e.g. "3 + 4 = 7."
//              | "a - b = c."  a in 0..9, b in 0..a, c = a - b   e.g. "9 - 2 = 7."
//   count     := "count up from L to H: L L+1 ... H."  L in 0..9, H = L + (1..4)
//              | "count down from H to L: H ... L."
//   spell     := "spell W: w-o-r-d."  W one of the 12 noun forms or 4 adjectives
//
// Within a line, agreement, sums and the counted and spelled-out parts are determined by
// what comes before them, which a small model can learn and a reader can check; the
// uniform choices are the irreducible part. The text depends only on the seed (integer
// arithmetic, own generator: splitmix64 with rejection sampling), on every platform.
//
// Entropy. The grammar is unambiguous (each line has one derivation; the tests check
// it), so a line's probability is the product of its choices' probabilities and the
// entropy rate of the token stream (byte tokens, '\n' included) is
//
//   H = H(line) / E[tokens per line]       nats per token,
//
// computed exactly by synthetic_corpus_entropy() by enumerating every line. No model
// can reach a lower expected loss on this text.
//
// A model trained on windows of T targets that start at arbitrary positions does worse,
// since the window's first, partial line lacks its beginning. With S the part of the line
// the window starts in (from the window's first token to the '\n'), the best possible
// mean loss over a window is estimated as
//
//   L(T) = ( H(S) - H(S_0) + (T + 1 - E|S|) * H ) / T
//
// where H(S) - H(S_0) is the exact loss of the ideal predictor on S after its first token
// (which is an input, not a target), and the lines after S are charged the entropy rate H
// (exact for whole lines; the cut line at the window's end makes it approximate).
// synthetic_window_loss() computes it; it requires T + 1 >= the longest line.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

namespace etr::data {

class SyntheticCorpus {
 public:
  explicit SyntheticCorpus(uint64_t seed);

  // The next line, without its '\n'. When log_prob is not null, ln P(line) is added to it.
  std::string next_line(double* log_prob = nullptr);
  // Whole lines, each followed by '\n', until there are at least `bytes` bytes, cut to
  // exactly `bytes` (the last line may be incomplete). Throws OutOfMemory, naming the
  // size, when the memory cannot be had.
  std::string generate(size_t bytes);

 private:
  uint64_t state_;  // splitmix64
};

// Bytes a corpus of `tokens` byte tokens holds at its peak: its text (1 byte a token)
// and ByteTokenizer::encode's uint16 tokens (2 bytes a token). In double: never overflows.
inline double synthetic_corpus_bytes(uint64_t tokens) {
  return 3.0 * static_cast<double>(tokens);
}

struct SyntheticCorpusEntropy {
  double nats_per_token = 0;     // H(line) / E[tokens per line]
  double bits_per_token = 0;     // the same in bits
  double line_entropy_nats = 0;  // H(line)
  double mean_line_tokens = 0;   // E[tokens per line], '\n' included
  uint64_t distinct_lines = 0;   // lines of non-zero probability
  uint64_t derivations = 0;      // choice sequences; == distinct_lines (unambiguous)
};

// Exact, by enumerating every derivation of the grammar (about 18,000; milliseconds).
SyntheticCorpusEntropy synthetic_corpus_entropy();

struct SyntheticWindowLoss {
  double nats_per_target = 0;      // L(T), the estimate above
  double partial_line_nats = 0;    // H(S) - H(S_0)
  double mean_partial_tokens = 0;  // E|S|, '\n' included
  double first_token_nats = 0;     // H(S_0): the entropy of one token of the stream
};

// L(T) for windows of seq_len targets; InvalidArgument when seq_len + 1 is shorter than
// the longest line. Enumerates every suffix of every line (about a second).
SyntheticWindowLoss synthetic_window_loss(uint64_t seq_len);

// Calls visit(line, probability) for every derivation of the grammar, line without '\n'.
void for_each_synthetic_line(const std::function<void(std::string_view, double)>& visit);

}  // namespace etr::data
