// LearnedDeadlines: each collective's own deadline, learned from the durations it
// observed, so that a collective a peer never joins fails in seconds where the job's
// collectives take milliseconds, and nobody has to tune comm.timeout_s to the job.
//
// A communicator keeps one per kind of operation and size class (the op's name and the
// power of two above its bytes: an allreduce of 3 MB and one of 3 KB learn apart). Each
// class keeps its last kWindow durations (from the op's start on the progress engine to
// its end, so waiting for late peers is included). Once a class has kMinSamples, its
// deadline is
//     clamp(multiple x the 99th percentile of the window, floor, the fixed timeout)
// and before that, the fixed timeout (comm.timeout_s). The floor
// (comm.learned_timeout_floor_s) keeps rare stalls that are not failures (a rank's page
// faults, a slow file system, another job's burst on a shared host) below it; the
// multiple (comm.learned_timeout_multiple; 0 turns learning off) above the tail.
// Thread-safe: the progress engine's threads and an inline caller may record at once.
#pragma once

#include <array>
#include <chrono>
#include <cstddef>
#include <map>
#include <mutex>
#include <string>

#include "runtime/quantile_window.h"

namespace etr {

struct LearnedLimit {
  std::chrono::milliseconds timeout;  // the deadline to use
  bool learned = false;               // false: the fixed timeout (not enough samples, or off)
  double quantile_s = 0;              // the 99th percentile it was learned from
  size_t samples = 0;
};

class LearnedDeadlines {
 public:
  static constexpr size_t kWindow = 256;
  static constexpr size_t kMinSamples = 32;

  LearnedDeadlines(std::chrono::milliseconds fixed, double multiple, std::chrono::milliseconds floor)
      : fixed_(fixed), multiple_(multiple), floor_(floor) {}

  // The class of an operation: "<op>/<log2 of its bytes, rounded up>".
  static std::string key(const std::string& op, size_t bytes);
  // The deadline for the next operation of `key` (kept from the last recomputation: a
  // lookup, not a percentile, per operation).
  LearnedLimit limit(const std::string& key) const;
  void record(const std::string& key, std::chrono::steady_clock::duration took);
  // The text a timeout adds: how its deadline was chosen.
  std::string describe(const std::string& key, const LearnedLimit& l) const;

 private:
  std::chrono::milliseconds fixed_;
  double multiple_;
  std::chrono::milliseconds floor_;
  struct Class {
    QuantileWindow seconds{kWindow};  // the last kWindow durations
    LearnedLimit limit;          // recomputed every kRecompute records
    size_t since = 0;
  };
  static constexpr size_t kRecompute = 16;
  LearnedLimit compute(const QuantileWindow& seconds) const;

  mutable std::mutex mutex_;
  std::map<std::string, Class> classes_;
};

}  // namespace etr
