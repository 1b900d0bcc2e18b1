// Tests of examples/data/window_space.h and eval_iterator.h: windows stay inside their
// split, held-out windows never share a token with training windows, the evaluation
// iterator covers the held-out windows once across ranks, in step on every rank.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "examples/data/eval_iterator.h"
#include "examples/data/window_space.h"
#include "runtime/error.h"

namespace etr::data {
namespace {

TEST(WindowSpace, CountsWindowsThatFit) {
  EXPECT_EQ((WindowSpace{0, 9, 8, 8}.count()), 1u);
  EXPECT_EQ((WindowSpace{0, 8, 8, 8}.count()), 0u);
  EXPECT_EQ((WindowSpace{0, 17, 8, 8}.count()), 2u);  // 0..8, 8..16
  EXPECT_EQ((WindowSpace{0, 16, 8, 8}.count()), 1u);
  EXPECT_EQ((WindowSpace{10, 20, 4, 1}.count()), 6u);  // starts 10..15
  EXPECT_EQ((WindowSpace{10, 5, 4, 1}.count()), 0u);
  EXPECT_EQ((WindowSpace{0, 100, 4, 0}.count()), 0u);  // no stride: nothing
  const WindowSpace w{10, 20, 4, 3};                   // starts 10, 13
  EXPECT_EQ(w.count(), 2u);
  EXPECT_EQ(w.offset(1), 13u);
  EXPECT_THROW(w.offset(2), InvalidArgument);
}

TEST(WindowSpace, HeldOutWindowsNeverOverlapTrainingWindows) {
  for (uint64_t tokens : {10, 101, 1000, 4099}) {
    for (uint64_t seq_len : {1, 3, 8}) {
      for (double fraction : {0.0, 0.1, 0.25, 0.5}) {
        DataSplit s;
        try {
          s = split_windows(tokens, seq_len, fraction);
        } catch (const ConfigError&) {
          continue;  // too little data for this combination (tested below)
        }
        const uint64_t boundary = s.val.begin;
        EXPECT_EQ(s.train.end, boundary);
        EXPECT_EQ(s.val.end, tokens);
        EXPECT_EQ(tokens - boundary, static_cast<uint64_t>(static_cast<double>(tokens) * fraction));
        for (uint64_t w = 0; w < s.train.count(); ++w)
          ASSERT_LE(s.train.offset(w) + seq_len + 1, boundary);
        for (uint64_t w = 0; w < s.val.count(); ++w) {
          ASSERT_GE(s.val.offset(w), boundary);
          ASSERT_LE(s.val.offset(w) + seq_len + 1, tokens);
        }
        // With the default stride the training windows tile their split: each token after
        // the first is a target once, and less than a window is left over at the end.
        EXPECT_LT(boundary - (s.train.offset(s.train.count() - 1) + seq_len + 1), seq_len);
      }
    }
  }
}

TEST(WindowSpace, SplitErrorsSayWhatToChange) {
  auto message = [](auto&& f) -> std::string {
    try {
      f();
    } catch (const ConfigError& e) {
      return e.what();
    }
    return "no ConfigError";
  };
  EXPECT_NE(message([] { split_windows(100, 0, 0.1); }).find("at least 1"), std::string::npos);
  EXPECT_NE(message([] { split_windows(100, 8, 1.0); }).find("not in [0, 1)"), std::string::npos);
  EXPECT_NE(message([] { split_windows(100, 8, -0.5); }).find("not in [0, 1)"), std::string::npos);
  EXPECT_NE(message([] { split_windows(8, 8, 0.0); }).find("fewer than one window of 9"),
            std::string::npos);
  const std::string small_val = message([] { split_windows(100, 8, 0.05); });
  EXPECT_NE(small_val.find("held-out split"), std::string::npos) << small_val;
  EXPECT_NE(small_val.find("5 tokens"), std::string::npos) << small_val;
}

TEST(WindowSpace, CustomTrainingStride) {
  const DataSplit s = split_windows(1000, 16, 0.1, 1);  // every position a window start
  EXPECT_EQ(s.train.stride, 1u);
  EXPECT_EQ(s.train.count(), 900u - 17 + 1);
  EXPECT_EQ(s.val.stride, 16u);
}

TEST(WindowSpace, CopyWindowShiftsTargetsByOne) {
  std::vector<uint16_t> tokens(20);
  for (uint16_t i = 0; i < 20; ++i) tokens[i] = static_cast<uint16_t>(100 + i);
  std::vector<int32_t> in(5), out(5);
  copy_window(tokens, 14, in, out);  // the last window of 6 tokens that fits
  for (int t = 0; t < 5; ++t) {
    EXPECT_EQ(in[static_cast<size_t>(t)], 114 + t);
    EXPECT_EQ(out[static_cast<size_t>(t)], 115 + t);
  }
  EXPECT_THROW(copy_window(tokens, 15, in, out), InvalidArgument);
  EXPECT_THROW(copy_window(tokens, 100, in, out), InvalidArgument);
  std::vector<int32_t> short_out(4);
  EXPECT_THROW(copy_window(tokens, 0, in, short_out), InvalidArgument);
}

TEST(EvalIterator, CoversHeldOutWindowsOnceAcrossRanksInStep) {
  const WindowSpace val{1000, 1000 + 23 * 4 + 1, 4, 4};  // 23 windows
  ASSERT_EQ(val.count(), 23u);
  for (int world = 1; world <= 5; ++world) {
    for (uint64_t batch : {1, 3, 8, 50}) {
      for (uint64_t limit : {0, 10}) {
        const uint64_t n = limit ? limit : 23;
        std::vector<int> seen(23, 0);
        uint64_t batches = 0;
        for (int r = 0; r < world; ++r) {
          EvalIterator it(val, batch, limit, r, world);
          if (r == 0) batches = it.batches();
          EXPECT_EQ(it.batches(), batches) << "ranks must run the same number of batches";
          std::vector<uint64_t> offsets;
          uint64_t calls = 0;
          while (it.next(offsets)) {
            ++calls;
            EXPECT_LE(offsets.size(), batch);
            for (uint64_t off : offsets) {
              ASSERT_EQ((off - 1000) % 4, 0u);
              ++seen[(off - 1000) / 4];
            }
          }
          EXPECT_TRUE(offsets.empty());
          EXPECT_EQ(calls, batches);
          // Deterministic: a reset iterator yields the same first batch.
          it.reset();
          std::vector<uint64_t> again;
          EvalIterator fresh(val, batch, limit, r, world);
          std::vector<uint64_t> first;
          it.next(again);
          fresh.next(first);
          EXPECT_EQ(again, first);
        }
        for (uint64_t w = 0; w < 23; ++w)
          EXPECT_EQ(seen[w], w < n ? 1 : 0) << "world " << world << " window " << w;
      }
    }
  }
}

TEST(EvalIterator, RejectsBadArguments) {
  const WindowSpace val{0, 100, 4, 4};
  EXPECT_THROW(EvalIterator(val, 0), InvalidArgument);
  EXPECT_THROW(EvalIterator(val, 4, 0, 2, 2), InvalidArgument);
  EXPECT_THROW(EvalIterator(val, 4, 0, -1, 2), InvalidArgument);
  EvalIterator empty(WindowSpace{0, 3, 4, 4}, 4);
  std::vector<uint64_t> offsets;
  EXPECT_EQ(empty.batches(), 0u);
  EXPECT_FALSE(empty.next(offsets));
}

}  // namespace
}  // namespace etr::data
