#include "launcher/mpirun_output.h"

#include <unistd.h>

#include <cerrno>
#include <charconv>

#include "launcher/host_names.h"  // printable
#include "launcher/srun_launch.h"

namespace etr::launcher {
namespace {

void write_all(int fd, const std::string& text) {
  size_t off = 0;
  while (off < text.size()) {
    const ssize_t n = ::write(fd, text.data() + off, text.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    off += static_cast<size_t>(n);
  }
}

// The value after "key" on its line of `frame`, trimmed; "" when there is none.
std::string field(const std::string& frame, const std::string& key) {
  const size_t at = frame.find(key);
  if (at == std::string::npos) return "";
  const size_t begin = frame.find_first_not_of(" \t", at + key.size());
  const size_t end = frame.find('\n', at);
  if (begin == std::string::npos || begin >= end) return "";
  return frame.substr(begin, end - begin);
}

}  // namespace

std::string launch_failure_in(const std::string& frame) {
  std::string program, host, why;
  if (frame.find("unable to find the specified executable") != std::string::npos) {
    program = field(frame, "Executable:");
    host = field(frame, "Node:");
    why = "was not found";
  } else if (frame.find("could not access") != std::string::npos &&
             frame.find("Executable:") != std::string::npos) {
    program = field(frame, "Executable:");
    host = field(frame, "Node:");
    why = "does not exist or is not executable";
  } else if (frame.find("\"execve\" system call") != std::string::npos) {
    program = field(frame, "Application name:");
    host = field(frame, "Local host:");
    why = "could not be started (" + field(frame, "Error:") + ")";
  } else {
    return "";
  }
  return "the program " + printable(program) + " " + why + " on host " + printable(host);
}

std::string lost_daemon_host_in(const std::string& frame) {
  if (frame.find("lost communication with a remote daemon") == std::string::npos) return "";
  const std::string daemon = field(frame, "Remote daemon:");
  const std::string key = " on node ";
  const size_t at = daemon.find(key);
  return at == std::string::npos ? "" : daemon.substr(at + key.size());
}

int killed_rank_in(const std::string& line) {
  const std::string key = "process rank ";
  const size_t at = line.find(key);
  if (at == std::string::npos || line.find("exited on signal") == std::string::npos) return -1;
  const char* begin = line.data() + at + key.size();
  int rank = -1;
  auto [end, ec] = std::from_chars(begin, line.data() + line.size(), rank);
  if (ec != std::errc() || end == begin || rank < 0) return -1;
  return rank;
}

int killed_signal_in(const std::string& line) {
  if (killed_rank_in(line) < 0) return 0;
  const std::string key = "exited on signal ";
  const size_t at = line.find(key);
  const char* begin = line.data() + at + key.size();
  int sig = 0;
  auto [end, ec] = std::from_chars(begin, line.data() + line.size(), sig);
  return ec == std::errc() && end != begin && sig > 0 ? sig : 0;
}

RankExit nonzero_exit_in(const std::string& frame) {
  if (frame.find("exited with non-zero status") == std::string::npos) return {};
  // "Process name: [[JOB,1],RANK]" and "Exit code: CODE"
  const std::string name = field(frame, "Process name:");
  const std::string code = field(frame, "Exit code:");
  const size_t comma = name.rfind(',');
  RankExit r;
  if (comma == std::string::npos || code.empty()) return {};
  auto [end, ec] = std::from_chars(name.data() + comma + 1, name.data() + name.size(), r.rank);
  auto [cend, cec] = std::from_chars(code.data(), code.data() + code.size(), r.code);
  const bool bracket = end != name.data() + name.size() && *end == ']';
  if (ec != std::errc() || !bracket || r.rank < 0 || cec != std::errc()) return {};
  return r;
}

void MpirunOutput::feed(const char* data, size_t n) {
  pending_.append(data, n);
  size_t start = 0;
  for (size_t nl; (nl = pending_.find('\n', start)) != std::string::npos; start = nl + 1) {
    line(pending_.substr(start, nl - start));
  }
  pending_.erase(0, start);
}

void MpirunOutput::flush() {
  if (!pending_.empty()) line(pending_);
  pending_.clear();
  write_all(fd_, frame_);
  frame_.clear();
  in_frame_ = false;
}

void MpirunOutput::line(const std::string& text) {
  // srun's report of a node it lost (a job step, srun_launch.h) counts as a lost daemon.
  if (const std::string node = srun_lost_node_in(text); !node.empty() && lost_host_.empty()) {
    lost_host_ = node;
  }
  const int killed = killed_rank_in(text);
  if (killed >= 0 && killed_rank_ < 0) {
    killed_rank_ = killed;
    killed_signal_ = killed_signal_in(text);
  }
  const bool dashes = text.size() > 20 && text.find_first_not_of('-') == std::string::npos;
  if (dashes && !in_frame_) {  // a frame opens
    in_frame_ = true;
    frame_ = text + '\n';
    return;
  }
  if (in_frame_) {
    frame_ += text + '\n';
    if (!dashes) return;
    in_frame_ = false;  // the frame closes
    if (nonzero_exit_.rank < 0) nonzero_exit_ = nonzero_exit_in(frame_);
    if (lost_host_.empty()) lost_host_ = lost_daemon_host_in(frame_);
    bool drop = resizing_ && frame_.find("non-zero") != std::string::npos;
    if (const std::string failure = launch_failure_in(frame_); !failure.empty()) {
      if (program_error_.empty()) program_error_ = failure;
      drop = true;
    } else if (!program_error_.empty() &&
               frame_.find("unable to start the specified application") != std::string::npos) {
      drop = true;  // the generic report that follows the execve one
    }
    if (!drop) write_all(fd_, frame_);
    frame_.clear();
    return;
  }
  if (resizing_ && text.find("Forwarding signal") != std::string::npos) return;
  write_all(fd_, text + '\n');
}

}  // namespace etr::launcher
