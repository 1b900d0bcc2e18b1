// ByteProgress (runtime/byte_progress.h): the lines a long transfer writes, read back
// from the Logger's sink.
#include "runtime/byte_progress.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <string>

namespace etr {
namespace {

using std::chrono::milliseconds;

// Runs `body` with a Logger writing into memory; returns what it wrote.
template <typename Body>
std::string logged(Body body) {
  char* buf = nullptr;
  size_t size = 0;
  FILE* sink = open_memstream(&buf, &size);
  {
    Logger log("etr", sink);
    log.set_level(LogLevel::kInfo);
    body(log);
  }
  std::fclose(sink);
  std::string out(buf, size);
  std::free(buf);
  return out;
}

TEST(ByteProgress, ShortTransfersSayNothing) {
  const std::string out = logged([](Logger& log) {
    ByteProgress p(&log, "load", 3000, milliseconds(60000), milliseconds(60000));
    p.add(1000);
    p.add(2000);
    p.finish();
    EXPECT_EQ(p.done(), 3000u);
    EXPECT_EQ(p.lines(), 0);
  });
  EXPECT_EQ(out, "");
}

TEST(ByteProgress, LongTransfersSayHowFarAndWhenDone) {
  const std::string out = logged([](Logger& log) {
    ByteProgress p(&log, "checkpoint of step 7: rank 0 writing its shard", 4u << 20,
                   milliseconds(0), milliseconds(0));
    p.add(1u << 20);
    p.add(1u << 20);
    p.add(2u << 20);  // the last bytes: no progress line, the closing one follows
    p.finish();
    EXPECT_EQ(p.lines(), 3);
  });
  EXPECT_NE(out.find("checkpoint of step 7: rank 0 writing its shard: 1 MiB of 4 MiB (25%)"),
            std::string::npos) << out;
  EXPECT_NE(out.find("2 MiB of 4 MiB (50%)"), std::string::npos) << out;
  EXPECT_NE(out.find("checkpoint of step 7: rank 0 writing its shard: done, 4 MiB in "),
            std::string::npos) << out;
  EXPECT_EQ(out.find("100%"), std::string::npos) << out;
}

TEST(ByteProgress, WithoutALoggerItOnlyCounts) {
  ByteProgress p(nullptr, "x", 10, milliseconds(0), milliseconds(0));
  p.add(4);
  p.finish();
  EXPECT_EQ(p.done(), 4u);
  EXPECT_EQ(p.lines(), 0);
}

}  // namespace
}  // namespace etr
