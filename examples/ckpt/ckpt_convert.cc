// etr-ckpt reshard, export: new files from a checkpoint's tensors. The source is verified
// first: a corrupt shard must not come out again under fresh, matching checksums.
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <system_error>

#include "checkpoint/checkpoint_reader.h"
#include "checkpoint/manifest.h"
#include "checkpoint/offline.h"
#include "examples/ckpt/ckpt_commands.h"
#include "examples/data/hf_tokenizer_files.h"
#include "examples/gpt/hf_weights.h"
#include "runtime/bytes.h"
#include "runtime/config/train_config.h"
#include "runtime/error.h"
#include "runtime/host_allocator.h"
#include "runtime/state_names.h"

namespace etr::ckpt_tool {
namespace fs = std::filesystem;
namespace {

// Shard file names have five digits of rank and world.
constexpr int kMaxWorld = 99999;

void verify_or_throw(const fs::path& dir, const ckpt::Manifest& m) {
  const std::string bad = verify_files(dir, m);
  if (!bad.empty()) throw CheckpointError(bad);
}

// The tokenizer the checkpoint was trained with (its attachment), as transformers loads
// it, into `dir`; a file export (empty `dir`) only says where it could go.
void export_tokenizer(const ckpt::Manifest& m, const fs::path& src, const fs::path& dir,
                      int64_t seq_len) {
  for (const ckpt::Attachment& a : m.attachments()) {
    if (a.name() != data::kTokenizerModelFile) continue;
    const auto tokenizer = data::SubwordTokenizer::from_bytes(
        a.data(), (src / ckpt_format::kManifestName).string() + " (attachment " + a.name() + ")");
    if (dir.empty()) {
      std::printf(
          "note: %s was trained with %s; export to a directory (-o DIR/) to write it "
          "beside the weights\n",
          src.c_str(), tokenizer.describe().c_str());
      return;
    }
    data::write_hf_tokenizer(dir, tokenizer, seq_len);
    std::printf(
        "wrote %s, tokenizer_config.json and special_tokens_map.json: the tokenizer "
        "the checkpoint was trained with, %s\n",
        (dir / data::kTokenizerModelFile).c_str(), tokenizer.describe().c_str());
    return;
  }
}

}  // namespace

int run_reshard(const ReshardOptions& o) {
  if (o.world < 1 || o.world > kMaxWorld) {
    throw ConfigError("--world must be between 1 and " + std::to_string(kMaxWorld) + " (got " +
                      std::to_string(o.world) + ")");
  }
  if (o.zero < 0 || o.zero > 3) {
    throw ConfigError("--zero must be 0, 1, 2 or 3 (got " + std::to_string(o.zero) + ")");
  }
  if (o.pp < 1) throw ConfigError("--pp must be at least 1 (got " + std::to_string(o.pp) + ")");
  // The files are the same for every split of the layers (parallel/pipeline_engine.h): a
  // pipeline layout only needs whole pipelines.
  if (o.world % o.pp != 0) {
    throw ConfigError("--world " + std::to_string(o.world) + " is not a multiple of --pp " +
                      std::to_string(o.pp) + ": the ranks form world / pp whole pipelines");
  }
  const fs::path src(o.checkpoint);
  const ckpt::Manifest m = open_checkpoint(src);
  verify_or_throw(src, m);
  const ParamLayout layout = layout_from_manifest(m);
  CheckpointReader reader(src);

  ckpt::Manifest meta = m;
  meta.mutable_layout()->set_world_size(o.world);
  meta.mutable_layout()->set_dp_size(o.world / o.pp);
  meta.mutable_layout()->set_pp_size(o.pp);
  meta.mutable_layout()->set_zero_stage(o.zero);
  meta.mutable_config()->mutable_parallel()->set_pp(o.pp);
  meta.mutable_config()->mutable_parallel()->set_zero_stage(o.zero);
  meta.set_writer("etr-ckpt reshard");
  meta.set_created_unix_ms(std::chrono::duration_cast<std::chrono::milliseconds>(
                               std::chrono::system_clock::now().time_since_epoch())
                               .count());
  const std::vector<std::string> states(m.states().begin(), m.states().end());
  const fs::path out =
      write_checkpoint(o.out, std::move(meta), layout, states, o.world,
                       [&](const std::string& state, float* flat, int64_t begin, int64_t end) {
                         reader.read_state(state, layout, flat, begin, end);
                       });
  std::printf("read %s (step %" PRIu64 ", %s, verified): %zu tensors x %zu states, %s\n",
              src.c_str(), m.step(), describe_layout(m.layout()).c_str(), layout.entries().size(),
              states.size(), format_bytes(static_cast<double>(reader.bytes_read())).c_str());
  const ckpt::Manifest written = read_manifest(out);
  std::printf("wrote %s: %s, %d shard files, %s\n", out.c_str(),
              describe_layout(written.layout()).c_str(), written.files_size(),
              format_bytes(static_cast<double>(shard_bytes(written))).c_str());
  return 0;
}

int run_export(const ExportOptions& o) {
  const fs::path src(o.checkpoint), out(o.out);
  const ckpt::Manifest m = open_checkpoint(src);
  verify_or_throw(src, m);
  gpt::GptConfig config;
  try {
    config = gpt::GptConfig::from(m.config().model());
  } catch (const ConfigError& e) {
    throw CheckpointError("the configuration saved in " + src.string() +
                          " does not describe a GPT-2 model: " + e.what());
  }
  HostAllocator alloc;
  gpt::GptModel<float> model(config, alloc);
  const size_t saved = layout_from_manifest(m).entries().size();
  if (saved != model.layout().entries().size()) {
    throw CheckpointError(src.string() + " holds " + std::to_string(saved) +
                          " tensors but a GPT-2 of its configuration has " +
                          std::to_string(model.layout().entries().size()) +
                          "; it was not saved by etr-train");
  }
  CheckpointReader reader(src);
  reader.read_state(std::string(state::kParam), model.layout(), model.params(), 0,
                    model.layout().numel());
  // A directory (existing, or named with a trailing '/') gets what from_pretrained loads;
  // anything else is the weights file itself.
  std::error_code ec;
  const bool to_dir = fs::is_directory(out, ec) || o.out.ends_with('/');
  const fs::path file = to_dir ? out / "model.safetensors" : out;
  if (to_dir) {
    gpt::export_hf(model, out);
  } else {
    const fs::path parent = out.parent_path().empty() ? fs::path(".") : out.parent_path();
    require_directory(parent, "the directory of the output file");
    gpt::write_hf_safetensors(model, out);
  }
  std::printf("wrote %s%s: the %zu parameter tensors of step %" PRIu64
              " (%s) in Hugging Face GPT-2 names, %s\n",
              file.c_str(), to_dir ? " and config.json" : "", model.layout().entries().size(),
              m.step(), config.str().c_str(),
              format_bytes(static_cast<double>(fs::file_size(file, ec))).c_str());
  export_tokenizer(m, src, to_dir ? out : fs::path(), config.seq_len);
  return 0;
}

}  // namespace etr::ckpt_tool
