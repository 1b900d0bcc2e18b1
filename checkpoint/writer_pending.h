// CheckpointWriter's inside, shared by its two files: checkpoint_writer.cc (save() and
// the shard writes) and writer_commit.cc (the agreements, the manifest, the rename and
// retention). Not part of the checkpoint layer's interface.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <exception>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "checkpoint/checkpoint_writer.h"
#include "checkpoint/manifest.pb.h"
#include "checkpoint/shard_plan.h"

namespace etr::writer_detail {

using Clock = std::chrono::steady_clock;

inline double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// ".step-NNNNNNNNN.partial": a save in flight (never a checkpoint name).
std::string partial_name(uint64_t step);

// A span of time (a wait), and how much of another one it covers.
struct Interval {
  Clock::time_point begin{}, end{};
  double overlap_seconds(const Interval& o) const {
    const Clock::time_point b = std::max(begin, o.begin), e = std::min(end, o.end);
    return e > b ? std::chrono::duration<double>(e - b).count() : 0.0;
  }
};

struct ShardInfo {
  uint64_t bytes;
  uint64_t xxh3;
  double write_seconds;
};

}  // namespace etr::writer_detail

namespace etr {

struct CheckpointWriter::Pending {
  CheckpointTier tier;
  uint64_t step = 0;
  std::filesystem::path partial, final_dir;
  ckpt::Manifest manifest;
  // Where every rank's elements go (rank 0 describes the manifest's tensors from it at the
  // commit); async: what the writer thread copies, and the copy (this rank's file, in
  // snapshot_)
  std::shared_ptr<const ShardPlan> plan;
  std::vector<std::vector<StatePiece>> sources;  // each state's pieces (pieces_of)
  std::span<const char> snapshot;
  uint64_t snapshot_xxh3 = 0;
  std::thread thread;
  std::atomic<bool> copied{false};     // async: the states are no longer read
  std::atomic<bool> committed{false};  // async: the writer thread's commit ended, either way
  std::atomic<bool> abandon{false};    // async: the writer is being destroyed: stop waiting
  std::exception_ptr failure;          // async: what the writer thread threw (a CommError)
  std::string error;                   // this rank's failure, "" while none
  std::string start_error;             // the agreed failure to make the directory
  writer_detail::ShardInfo info{0, 0, 0};
  writer_detail::Clock::time_point t0;
  double staged = 0;      // the caller's time producing the states (save()'s staged_seconds)
  double stall = 0;       // the training thread's: that, save() and wait_for_snapshot()
  double writer_cpu = 0;  // the writer thread's CPU seconds, its commit included
  double peer_wait = 0;   // in the agreements, waiting for the last rank to arrive
  // The first agreement of the start and of the commit: the waits for the last rank
  // (async: the writer thread's; start_wait is written before `copied` is set)
  writer_detail::Interval start_wait, commit_wait;
  double caller_peer_wait = 0;  // async: the caller's waits (for the snapshot, for the
                                // commit) while the writer waited in those agreements
  SaveStats result;       // the commit's outcome (async: written by the writer thread)
};

}  // namespace etr
