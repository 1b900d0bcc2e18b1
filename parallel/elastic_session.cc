#include "parallel/elastic_session.h"

#include <algorithm>
#include <cstdio>
#include <cstring>

namespace etr {

ElasticSession::ElasticSession(ElasticReporter* reporter, const ProcessGrid& grid, Logger& log)
    : reporter_(reporter), grid_(grid), log_(log) {}

void ElasticSession::ready(uint64_t step, int64_t micro_batch) const {
  if (reporter_ && leader()) {
    reporter_->event("ready step=" + std::to_string(step) + " micro_batch=" + std::to_string(micro_batch));
  }
}

void ElasticSession::restored(uint64_t step, int saved_world, double seconds,
                              const std::string& tier) {
  restore_seconds_ = seconds;
  if (reporter_ && leader()) {
    reporter_->event("restored step=" + std::to_string(step) + " world=" +
                     std::to_string(saved_world) + " tier=" + tier);
  }
}

void ElasticSession::after_step(int64_t step, bool first) const {
  if (!active() || !leader()) return;
  reporter_->progress(step);
  if (first) {
    reporter_->event("first-step step=" + std::to_string(step));
    log_relaunch(step);
  }
}

bool ElasticSession::resize(int64_t step, CheckpointCadence& checkpoints,
                            const std::function<bool(const std::string&)>& save) const {
  clear_resize_request();
  if (!active()) {
    if (leader()) log_.warn("ignoring a resize request (SIGUSR1): only jobs launched by etr-run resize");
    return false;
  }
  if (leader()) {
    log_.info("resize requested: saving step ", step,
              " and stopping so that etr-run relaunches the job at its new size");
  }
  checkpoints.flush();  // a save in flight (perhaps of this very step) commits first
  if (!checkpoints.saved(step)) {
    save(checkpoints.resize_tier());
    checkpoints.flush();
  }
  if (leader()) {
    reporter_->event("resize-exit step=" + std::to_string(step) +
                     " saved=" + (checkpoints.saved(step) ? "1" : "0"));
  }
  return true;
}

bool ElasticSession::stop(int64_t step, CheckpointCadence& checkpoints,
                          const std::function<bool(const std::string&)>& save) const {
  const int sig = stop_signal();
  const std::string why = sig != 0 ? "signal " + std::to_string(sig) + " (SIG" +
                                         sigabbrev_np(sig) + ")" : "another rank's signal";
  checkpoints.flush();  // a save in flight (perhaps of this very step) commits first
  const std::string tier = checkpoints.stop_tier();
  const CheckpointWriter* w = checkpoints.writer();
  const auto saved = [&] {
    const SaveStats* last = w && !w->stats().empty() ? &w->stats().back() : nullptr;
    return last && last->ok && last->step == static_cast<uint64_t>(step) && last->tier == tier;
  };
  if (!tier.empty() && !saved()) {
    if (leader()) log_.info(why, ": saving step ", step, " and stopping");
    save(tier);
    checkpoints.flush();
  }
  const bool ok = saved();
  const bool not_failed = ok || tier.empty();  // (nowhere to save is no failure)
  if (!leader()) return not_failed;
  if (reporter_) {
    reporter_->event("stop-exit step=" + std::to_string(step) + " saved=" + (ok ? "1" : "0"));
  }
  if (ok) {
    log_.info("stopped after step ", step, " on ", why, ": saved in ",
              w->stats().back().dir.string(), "; --resume latest continues from it");
  } else {
    log_.warn("stopped after step ", step, " on ", why, ": ",
              tier.empty() ? "nothing saved (no checkpoint.dir)"
                           : "its checkpoint could not be saved (see above)");
  }
  return not_failed;
}

void ElasticSession::log_relaunch(int64_t first_step) const {
  const ElasticLaunch& l = reporter_->launch();
  const int64_t resumed = first_step - 1;
  if (l.restart == 0) {
    log_.info("elastic: launched by etr-run on ", grid_.size(), " rank(s)",
              resumed > 0 ? ", resumed from step " + std::to_string(resumed) : std::string());
    return;
  }
  std::string text = "elastic: relaunch " + std::to_string(l.restart) + " after a " + l.reason +
                     ": world " + std::to_string(l.prev_world) + " -> " +
                     std::to_string(grid_.size()) + ", resumed from step " + std::to_string(resumed);
  if (l.last_step >= 0) {
    const int64_t lost = std::max<int64_t>(0, l.last_step - resumed);
    text += " (the last launch completed step " + std::to_string(l.last_step) + ": " +
            std::to_string(lost) + " step" + (lost == 1 ? "" : "s") + " lost)";
  }
  if (l.event_ms > 0) {
    char t[96];
    std::snprintf(t, sizeof t, ", first step %.2f s after the last launch ended (restore %.2f s)",
                  static_cast<double>(unix_ms() - l.event_ms) / 1000.0, restore_seconds_);
    text += t;
  }
  log_.info(text);
}

}  // namespace etr
