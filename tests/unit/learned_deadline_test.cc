// Learned collective deadlines (collectives/learned_deadline.h): the fixed timeout until a
// class has 32 samples, then the multiple of its 99th percentile within [floor, fixed];
// classes by kind and size; off at multiple 0; the window forgets old durations.
#include "collectives/learned_deadline.h"

#include <gtest/gtest.h>

namespace etr {
namespace {

using namespace std::chrono_literals;

TEST(LearnedDeadlines, FixedUntilEnoughSamplesThenTenTimesThe99thPercentile) {
  LearnedDeadlines d(300s, 10, 1s);
  const std::string k = LearnedDeadlines::key("allreduce", 3000);
  EXPECT_EQ(k, "allreduce/12");
  for (size_t i = 0; i + 1 < LearnedDeadlines::kMinSamples; ++i) d.record(k, 50ms);
  EXPECT_EQ(d.limit(k).timeout, 300s);
  EXPECT_FALSE(d.limit(k).learned);
  d.record(k, 50ms);
  LearnedLimit l = d.limit(k);
  EXPECT_TRUE(l.learned);
  EXPECT_NEAR(l.quantile_s, 0.05, 1e-9);
  EXPECT_EQ(l.timeout, 1s) << "10 x 50 ms is below the floor";
  // A slower tail: 100 samples with the slowest at 400 ms and the 99th at 300 ms.
  LearnedDeadlines t(300s, 10, 1s);
  for (int i = 0; i < 98; ++i) t.record(k, 100ms);
  t.record(k, 300ms);
  t.record(k, 400ms);
  for (int i = 0; i < 12; ++i) t.record(k, 100ms);  // 112: recomputed at a multiple of 16
  l = t.limit(k);
  EXPECT_NEAR(l.quantile_s, 0.3, 1e-9) << "the 99th percentile of 112, not the maximum";
  EXPECT_EQ(l.timeout, 3000ms);
  EXPECT_NE(t.describe(k, l).find("10 x their 99th percentile of 0.3 s"), std::string::npos) << t.describe(k, l);
  // Never above the fixed timeout.
  LearnedDeadlines capped(2s, 10, 1s);
  for (size_t i = 0; i < LearnedDeadlines::kMinSamples; ++i) capped.record(k, 500ms);
  EXPECT_EQ(capped.limit(k).timeout, 2s);
  EXPECT_FALSE(capped.limit(k).learned);
}

TEST(LearnedDeadlines, ClassesLearnApartAndOldDurationsAreForgotten) {
  LearnedDeadlines d(300s, 10, 100ms);
  const std::string small = LearnedDeadlines::key("allreduce", 16), big = LearnedDeadlines::key("allreduce", 64 << 20);
  EXPECT_NE(small, big);
  EXPECT_NE(LearnedDeadlines::key("allgather", 16), small);
  for (size_t i = 0; i < LearnedDeadlines::kMinSamples; ++i) {
    d.record(small, 1ms);
    d.record(big, 200ms);
  }
  EXPECT_EQ(d.limit(small).timeout, 100ms);
  EXPECT_EQ(d.limit(big).timeout, 2000ms);
  // A window of fast ones later, the slow start no longer counts.
  for (size_t i = 0; i < LearnedDeadlines::kWindow; ++i) d.record(big, 20ms);
  EXPECT_EQ(d.limit(big).timeout, 200ms);
}

TEST(LearnedDeadlines, OffAtMultipleZero) {
  LearnedDeadlines d(300s, 0, 1s);
  const std::string k = LearnedDeadlines::key("allreduce", 16);
  for (int i = 0; i < 100; ++i) d.record(k, 1ms);
  EXPECT_EQ(d.limit(k).timeout, 300s);
  EXPECT_FALSE(d.limit(k).learned);
}

}  // namespace
}  // namespace etr
