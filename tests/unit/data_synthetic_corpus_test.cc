// Tests of examples/data/synthetic_corpus.h and token_statistics.h: the corpus is
// deterministic, every line follows the grammar (sums are right, counts count, spellings
// spell, verbs agree), the grammar is unambiguous, and the exact entropy agrees with a
// Monte Carlo estimate and sits below the empirical bigram and unigram entropies.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "examples/data/byte_tokenizer.h"
#include "examples/data/synthetic_corpus.h"
#include "examples/data/token_statistics.h"
#include "runtime/error.h"

namespace etr::data {
namespace {

std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// Checks one line against the grammar; returns "" or what is wrong.
std::string check_line(const std::string& line) {
  static const std::regex sum(R"(^(\d) ([+-]) (\d) = (\d+)\.$)");
  static const std::regex count(R"(^count (up|down) from (\d+) to (\d+):((?: \d+)+)\.$)");
  static const std::regex spell(R"(^spell ([a-z]+): ([a-z](?:-[a-z])*)\.$)");
  static const std::regex sentence(
      R"(^The (?:(?:big|small|red|old) )?(\w+) (\w+) the (?:(?:big|small|red|old) )?(\w+)\.$)");
  static const std::set<std::string> singular = {"cat", "dog", "bird", "fox", "child", "mouse"};
  static const std::set<std::string> plural = {"cats",  "dogs",     "birds",
                                               "foxes", "children", "mice"};
  static const std::map<std::string, std::string> verbs = {{"sees", "see"},
                                                           {"chases", "chase"},
                                                           {"likes", "like"},
                                                           {"finds", "find"},
                                                           {"follows", "follow"}};
  std::smatch m;
  if (std::regex_match(line, m, sum)) {
    const int a = std::stoi(m[1]), b = std::stoi(m[3]), c = std::stoi(m[4]);
    const int want = m[2] == "+" ? a + b : a - b;
    return c == want && want >= 0 ? "" : "wrong sum";
  }
  if (std::regex_match(line, m, count)) {
    const int from = std::stoi(m[2]), to = std::stoi(m[3]);
    const int step = m[1] == "up" ? 1 : -1;
    if ((to - from) * step < 1 || (to - from) * step > 4) return "wrong count range";
    std::string want;
    for (int v = from; v != to + step; v += step) want += " " + std::to_string(v);
    return m[4] == want ? "" : "wrong count";
  }
  if (std::regex_match(line, m, spell)) {
    std::string letters = m[2];
    letters.erase(std::remove(letters.begin(), letters.end(), '-'), letters.end());
    return letters == m[1].str() ? "" : "wrong spelling";
  }
  if (std::regex_match(line, m, sentence)) {
    const std::string subject = m[1], verb = m[2], object = m[3];
    const bool subject_plural = plural.count(subject) > 0;
    if (!subject_plural && !singular.count(subject)) return "unknown subject";
    if (!plural.count(object) && !singular.count(object)) return "unknown object";
    bool verb_plural = false;
    bool known = false;
    for (const auto& [sg, pl] : verbs) {
      if (verb == sg) known = true;
      if (verb == pl) known = verb_plural = true;
    }
    if (!known) return "unknown verb";
    return verb_plural == subject_plural ? "" : "verb does not agree with the subject";
  }
  return "matches no rule";
}

// A size no memory holds is OutOfMemory naming the corpus, not std::length_error or
// std::bad_alloc from the string.
TEST(SyntheticCorpus, ImpossibleSizeIsOutOfMemoryNamingTheCorpus) {
  SyntheticCorpus corpus(1);
  try {
    corpus.generate(SIZE_MAX - 100);
    FAIL() << "generate(SIZE_MAX - 100) returned";
  } catch (const OutOfMemory& e) {
    EXPECT_NE(std::string(e.what()).find("for the synthetic corpus"), std::string::npos)
        << e.what();
  }
  EXPECT_EQ(synthetic_corpus_bytes(1000), 3000.0);
}

TEST(SyntheticCorpus, SameSeedSameTextOtherSeedOtherText) {
  SyntheticCorpus a(1), b(1), c(2);
  const std::string ta = a.generate(20000);
  EXPECT_EQ(ta, b.generate(20000));
  EXPECT_NE(ta, c.generate(20000));
  EXPECT_EQ(ta.size(), 20000u);
  // A shorter request is a prefix of a longer one.
  EXPECT_EQ(SyntheticCorpus(1).generate(777), ta.substr(0, 777));
}

// The text of a seed is the same in every build and on every platform (own generator,
// integer arithmetic only); the demo and tests rely on it.
TEST(SyntheticCorpus, FirstLinesArePinned) {
  SyntheticCorpus corpus(1);
  std::string first;
  for (int i = 0; i < 4; ++i) first += corpus.next_line() + "\n";
  EXPECT_EQ(first,
            "count up from 2 to 4: 2 3 4.\n"
            "count up from 9 to 13: 9 10 11 12 13.\n"
            "spell dogs: d-o-g-s.\n"
            "The bird finds the foxes.\n");
}

TEST(SyntheticCorpus, EveryLineFollowsTheGrammar) {
  SyntheticCorpus corpus(99);
  std::map<char, int> kinds;  // first character: T(he), digit, c(ount), s(pell)
  for (int i = 0; i < 20000; ++i) {
    const std::string line = corpus.next_line();
    ASSERT_EQ(check_line(line), "") << line;
    kinds[std::isdigit(static_cast<unsigned char>(line[0])) ? '0' : line[0]]++;
  }
  // Weights 4:3:2:1 of 20000 lines, within 5 standard deviations.
  EXPECT_NEAR(kinds['T'], 8000, 350);
  EXPECT_NEAR(kinds['0'], 6000, 330);
  EXPECT_NEAR(kinds['c'], 4000, 290);
  EXPECT_NEAR(kinds['s'], 2000, 215);
}

TEST(SyntheticCorpus, GeneratedTextIsLinesOfTheGrammar) {
  const std::string text = SyntheticCorpus(5).generate(50000);
  std::vector<std::string> lines = split_lines(text);
  lines.pop_back();  // the last line is cut at 50000 bytes
  for (const std::string& line : lines) ASSERT_EQ(check_line(line), "") << line;
  const std::vector<uint16_t> tokens = ByteTokenizer::encode(text);
  EXPECT_EQ(ByteTokenizer::decode_for_display(tokens), text);  // printable as is
}

TEST(SyntheticCorpus, EnumerationIsUnambiguousAndSumsToOne) {
  double total = 0;
  uint64_t derivations = 0;
  std::set<std::string> lines;
  for_each_synthetic_line([&](std::string_view line, double p) {
    total += p;
    ++derivations;
    lines.insert(std::string(line));
    EXPECT_EQ(check_line(std::string(line)), "") << line;
  });
  EXPECT_NEAR(total, 1.0, 1e-9);
  EXPECT_EQ(lines.size(), derivations);  // one derivation per line
  const SyntheticCorpusEntropy e = synthetic_corpus_entropy();
  EXPECT_EQ(e.derivations, derivations);
  EXPECT_EQ(e.distinct_lines, lines.size());
  // Every generated line is one the enumeration knows.
  SyntheticCorpus corpus(3);
  for (int i = 0; i < 2000; ++i) ASSERT_TRUE(lines.count(corpus.next_line()));
}

TEST(SyntheticCorpus, ExactEntropyMatchesMonteCarloAndBoundsTheNgrams) {
  const SyntheticCorpusEntropy e = synthetic_corpus_entropy();
  // Monte Carlo: mean -ln P(line) over mean line length, from the generator's own log_probs.
  SyntheticCorpus corpus(7);
  double nats = 0, tokens = 0;
  for (int i = 0; i < 100000; ++i) {
    double log_prob = 0;
    tokens += static_cast<double>(corpus.next_line(&log_prob).size() + 1);
    nats -= log_prob;
  }
  EXPECT_NEAR(nats / tokens, e.nats_per_token, 0.01 * e.nats_per_token);
  EXPECT_NEAR(e.bits_per_token, e.nats_per_token / std::log(2.0), 1e-12);

  const std::string text = SyntheticCorpus(11).generate(2'000'000);
  const NgramEntropy h = empirical_ngram_entropy(ByteTokenizer::encode(text), 256);
  EXPECT_LT(e.nats_per_token, h.bigram_nats);
  EXPECT_LT(h.bigram_nats, h.unigram_nats);
  std::printf(
      "synthetic corpus: exact entropy rate %.4f nats/token (%.4f bits), H(line) %.3f nats, "
      "%.3f tokens/line, %llu distinct lines; empirical on 2 MB: unigram %.4f nats, bigram "
      "%.4f nats; ln 256 = %.4f\n",
      e.nats_per_token, e.bits_per_token, e.line_entropy_nats, e.mean_line_tokens,
      static_cast<unsigned long long>(e.distinct_lines), h.unigram_nats, h.bigram_nats,
      std::log(256.0));
}

TEST(SyntheticCorpus, WindowLossEstimateLiesAboveTheRateAndApproachesIt) {
  const SyntheticCorpusEntropy e = synthetic_corpus_entropy();
  double previous = 1e9;
  for (uint64_t t : {64, 128, 256, 1024, 1 << 16}) {
    const SyntheticWindowLoss w = synthetic_window_loss(t);
    EXPECT_GT(w.nats_per_target, e.nats_per_token) << t;
    EXPECT_LT(w.nats_per_target, previous) << t;
    previous = w.nats_per_target;
    std::printf(
        "windows of %llu targets: estimated best loss %.4f nats (partial line %.3f "
        "nats over %.2f tokens)\n",
        static_cast<unsigned long long>(t), w.nats_per_target, w.partial_line_nats,
        w.mean_partial_tokens);
  }
  EXPECT_NEAR(previous, e.nats_per_token, 0.001);
  // H(S_0) is the entropy of one token of the stream: the unigram entropy.
  const std::string text = SyntheticCorpus(13).generate(2'000'000);
  const NgramEntropy h = empirical_ngram_entropy(ByteTokenizer::encode(text), 256);
  EXPECT_NEAR(synthetic_window_loss(64).first_token_nats, h.unigram_nats, 0.01);
  EXPECT_THROW(synthetic_window_loss(8), InvalidArgument);
}

TEST(TokenStatistics, KnownSequences) {
  const std::vector<uint16_t> constant(1000, 7);
  NgramEntropy h = empirical_ngram_entropy(constant, 256);
  EXPECT_NEAR(h.unigram_nats, 0.0, 1e-12);
  EXPECT_NEAR(h.bigram_nats, 0.0, 1e-12);

  std::vector<uint16_t> alternating(1000);
  for (size_t i = 0; i < alternating.size(); ++i) alternating[i] = i % 2;
  h = empirical_ngram_entropy(alternating, 2);
  EXPECT_NEAR(h.unigram_nats, std::log(2.0), 1e-12);
  EXPECT_NEAR(h.bigram_nats, 0.0, 1e-12);  // the next token is determined

  std::vector<uint16_t> cycle(4096);
  for (size_t i = 0; i < cycle.size(); ++i) cycle[i] = static_cast<uint16_t>((i * 7) % 16);
  h = empirical_ngram_entropy(cycle, 16);
  EXPECT_NEAR(h.unigram_nats, std::log(16.0), 1e-12);
  EXPECT_NEAR(h.bigram_nats, 0.0, 1e-12);

  EXPECT_EQ(empirical_ngram_entropy({}, 256).unigram_nats, 0.0);
  const std::vector<uint16_t> bad = {1, 2, 300};
  EXPECT_THROW(empirical_ngram_entropy(bad, 256), InvalidArgument);
}

}  // namespace
}  // namespace etr::data
