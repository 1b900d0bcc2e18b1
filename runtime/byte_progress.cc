#include "runtime/byte_progress.h"

#include <cstdio>

#include "runtime/bytes.h"

namespace etr {

ByteProgress::ByteProgress(Logger* log, std::string what, uint64_t total,
                           std::chrono::milliseconds quiet, std::chrono::milliseconds every)
    : log_(log), what_(std::move(what)), total_(total), quiet_(quiet), every_(every),
      start_(Clock::now()), next_(start_ + quiet) {}

void ByteProgress::add(uint64_t bytes) {
  done_ += bytes;
  if (!log_) return;
  const auto now = Clock::now();
  if (now < next_ || done_ >= total_) return;
  next_ = now + every_;
  const double seconds = std::chrono::duration<double>(now - start_).count();
  char pct[16] = "";
  if (total_ > 0) std::snprintf(pct, sizeof pct, " (%.0f%%)", 100.0 * static_cast<double>(done_) / static_cast<double>(total_));
  log_->info(what_, ": ", format_bytes(static_cast<double>(done_)), " of ",
             format_bytes(static_cast<double>(total_)), pct, ", ",
             format_bytes(seconds > 0 ? static_cast<double>(done_) / seconds : 0.0), "/s");
  ++lines_;
}

void ByteProgress::finish() {
  if (!log_ || lines_ == 0) return;
  char secs[32];
  std::snprintf(secs, sizeof secs, "%.1f s",
                std::chrono::duration<double>(Clock::now() - start_).count());
  log_->info(what_, ": done, ", format_bytes(static_cast<double>(done_)), " in ", secs);
  ++lines_;
}

}  // namespace etr
