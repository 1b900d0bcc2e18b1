#include "runtime/launcher/mpirun_output.h"

#include <unistd.h>

#include <cerrno>
#include <charconv>

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

}  // namespace

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
  const int killed = killed_rank_in(text);
  if (killed >= 0 && killed_rank_ < 0) killed_rank_ = killed;
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
    if (!(resizing_ && frame_.find("non-zero") != std::string::npos)) write_all(fd_, frame_);
    frame_.clear();
    return;
  }
  if (resizing_ && text.find("Forwarding signal") != std::string::npos) return;
  write_all(fd_, text + '\n');
}

}  // namespace etr::launcher
