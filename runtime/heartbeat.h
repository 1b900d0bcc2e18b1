// Heartbeat: every rank of a job that etr-run launched tells it, independently of the
// data plane, that its process is alive: a thread of its own sends one UDP datagram to
// the address etr-run gave (ETR_RUN_HEARTBEAT = "address:port") every interval,
//   "etr-hb <launch> <rank> <pid> <host>"
// and "etr-bye <launch> <rank> <pid> <host>" when the process leaves normally (so that a
// rank that finished before the others is not taken for a silent one). A process that is
// stopped (SIGSTOP, a frozen VM) or whose host is cut off falls silent, whatever its
// training threads are doing, and etr-run declares it failed after --heartbeat-timeout
// (launcher/heartbeat_watch.h). Sending never blocks and never throws: a datagram lost
// is one beat missed.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>

namespace etr {

class Heartbeat {
 public:
  // Inactive (no thread) when `target` is empty. ConfigError when it is not
  // "address:port" with a numeric IPv4 or IPv6 address.
  Heartbeat(const std::string& target, int launch, int rank,
            std::chrono::milliseconds every = std::chrono::milliseconds(250));
  ~Heartbeat();  // says goodbye and stops the thread
  Heartbeat(const Heartbeat&) = delete;
  Heartbeat& operator=(const Heartbeat&) = delete;

  bool active() const { return fd_ >= 0; }
  int64_t sent() const { return sent_.load(); }

 private:
  void send(const char* kind);
  void loop();

  int fd_ = -1;
  std::string body_;  // "<launch> <rank> <pid> <host>"
  std::chrono::milliseconds every_;
  std::atomic<int64_t> sent_{0};
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace etr
