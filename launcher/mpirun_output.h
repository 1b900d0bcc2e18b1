// What etr-run hears from mpirun: its standard error (the job's output and mpirun's own
// framed messages) passes through MpirunOutput on its way to etr-run's, which reads the
// rank mpirun reports killed and drops the messages etr-run's own resize causes.
#pragma once

#include <cstddef>
#include <string>

namespace etr::launcher {

// mpirun's report of a rank that died ("mpirun noticed that process rank 1 with PID 0 on
// node vm exited on signal 9 (Killed)."): the rank, or -1 for any other line.
int killed_rank_in(const std::string& mpirun_line);
// The signal of that report (9 for "exited on signal 9 (Killed)"), or 0 for any other line.
int killed_signal_in(const std::string& mpirun_line);

// mpirun's framed report of the first rank that exited non-zero ("Process name:
// [[8986,1],1]" and "Exit code: 137"): the rank and its exit code; rank -1 for any other text.
struct RankExit {
  int rank = -1;
  int code = 0;
};
RankExit nonzero_exit_in(const std::string& mpirun_frame);

// mpirun's framed report that it could not start the program (not found, not
// executable, execve failed) as one sentence naming the program and the host; "" for any
// other text.
std::string launch_failure_in(const std::string& mpirun_frame);

// mpirun's framed report that it lost a remote daemon ("ORTE has lost communication with
// a remote daemon" ... "Remote daemon: [[50091,0],2] on node h3"): the host as mpirun was
// given it; "" for any other text.
std::string lost_daemon_host_in(const std::string& mpirun_frame);

class MpirunOutput {
 public:
  explicit MpirunOutput(int fd) : fd_(fd) {}
  // Forwards whole lines of `data` to the fd (a partial last line waits for the rest).
  void feed(const char* data, size_t n);
  // Forwards whatever is held back (at the end of the job).
  void flush();
  // From now on, drop mpirun's report of the ranks' non-zero exit (every rank exits 75 for
  // a resize, 140 when asked to stop) and its "Forwarding signal" line: etr-run says what
  // happened itself.
  void expect_own_exit() { resizing_ = true; }
  // The first rank mpirun reported killed by a signal, or -1.
  int killed_rank() const { return killed_rank_; }
  // The signal that killed it (killed_signal_in), or 0.
  int killed_signal() const { return killed_signal_; }
  // The first rank mpirun reported exiting non-zero (nonzero_exit_in), even when the report
  // was dropped for a resize.
  const RankExit& nonzero_exit() const { return nonzero_exit_; }
  // mpirun could not start the program (launch_failure_in), or "". Its frames saying so
  // are not forwarded: etr-run says it in one sentence.
  const std::string& program_error() const { return program_error_; }
  // The host of the first daemon mpirun reported lost (lost_daemon_host_in), or "".
  const std::string& lost_host() const { return lost_host_; }

 private:
  void line(const std::string& text);

  int fd_;
  bool resizing_ = false;
  int killed_rank_ = -1;
  int killed_signal_ = 0;
  RankExit nonzero_exit_;
  std::string program_error_;
  std::string lost_host_;
  std::string pending_;
  // mpirun frames its messages with lines of dashes; a frame is held until it closes so
  // that it can be dropped whole.
  std::string frame_;
  bool in_frame_ = false;
};

}  // namespace etr::launcher
