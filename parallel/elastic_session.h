// ElasticSession: the job's side of etr-run (docs/design.md, "Elasticity"; runtime/elastic.h
// has the protocol). Rank 0 reports start-up, restore and progress to etr-run's run
// directory and logs what a relaunch cost; when a resize is agreed on at a step boundary
// (the request flag rides on the step's sums, so every rank sees it alike), the job saves
// a checkpoint of that step and stops, for etr-run to relaunch it at the new size; a stop
// (a signal, runtime/elastic.h) likewise saves the step and ends the run.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "parallel/checkpoint_cadence.h"
#include "parallel/process_grid.h"
#include "runtime/elastic.h"
#include "runtime/log.h"

namespace etr {

class ElasticSession {
 public:
  // `reporter` may be null (not launched by etr-run).
  ElasticSession(ElasticReporter* reporter, const ProcessGrid& grid, Logger& log);

  // Launched by etr-run: a resize request stops the run.
  bool active() const { return reporter_ && reporter_->active(); }
  // How etr-run launched this job; null when it did not.
  const ElasticLaunch* launch() const { return active() ? &reporter_->launch() : nullptr; }
  // Events: the job is built and about to train from `step`; it restored `step`.
  // `micro_batch`: the leader's, for etr-run's out-of-memory relaunches (it stops halving
  // at 1).
  void ready(uint64_t step, int64_t micro_batch) const;
  // `tier`: where the checkpoint was found (the `restored` event's tier=...).
  void restored(uint64_t step, int saved_world, double seconds, const std::string& tier);
  // After step `step` (`first`: the first of this launch, which logs what the relaunch
  // cost).
  void after_step(int64_t step, bool first) const;
  // Every rank: where its training thread is (runtime/heartbeat.h: etr-run's progress
  // watchdog reads it from the heartbeats). `step`: the steps completed.
  void at(RankStage stage, uint64_t step) const {
    if (reporter_) reporter_->position(static_cast<int64_t>(step), stage);
  }
  // Collective: a resize was agreed on after `step`. Returns true when the run must stop
  // (a checkpoint of `step` was saved through `checkpoints`, or tried); false when the
  // job is not elastic and the request is ignored. `save(tier)` saves the current state.
  bool resize(int64_t step, CheckpointCadence& checkpoints,
              const std::function<bool(const std::string&)>& save) const;
  // Collective: a stop was agreed on after `step` (some rank got SIGTERM, SIGINT or
  // etr-run's SIGUSR2). Saves a durable checkpoint of `step` through `checkpoints` unless
  // one is saved already (nothing without checkpoint.dir), says so, and tells etr-run
  // ("stop-exit step=N saved=0|1"); elastic or not. Returns false when a checkpoint was
  // tried and not saved (true when saved, or when there is nowhere to save one).
  bool stop(int64_t step, CheckpointCadence& checkpoints,
            const std::function<bool(const std::string&)>& save) const;

 private:
  bool leader() const { return grid_.rank() == 0; }
  void log_relaunch(int64_t first_step) const;

  ElasticReporter* reporter_;
  const ProcessGrid& grid_;
  Logger& log_;
  double restore_seconds_ = 0;
};

}  // namespace etr
