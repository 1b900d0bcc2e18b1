// What etr-run follows of one running launch (elastic_driver.cc): the job's stderr on its
// way through, its exit, and an mpirun that does not end after its job failed.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <optional>
#include <string>

#include "launcher/heartbeat_watch.h"
#include "launcher/hosts.h"
#include "launcher/job_process.h"
#include "launcher/mpirun_output.h"

namespace etr::launcher {

struct Watch {
  using Clock = std::chrono::steady_clock;
  explicit Watch(const JobProcess& job);
  ~Watch();
  Watch(const Watch&) = delete;
  Watch& operator=(const Watch&) = delete;
  pid_t pid;
  int stderr_fd;
  // Readable once mpirun has exited (pidfd_open), so that its end wakes pump() at once
  // even while a daemon it left behind holds stderr open; -1 where the kernel has none.
  int pidfd = -1;
  MpirunOutput output;
  Clock::time_point next_discovery;
  bool eof = false, reaped = false, started = false, stop_forwarded = false;
  bool resize_pending = false;
  bool stop_asked = false;  // etr-run asked the job to save and stop (SIGUSR2)
  Clock::time_point stop_by{};  // ... and ends it at this time
  int status = 0;
  std::string reason;  // why a resize is pending
  std::optional<Discovery> discovery;
  int stuck_signals = 0;  // signals end_stuck_mpirun() sent
  Clock::time_point reaped_at{};
  // etr-run decided to end the launch (a silent host, a stuck job): from this time point
  // end_stuck_mpirun() ends mpirun without the grace (epoch: not decided).
  Clock::time_point end_at{};
  // Ranks on other machines that fell silent, gathered for kSilentGather before the
  // driver decides whether a whole host went silent (its ranks fall silent within a beat
  // of each other) or one rank.
  std::vector<HeartbeatWatch::Silent> remote_silent;
  Clock::time_point remote_silent_at{};
};

inline constexpr std::chrono::milliseconds kSilentGather{600};

// How long etr-run keeps reading the job's stderr after mpirun has exited: a daemon that
// mpirun left behind (on a host it could not reach) may hold the pipe open for good.
inline constexpr std::chrono::seconds kDrainAfterExit{2};
// ... and after etr-run itself killed mpirun (end_stuck_mpirun): the job is over, and
// what mpirun forwarded is already in the pipe; only the launch agent of a host cut off
// still holds it open.
inline constexpr std::chrono::milliseconds kDrainAfterKill{50};

// When pump() returns at the latest, and one more descriptor whose input wakes it (the
// heartbeat socket: a beat is then read when it arrives, not up to a wait later).
struct PumpWake {
  int fd = -1;
  Watch::Clock::time_point by = Watch::Clock::now() + std::chrono::milliseconds(100);
};

// Waits until the job writes to stderr (passed on), mpirun exits (reaped; its stderr is
// read kDrainAfterExit longer), `wake.fd` has input or `wake.by` comes, whichever is
// first; forwards a stop signal (`stop_signal` != 0) to mpirun once.
void pump(Watch& w, int stop_signal, const PumpWake& wake = {});

// The next time point at which the watch itself has something to do: end_stuck_mpirun()'s
// next signal (`first_error`: as there), the end of the drain after mpirun's exit; the
// time_point's max when none.
Watch::Clock::time_point next_due(const Watch& w, Watch::Clock::time_point first_error);

// How long mpirun may take to end a job after a rank's error (or a lost daemon) before
// etr-run ends it: mpirun cannot reach the daemon of a host cut off by a partition to
// kill its ranks, and waits for it for as long as TCP does.
inline constexpr std::chrono::seconds kStuckMpirunGrace{10};
// SIGTERM to SIGKILL: mpirun's own teardown waits on the daemon it cannot reach; when
// etr-run decided (a silent host, a stuck job) no rank has anything left to save (the
// newest checkpoint is what the next launch restores), so it gets 50 ms: enough for
// daemons it reaches to end their ranks (a stopped rank's host: ~40 ms measured on the
// chaos soak's hosts), and no longer than that for a daemon it cannot reach, which mpirun
// would wait on for good (a daemon that loses mpirun ends its ranks as well).
inline constexpr std::chrono::seconds kStuckKillAfter{2};
inline constexpr std::chrono::milliseconds kDecidedKillAfter{50};

// Once `first_error` (a time point, epoch: none) is kStuckMpirunGrace past and mpirun
// still runs (says so on stderr), or once w.end_at is reached: SIGTERM, and SIGKILL
// kStuckKillAfter (kDecidedKillAfter) later, after which the launch's ranks on this machine that have not said goodbye
// (`heartbeats`, may be null) are killed too: mpirun killed cannot end them.
void end_stuck_mpirun(Watch& w, std::chrono::steady_clock::time_point first_error,
                      const HeartbeatWatch* heartbeats);

// A rank whose heartbeat fell silent (heartbeat_watch.h): ends it with SIGKILL when it
// runs on this machine (mpirun then ends the job as after a kill -9) and returns it. Ranks
// on other machines are gathered in w.remote_silent (their pids are not ours to end); the
// driver decides about them kSilentGather after the first. Returns nullopt otherwise.
std::optional<HeartbeatWatch::Silent> end_silent_rank(Watch& w, HeartbeatWatch& heartbeats);

}  // namespace etr::launcher
