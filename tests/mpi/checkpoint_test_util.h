// Helpers of the multi-rank checkpoint tests (checkpoint_*_test.cc): the tiny training
// config, a temporary directory every rank agrees on, groups of the first n ranks, a
// snapshot of a Trainer's state, a logger whose output a test can read back, and file
// helpers for corrupting checkpoints.
#pragma once

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "examples/data/sampler.h"
#include "examples/train/trainer.h"
#include "runtime/config/train_config.h"
#include "runtime/group.h"
#include "runtime/log.h"

namespace etr::testing {

// The tiny GPT (2 layers, d_model 64, seq_len 64) with a global batch of 10 in
// micro-batches of 2: at 3 and 4 ranks the shares are uneven (4+3+3, 3+3+2+2), so a
// checkpoint moves between ranks that ran differently shaped micro-batches. One thread
// per rank; no evaluation, no progress line. `overrides` as etr-train's --set.
TrainConfig tiny_config(const std::vector<std::string>& overrides);

// A logger for the trainers of these tests that prints `level` and above (one logger
// per process; each call sets its level).
Logger& test_log(LogLevel level = LogLevel::kWarn);

// A directory created by rank 0 of `group` and known to every rank; rank 0 deletes it
// when the object is destroyed (after a barrier, so no rank still uses it). Collective
// construction and destruction.
class SharedTempDir {
 public:
  SharedTempDir(const Group& group, const std::string& tag);
  ~SharedTempDir();
  SharedTempDir(const SharedTempDir&) = delete;
  SharedTempDir& operator=(const SharedTempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }

 private:
  const Group& group_;
  std::filesystem::path path_;
};

// A barrier whose waiting ranks sleep instead of spinning: the tests run more ranks
// than cores, and ranks that sit out a sub-group's run must leave the cores to it.
void idle_barrier(const Group& group);

// Runs `body`, turning an exception into a test failure: for the part of a test that
// only some ranks run, so that one rank's exception cannot leave the others waiting in
// the next collective.
void guarded(const std::function<void()>& body);

// The first n ranks of the test's world as a group ("first-n"); nothing on the others.
// Collective over the world.
std::optional<Group> first_ranks(int n);

// A Trainer's whole saved state: parameters, AdamW moments ([numel] each, the flat
// layout's padding included) and data position.
struct TrainState {
  std::vector<float> params, m, v;
  data::DataPosition position;
};
TrainState snapshot(train::Trainer& t);
// Rank `root` of `group` sends its state to every rank (the others' vectors are resized).
void broadcast(TrainState& s, int root, const Group& group);
void broadcast(std::vector<float>& v, int root, const Group& group);
void broadcast(std::vector<double>& v, int root, const Group& group);

// True when a and b have the same size and bytes.
bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b);
// max |a_i - b_i| (infinity for different sizes).
double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b);

// A Logger writing into a temporary file that text() reads back.
class CapturedLog {
 public:
  explicit CapturedLog(LogLevel level = LogLevel::kInfo);
  ~CapturedLog();
  CapturedLog(const CapturedLog&) = delete;
  CapturedLog& operator=(const CapturedLog&) = delete;
  Logger& log() { return log_; }
  // What was logged since construction or the last clear().
  std::string text() const;
  void clear();

 private:
  FILE* file_;
  Logger log_;
  long start_ = 0;
};

// Whole-file contents ("" for a file that cannot be read) and a replacement of them.
std::string read_bytes(const std::filesystem::path& path);
void write_bytes(const std::filesystem::path& path, const std::string& bytes);

// The regular files of a directory by name (sorted), and the names of all its entries.
std::vector<std::filesystem::path> files_in(const std::filesystem::path& dir);
std::vector<std::string> names_in(const std::filesystem::path& dir);

}  // namespace etr::testing
