// Says how far a long transfer is (a checkpoint's save or load): nothing while it is
// short, then a line every few seconds, then one at the end.
//
//   ByteProgress p(&log, "checkpoint step 120: loading rank 0's share", total_bytes);
//   for (...) { read(chunk); p.add(chunk_bytes); }
//   p.finish();
//
// logs (only when the transfer outlasts `quiet`):
//   checkpoint step 120: loading rank 0's share: 1.20 GiB of 3.40 GiB (35%), 410 MiB/s
//   checkpoint step 120: loading rank 0's share: done, 3.40 GiB in 8.3 s
// One thread calls add() and finish(); the Logger serialises the lines.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include "runtime/log.h"

namespace etr {

class ByteProgress {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr std::chrono::milliseconds kQuiet{2000};
  static constexpr std::chrono::milliseconds kEvery{2000};

  // `log` null: silent (ranks other than the one that reports).
  ByteProgress(Logger* log, std::string what, uint64_t total,
               std::chrono::milliseconds quiet = kQuiet, std::chrono::milliseconds every = kEvery);

  void add(uint64_t bytes);
  // The closing line, when any progress line was written.
  void finish();
  uint64_t done() const { return done_; }
  int lines() const { return lines_; }

 private:
  Logger* log_;
  std::string what_;
  uint64_t total_;
  std::chrono::milliseconds quiet_, every_;
  Clock::time_point start_, next_;
  uint64_t done_ = 0;
  int lines_ = 0;
};

}  // namespace etr
