// TrainSession: saving and resuming (train_session.h; the cadence and the files are
// parallel/checkpoint_cadence.h's).
#include <vector>

#include "checkpoint/checkpoint_reader.h"
#include "parallel/train_session.h"
#include "runtime/bytes.h"

namespace etr {

bool TrainSession::save_checkpoint(const std::string& tier) {
  checkpoints_->set_batch_policy(batch_->policy_state());
  return checkpoints_->save(tier, checkpoints_->manifest(position_, batch_->origin()),
                            model_.stack->layout(), [this] { return engine_->states(); });
}

void TrainSession::flush_checkpoints() { checkpoints_->flush(); }

void TrainSession::resume() {
  elastic_->at(RankStage::kRestore, position_.step);
  const ElasticLaunch* launch = elastic_->launch();
  if (const auto point = checkpoints_->find_resume(launch && launch->restart > 0)) {
    restore(*point);
  } else if (init_deferred_) {
    engine_->initialize_parameters(model_.init);
  }
  init_deferred_ = false;
  elastic_->at(RankStage::kStart, position_.step);
}

void TrainSession::restore(const ResumePoint& point) {
  const std::filesystem::path& dir = point.dir;
  const std::string& tier = point.tier;
  const std::vector<HeldState> states = engine_->held_states();
  const Restored r = checkpoints_->restore(point, states);
  engine_->restored();
  const ckpt::Manifest& m = r.manifest;
  if (leader() && m.data().seed() != position_.seed) {
    log_.warn("the checkpoint was trained with data.seed ", m.data().seed(), " but this run has ",
              position_.seed, "; the data order from here on differs from the original run's");
  }
  // read_manifest checked that the step fits the schedule's arithmetic (int64) and that
  // the data position agrees with it (check_manifest_sense).
  position_.step = m.step();
  position_.samples_seen = m.data().samples_seen();
  batch_->restore_policy(m);  // where the global batch started; an automatic one's state
  resumed_from_ = dir;
  elastic_->restored(m.step(), m.layout().world_size(), r.seconds, tier);
  if (leader()) {
    log_.info("resumed from ", dir.string(), ": step ", m.step(), ", sample ",
              m.data().samples_seen(), "; saved by ", m.layout().world_size(),
              " rank(s), now ", grid_->size(), "; rank 0 read ",
              format_bytes(static_cast<double>(r.bytes)), " in ",
              std::to_string(r.seconds).substr(0, 5), " s (the ", tier, " tier",
              point.memory ? "; " + format_bytes(static_cast<double>(r.moved)) + " moved between hosts" : std::string(),
              ")");
  }
}

}  // namespace etr
