// Whether this process's training thread is blocked waiting on its peers, and since when,
// for its heartbeat (runtime/heartbeat.h): etr-run declares a silent rank failed sooner when
// every other rank of the job says it is blocked on its peers (launcher/heartbeat_watch.h),
// because a job whose ranks all wait is stalled whichever rank is silent.
//
// The waits that count are a communication's completion waited for on the thread that
// called report_peer_waits_of_this_thread() (the training thread: a collective's Work,
// an MPI request, a pipeline transfer, the checkpoint writer's snapshot or commit, which
// wait on the other ranks' writers); waits on other threads (a checkpoint writer's
// agreements, a progress engine's polls) do not, since training goes on meanwhile.
#pragma once

#include <chrono>
#include <cstdint>

namespace etr {

// From here on, this thread's PeerWaitScopes count (one thread a process: the last call wins).
void report_peer_waits_of_this_thread();

// How long the reporting thread has been blocked in its current wait on peers, in
// milliseconds; 0 when it is not waiting. Any thread may ask.
int64_t peer_wait_ms(std::chrono::steady_clock::time_point now = std::chrono::steady_clock::now());

// Marks a wait on peers for its lifetime (nested scopes count as the outermost one).
class PeerWaitScope {
 public:
  PeerWaitScope();
  ~PeerWaitScope();
  PeerWaitScope(const PeerWaitScope&) = delete;
  PeerWaitScope& operator=(const PeerWaitScope&) = delete;

 private:
  bool counts_;
};

}  // namespace etr
