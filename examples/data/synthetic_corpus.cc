// SyntheticCorpus: the grammar of synthetic_corpus.h, written once against a Chooser that
// either draws choices at random (generation) or walks every choice sequence depth first
// (exact enumeration for the entropy), so that the two can never disagree.
#include "examples/data/synthetic_corpus.h"

#include <algorithm>
#include <cmath>
#include <exception>
#include <initializer_list>
#include <numeric>
#include <string>
#include <unordered_map>
#include <vector>

#include "examples/data/index_permutation.h"
#include "runtime/bytes.h"
#include "runtime/error.h"

namespace etr::data {

namespace {

// ---------------------------------------------------------------------------------------
// Choices

class Chooser {
 public:
  virtual ~Chooser() = default;
  size_t uniform(size_t n) { return pick(std::vector<uint32_t>(n, 1)); }
  size_t weighted(std::initializer_list<uint32_t> weights) { return pick(weights); }

 protected:
  // An index i with probability weights[i] / sum(weights); all weights > 0.
  virtual size_t pick(const std::vector<uint32_t>& weights) = 0;
};

class RandomChooser : public Chooser {
 public:
  RandomChooser(uint64_t& state, double* log_prob) : state_(state), log_prob_(log_prob) {}

 protected:
  size_t pick(const std::vector<uint32_t>& weights) override {
    const uint64_t total = std::accumulate(weights.begin(), weights.end(), uint64_t{0});
    uint64_t r = below(total);
    size_t i = 0;
    while (r >= weights[i]) r -= weights[i++];
    if (log_prob_) *log_prob_ += std::log(static_cast<double>(weights[i]) / total);
    return i;
  }

 private:
  uint64_t next() {  // splitmix64
    const uint64_t r = mix64(state_);
    state_ += 0x9E3779B97F4A7C15ULL;
    return r;
  }
  // Uniform in [0, n) by rejection: no modulo bias.
  uint64_t below(uint64_t n) {
    const uint64_t threshold = (0 - n) % n;  // 2^64 mod n
    for (;;) {
      const uint64_t x = next();
      if (x >= threshold) return x % n;
    }
  }

  uint64_t& state_;
  double* log_prob_;
};

// Replays a recorded prefix of choices and extends it with first alternatives; advance()
// moves to the next choice sequence in depth-first order.
class EnumeratingChooser : public Chooser {
 public:
  double probability() const { return probability_; }
  size_t choices() const { return path_.size(); }

  bool advance() {
    depth_ = 0;
    probability_ = 1.0;
    while (!path_.empty()) {
      Choice& last = path_.back();
      if (++last.index < last.weights.size()) return true;
      path_.pop_back();
    }
    return false;
  }

 protected:
  size_t pick(const std::vector<uint32_t>& weights) override {
    if (depth_ == path_.size()) path_.push_back({weights, 0});
    const Choice& c = path_[depth_++];
    const uint64_t total = std::accumulate(c.weights.begin(), c.weights.end(), uint64_t{0});
    probability_ *= static_cast<double>(c.weights[c.index]) / static_cast<double>(total);
    return c.index;
  }

 private:
  struct Choice {
    std::vector<uint32_t> weights;
    size_t index;
  };
  std::vector<Choice> path_;
  size_t depth_ = 0;
  double probability_ = 1.0;
};

// ---------------------------------------------------------------------------------------
// The grammar

struct WordPair {
  std::string_view singular;
  std::string_view plural;
};

constexpr std::string_view kAdjectives[] = {"big", "small", "red", "old"};
constexpr WordPair kNouns[] = {{"cat", "cats"},  {"dog", "dogs"},       {"bird", "birds"},
                               {"fox", "foxes"}, {"child", "children"}, {"mouse", "mice"}};
// Third person present: singular subject "sees", plural subject "see".
constexpr WordPair kVerbs[] = {{"sees", "see"},
                               {"chases", "chase"},
                               {"likes", "like"},
                               {"finds", "find"},
                               {"follows", "follow"}};

constexpr size_t kNounCount = std::size(kNouns);
constexpr size_t kAdjectiveCount = std::size(kAdjectives);

// "the [adjective] noun"; returns whether the noun is plural.
bool noun_phrase(Chooser& c, std::string& out) {
  out += "the ";
  if (c.weighted({3, 1}) == 1) {
    out += kAdjectives[c.uniform(kAdjectiveCount)];
    out += ' ';
  }
  const WordPair& noun = kNouns[c.uniform(kNounCount)];
  const bool plural = c.uniform(2) == 1;
  out += plural ? noun.plural : noun.singular;
  return plural;
}

void sentence(Chooser& c, std::string& out) {
  const size_t start = out.size();
  const bool plural = noun_phrase(c, out);
  out[start] = 'T';  // capitalise "the"
  const WordPair& verb = kVerbs[c.uniform(std::size(kVerbs))];
  out += ' ';
  out += plural ? verb.plural : verb.singular;
  out += ' ';
  noun_phrase(c, out);
  out += '.';
}

// Appends the parts in order. (Appending piece by piece, not `a + b + c`: GCC 12 at -O3
// warns falsely about overlapping memcpy in chains of string temporaries, -Wrestrict.)
void append(std::string& out, std::initializer_list<std::string_view> parts) {
  for (std::string_view p : parts) out += p;
}

void sum(Chooser& c, std::string& out) {
  const bool plus = c.uniform(2) == 0;
  const size_t a = c.uniform(10);
  const size_t b = plus ? c.uniform(10) : c.uniform(a + 1);
  const size_t result = plus ? a + b : a - b;
  append(out, {std::to_string(a), plus ? " + " : " - ", std::to_string(b), " = ",
               std::to_string(result), "."});
}

void count(Chooser& c, std::string& out) {
  const bool up = c.uniform(2) == 0;
  const size_t low = c.uniform(10);
  const size_t high = low + 1 + c.uniform(4);
  const size_t from = up ? low : high;
  const size_t to = up ? high : low;
  append(out, {up ? "count up from " : "count down from ", std::to_string(from), " to ",
               std::to_string(to), ":"});
  for (size_t i = 0; i <= high - low; ++i)
    append(out, {" ", std::to_string(up ? low + i : high - i)});
  out += '.';
}

void spell(Chooser& c, std::string& out) {
  const size_t i = c.uniform(2 * kNounCount + kAdjectiveCount);
  const std::string_view word = i < 2 * kNounCount
                                    ? (i % 2 ? kNouns[i / 2].plural : kNouns[i / 2].singular)
                                    : kAdjectives[i - 2 * kNounCount];
  out += "spell ";
  out += word;
  out += ": ";
  for (size_t k = 0; k < word.size(); ++k) {
    if (k > 0) out += '-';
    out += word[k];
  }
  out += '.';
}

void line(Chooser& c, std::string& out) {
  switch (c.weighted({4, 3, 2, 1})) {
    case 0:
      sentence(c, out);
      break;
    case 1:
      sum(c, out);
      break;
    case 2:
      count(c, out);
      break;
    default:
      spell(c, out);
      break;
  }
}

}  // namespace

SyntheticCorpus::SyntheticCorpus(uint64_t seed) : state_(mix64(seed)) {}

std::string SyntheticCorpus::next_line(double* log_prob) {
  RandomChooser chooser(state_, log_prob);
  std::string out;
  line(chooser, out);
  return out;
}

std::string SyntheticCorpus::generate(size_t bytes) {
  std::string text;
  try {
    text.reserve(bytes + 64);
  } catch (const std::exception& e) {  // bad_alloc, or length_error past max_size()
    throw OutOfMemory("cannot allocate " + format_bytes(static_cast<double>(bytes)) +
                          " for the synthetic corpus (" + e.what() +
                          "); ask for fewer tokens or free memory.",
                      bytes, 0, 0, 0);
  }
  while (text.size() < bytes) {
    text += next_line();
    text += '\n';
  }
  text.resize(bytes);
  return text;
}

void for_each_synthetic_line(const std::function<void(std::string_view, double)>& visit) {
  EnumeratingChooser chooser;
  std::string out;
  do {
    out.clear();
    line(chooser, out);
    visit(out, chooser.probability());
  } while (chooser.advance());
}

SyntheticCorpusEntropy synthetic_corpus_entropy() {
  std::unordered_map<std::string, double> probability;  // summed over derivations
  SyntheticCorpusEntropy e;
  for_each_synthetic_line([&](std::string_view text, double p) {
    probability[std::string(text)] += p;
    ++e.derivations;
  });
  for (const auto& [text, p] : probability) {
    e.line_entropy_nats -= p * std::log(p);
    e.mean_line_tokens += p * static_cast<double>(text.size() + 1);  // + '\n'
  }
  e.distinct_lines = probability.size();
  e.nats_per_token = e.line_entropy_nats / e.mean_line_tokens;
  e.bits_per_token = e.nats_per_token / std::log(2.0);
  return e;
}

SyntheticWindowLoss synthetic_window_loss(uint64_t seq_len) {
  const SyntheticCorpusEntropy e = synthetic_corpus_entropy();
  // A window starts at position j of line L ('\n' included) with probability
  // P(L) / E[tokens per line] in a long stream; S = L[j..] + '\n'.
  std::unordered_map<std::string, double> suffix_probability;
  double first_token[256] = {};
  size_t longest = 0;
  SyntheticWindowLoss w;
  for_each_synthetic_line([&](std::string_view text, double p) {
    const std::string line = std::string(text) + '\n';
    longest = std::max(longest, line.size());
    const double q = p / e.mean_line_tokens;
    for (size_t j = 0; j < line.size(); ++j) {
      suffix_probability[line.substr(j)] += q;
      first_token[static_cast<unsigned char>(line[j])] += q;
      w.mean_partial_tokens += q * static_cast<double>(line.size() - j);
    }
  });
  if (seq_len + 1 < longest) {
    throw InvalidArgument("the window loss estimate needs windows of at least " +
                          std::to_string(longest) + " tokens (the longest line), not " +
                          std::to_string(seq_len + 1));
  }
  double suffix_entropy = 0;
  for (const auto& [suffix, q] : suffix_probability) suffix_entropy -= q * std::log(q);
  for (double q : first_token) {
    if (q > 0) w.first_token_nats -= q * std::log(q);
  }
  w.partial_line_nats = suffix_entropy - w.first_token_nats;
  const auto t = static_cast<double>(seq_len);
  w.nats_per_target =
      (w.partial_line_nats + (t + 1 - w.mean_partial_tokens) * e.nats_per_token) / t;
  return w;
}

}  // namespace etr::data
