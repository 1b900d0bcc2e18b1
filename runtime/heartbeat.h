// Heartbeat: every rank of a job that etr-run launched tells it, independently of the
// data plane, that its process is alive: a thread of its own sends one UDP datagram to
// the address etr-run gave (ETR_RUN_HEARTBEAT = "address:port") every interval,
//   "etr-hb <launch> <rank> <pid> <host> <step> <stage> <waited>"
// (<step>: the steps completed so far; <stage>: what the training thread is doing, a
// RankStage's name; <waited>: how long, in ms, the training thread has been blocked on
// its peers, 0 when it is not (runtime/peer_wait.h)) and "etr-bye ..." when the process leaves normally (so that a
// rank that finished before the others is not taken for a silent one). A process that is
// stopped (SIGSTOP, a frozen VM) or whose host is cut off falls silent, whatever its
// training threads are doing, and etr-run declares it failed after --heartbeat-timeout
// (launcher/heartbeat_watch.h), sooner when all the other ranks say they wait on their
// peers. The step and stage let etr-run tell a process that lives but
// makes no progress (launcher/progress_watch.h). Sending never blocks and never throws: a
// datagram lost is one beat missed.
//
// etr-run answers a beat of a launch it has already ended with "etr-end <launch>": a rank
// that was cut off while etr-run ended its launch (a partition) and comes back after the
// job was relaunched without it ends its process then, instead of holding its memory (a
// GPU's, on a GPU node) until its collectives time out. Only etr-run can send it: the
// socket is connected to etr-run's address and port, and the kernel drops other senders.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>

namespace etr {

// What a rank's training thread is doing, for the progress watchdog: the stages in which a
// long stall is expected (start-up, a restore, evaluation, a checkpoint, the end of a run)
// get a separate allowance.
enum class RankStage : uint8_t {
  kStart,       // building the job (before the first step, after a relaunch)
  kRestore,     // reading a checkpoint
  kCompute,     // a step's forward and backward (and the gradients' reduction)
  kStepSums,    // the step's agreement: loss, norm, flags summed over the ranks
  kOptimizer,   // the update
  kEvaluate,    // the held-out loss
  kCheckpoint,  // a save's collective part
  kFinish,      // after the last step: the final save, sampling, export
};
const char* stage_name(RankStage stage);
std::optional<RankStage> parse_stage(std::string_view name);
// A stage in which a step may legitimately take much longer than the recent steps.
bool slow_stage(RankStage stage);

class Heartbeat {
 public:
  // Inactive (no thread) when `target` is empty. ConfigError when it is not
  // "address:port" with a numeric IPv4 or IPv6 address. Construct it on the training
  // thread: its beats report that thread's waits on peers.
  // `on_ended`: what the rank does when etr-run says its launch is over (called on the
  // heartbeat's thread); by default it says so on stderr and ends the process (_exit(1)).
  Heartbeat(const std::string& target, int launch, int rank,
            std::chrono::milliseconds every = std::chrono::milliseconds(50),
            std::function<void()> on_ended = {});
  ~Heartbeat();  // says goodbye and stops the thread
  Heartbeat(const Heartbeat&) = delete;
  Heartbeat& operator=(const Heartbeat&) = delete;

  bool active() const { return fd_ >= 0; }
  int64_t sent() const { return sent_.load(); }
  // The training thread's position, carried by every later beat (two relaxed stores:
  // cheap enough for every stage of every step).
  void set_position(int64_t step, RankStage stage);

 private:
  void send(const char* kind);
  void loop();
  // Reads what etr-run sent; true when it said this launch is over.
  bool ended_by_run();

  int fd_ = -1;
  int launch_ = 0;
  std::function<void()> on_ended_;
  std::string body_;  // "<launch> <rank> <pid> <host>"
  std::atomic<int64_t> step_{0};
  std::atomic<uint8_t> stage_{static_cast<uint8_t>(RankStage::kStart)};
  std::chrono::milliseconds every_;
  std::atomic<int64_t> sent_{0};
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace etr
