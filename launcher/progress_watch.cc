#include "launcher/progress_watch.h"

#include <algorithm>
#include <cstdio>

namespace etr::launcher {
namespace {

constexpr size_t kIntervals = 16;

std::string secs(double s) {
  char b[32];
  std::snprintf(b, sizeof b, "%.2f s", s);
  return b;
}

std::string number(double x) {
  char b[32];
  std::snprintf(b, sizeof b, "%g", x);
  return b;
}

// "rank 3", "ranks 0, 2 and 5".
std::string rank_list(const std::vector<int>& ranks) {
  if (ranks.size() == 1) return "rank " + std::to_string(ranks[0]);
  std::string out = "ranks ";
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (i > 0) out += i + 1 == ranks.size() ? " and " : ", ";
    out += std::to_string(ranks[i]);
  }
  return out;
}

}  // namespace

std::string Stuck::describe() const {
  return "no rank's step or stage changed for " + secs(stalled_seconds) + " (the limit: " +
         limit_why + "): stuck after step " + std::to_string(step) + ", " + where;
}

void ProgressWatch::begin_launch(Clock::time_point now) {
  seen_.clear();
  intervals_.clear();
  last_change_ = last_step_ = now;
  top_step_ = -1;
  steps_seen_ = 0;
  reported_ = false;
}

double ProgressWatch::recent_step_seconds() const {
  if (intervals_.empty()) return 0;
  std::vector<double> v(intervals_.begin(), intervals_.end());
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2), v.end());
  return v[v.size() / 2];
}

std::optional<Stuck> ProgressWatch::observe(const std::vector<HeartbeatWatch::Position>& ranks,
                                            Clock::time_point now) {
  if (!limits_.on() || ranks.empty()) return std::nullopt;
  bool slow = false;
  int64_t top = top_step_;
  for (const auto& p : ranks) {
    const auto it = seen_.find(p.rank);
    if (it == seen_.end() || it->second.step != p.step || it->second.stage != p.stage) {
      last_change_ = now;
      seen_[p.rank] = {p.step, p.stage};
    }
    slow = slow || slow_stage(p.stage);
    top = std::max(top, p.step);
  }
  if (top > top_step_) {
    // The first step of a launch says nothing of the step time (start-up, a restore).
    if (top_step_ >= 0 && steps_seen_ > 0) {
      intervals_.push_back(std::chrono::duration<double>(now - last_step_).count() /
                           static_cast<double>(top - top_step_));
      if (intervals_.size() > kIntervals) intervals_.pop_front();
    }
    if (top_step_ >= 0) ++steps_seen_;
    top_step_ = top;
    last_step_ = now;
  }
  // The limit; its explanation is written only when a stall is reported.
  const double floor = std::chrono::duration<double>(limits_.floor).count();
  const double step = recent_step_seconds();
  const bool allowance = slow || steps_seen_ == 0;
  const double limit = allowance ? std::chrono::duration<double>(limits_.allowance).count()
                                 : std::max(floor, limits_.multiple * step);
  const double stalled = std::chrono::duration<double>(now - last_change_).count();
  if (reported_ || stalled <= limit) return std::nullopt;
  reported_ = true;
  Stuck s = where(ranks);
  s.stalled_seconds = stalled;
  s.limit_seconds = limit;
  if (allowance) {
    s.limit_why = secs(limit) + ", --stuck-allowance for " +
                  (steps_seen_ == 0 ? std::string("a launch's first step")
                                    : "start-up, restores, evaluation and saves");
  } else if (limits_.multiple * step > floor) {
    s.limit_why = secs(limit) + ", --stuck-after " + number(limits_.multiple) +
                  " x the recent step time of " + secs(step);
  } else {
    s.limit_why = secs(limit) + ", --stuck-floor";
  }
  return s;
}

Stuck ProgressWatch::where(const std::vector<HeartbeatWatch::Position>& ranks) const {
  Stuck s;
  s.step = ranks.front().step;
  for (const auto& p : ranks) s.step = std::min(s.step, p.step);
  std::map<std::string, std::vector<int>> by_stage;  // of the ranks at the lowest step
  int behind = 0;
  for (const auto& p : ranks) {
    if (p.step != s.step) continue;
    by_stage[stage_name(p.stage)].push_back(p.rank);
    ++behind;
    s.rank = p.rank;
  }
  if (behind != 1 || ranks.size() == 1) s.rank = -1;
  for (const auto& [stage, list] : by_stage) {
    if (!s.where.empty()) s.where += "; ";
    s.where += rank_list(list) + " in " + stage;
  }
  if (s.rank >= 0) s.where += " (behind every other rank)";
  return s;
}

}  // namespace etr::launcher
