// own_model: a program of one's own on the etr library. It defines a model that is not
// GPT-2 (mlp_model.h: an embedding, residual MLP blocks, an untied softmax head, all on
// etr's kernels), its data (sequence_data.h) and its initialisation, and hands them to
// etr's training loop, which gives it, unchanged:
//   - data parallelism over the ranks mpirun starts (gradients reduced in buckets,
//     overlapped with backward), the same parameters as one process with the same batch;
//   - checkpoints (checkpoint.dir, checkpoint.every) and --resume latest;
//   - elasticity under etr-run (a lost rank relaunches, a new slot resizes the job);
//   - the config file and --set overrides, progress line, metrics, traces, exit codes.
//
//   etr-mpirun -np 2 own_model --set schedule.max_steps=50 --set checkpoint.dir=ck
//   etr-mpirun -np 2 own_model --set schedule.max_steps=80 --set checkpoint.dir=ck --resume latest
//   etr-run --hosts localhost:2 --checkpoint-dir ck -- own_model --set schedule.max_steps=80
//
// Sizes come from the config's model fields: model.vocab_size (V), model.d_model (C),
// model.n_layer (blocks), model.seq_len (T), defaults 256, 64, 2, 64; model.n_head and
// model.preset are not used.
#include <memory>

#include "mlp_model.h"
#include "parallel/program.h"
#include "parallel/train_session.h"
#include "sequence_data.h"

namespace {

own::MlpConfig mlp_config(const etr::TrainConfig& config) {
  own::MlpConfig c;
  c.vocab = config.model().vocab_size();
  c.width = config.model().d_model();
  c.blocks = config.model().n_layer();
  c.seq_len = config.model().seq_len();
  return c;
}

etr::ModelSpec build_model(const etr::SessionContext& ctx) {
  const own::MlpConfig c = mlp_config(ctx.config);
  etr::ModelSpec m;
  m.stack = own::build_mlp_stack(c);
  m.description = "MLP language model: " + std::to_string(c.blocks) + " blocks, " +
                  std::to_string(c.width) + " wide, vocabulary " + std::to_string(c.vocab);
  m.flops_per_token = 6.0 * static_cast<double>(own::mlp_parameters(c));
  const uint64_t seed = ctx.config.model().init_seed();
  m.init = [seed](const etr::ParamLayout& layout, float* params) {
    own::init_mlp(layout, params, seed);
  };
  return m;
}

std::unique_ptr<etr::DataSource> build_data(const etr::SessionContext& ctx) {
  const own::MlpConfig c = mlp_config(ctx.config);
  return std::make_unique<own::SequenceData>(c.seq_len, c.vocab, ctx.config.data().seed(),
                                             /*eval_samples=*/64);
}

}  // namespace

int main(int argc, char** argv) {
  etr::ProgramInfo info;
  info.name = "own_model";
  info.description = "own_model: an MLP language model trained by the etr library.";
  // Before etr completes and checks the config: this program's own default sizes (it has
  // no named presets), and its own data (etr's corpus settings, data.train_file, do not
  // apply; the check that one corpus is named is met by marking it synthetic).
  info.complete_config = [](etr::TrainConfig& config) {
    etr::config::ModelConfig& m = *config.mutable_model();
    m.set_preset("");
    if (!m.has_vocab_size()) m.set_vocab_size(256);
    if (!m.has_d_model()) m.set_d_model(64);
    if (!m.has_n_layer()) m.set_n_layer(2);
    if (!m.has_seq_len()) m.set_seq_len(64);
    if (!m.has_n_head()) m.set_n_head(1);  // not used by this model
    if (config.data().train_file().empty()) config.mutable_data()->set_synthetic(true);
  };
  etr::TrainProgram program;
  program.model = build_model;
  program.data = build_data;
  return etr::run_training_program(argc, argv, info, program);
}
