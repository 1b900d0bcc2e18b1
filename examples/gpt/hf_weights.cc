#include "examples/gpt/hf_weights.h"

#include <cstring>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "checkpoint/durable_file.h"
#include "checkpoint/safetensors.h"
#include "runtime/error.h"

namespace etr::gpt {
namespace {

constexpr const char* kPrefix = "transformer.";

bool is_conv1d(const std::string& name) {
  auto ends = [&](const char* s) {
    const size_t n = std::strlen(s);
    return name.size() >= n && name.compare(name.size() - n, n, s) == 0;
  };
  return ends("attn.c_attn.weight") || ends("attn.c_proj.weight") || ends("mlp.c_fc.weight") ||
         ends("mlp.c_proj.weight");
}

// The shape a tensor has in the file: Conv1D weights transposed, wte without padding.
std::vector<int64_t> file_shape(const TensorEntry& e, const GptConfig& c) {
  if (e.name == "wte.weight") return {c.vocab_size, c.d_model};
  if (is_conv1d(e.name)) return {e.shape[1], e.shape[0]};
  std::vector<int64_t> s;
  for (int i = 0; i < e.shape.ndim(); ++i) s.push_back(e.shape[i]);
  return s;
}

void transpose(const float* in, float* out, int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) out[c * rows + r] = in[r * cols + c];
}

std::string config_json(const GptConfig& c) {
  nlohmann::json j = {
      {"model_type", "gpt2"},
      {"architectures", {"GPT2LMHeadModel"}},
      {"vocab_size", c.vocab_size},
      {"n_positions", c.seq_len},
      {"n_ctx", c.seq_len},
      {"n_embd", c.d_model},
      {"n_layer", c.n_layer},
      {"n_head", c.n_head},
      {"n_inner", nullptr},
      {"activation_function", "gelu_new"},
      {"layer_norm_epsilon", 1e-5},
      {"scale_attn_weights", true},
      {"scale_attn_by_inverse_layer_idx", false},
      {"reorder_and_upcast_attn", false},
      {"tie_word_embeddings", true},
      {"bos_token_id", nullptr},
      {"eos_token_id", nullptr},
      {"resid_pdrop", 0.0},
      {"embd_pdrop", 0.0},
      {"attn_pdrop", 0.0},
      {"torch_dtype", "float32"}};
  return j.dump(2) + "\n";
}

}  // namespace

void export_hf(const GptConfig& config, const ParamLayout& layout, const float* params,
               const std::filesystem::path& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw IoError("cannot create the export directory " + dir.string() + ": " + ec.message());
  write_hf_safetensors(config, layout, params, dir / "model.safetensors");
  const std::string json = config_json(config);
  write_file_durably(dir / "config.json", json.data(), json.size());
}

void write_hf_safetensors(const GptConfig& c, const ParamLayout& layout, const float* params,
                          const std::filesystem::path& file) {
  std::vector<std::vector<float>> transposed;  // keeps the transposed copies alive
  std::vector<SafetensorsTensorRef> refs;
  for (const TensorEntry& e : layout.entries()) {
    const float* data = params + e.offset;
    if (is_conv1d(e.name)) {
      transposed.emplace_back(e.numel());
      transpose(data, transposed.back().data(), e.shape[0], e.shape[1]);
      data = transposed.back().data();
    }
    refs.push_back({kPrefix + e.name, SafetensorsDType::kF32, file_shape(e, c), data});
  }
  write_safetensors(file, refs, {{"format", "pt"}});
}

void import_hf(const GptConfig& c, const ParamLayout& layout, float* params,
               const std::filesystem::path& path) {
  const std::filesystem::path file =
      std::filesystem::is_directory(path) ? path / "model.safetensors" : path;
  SafetensorsFile f(file);
  // etr name -> the file's tensor, after stripping the prefix.
  std::map<std::string, const SafetensorsTensor*> by_name;
  const SafetensorsTensor* lm_head = nullptr;
  for (const SafetensorsTensor& t : f.tensors()) {
    std::string name = t.name;
    if (name.rfind(kPrefix, 0) == 0) name = name.substr(std::strlen(kPrefix));
    if (name == "lm_head.weight") {
      lm_head = &t;
      continue;
    }
    if (name.size() > 10 && (name.ends_with(".attn.bias") || name.ends_with(".attn.masked_bias"))) {
      continue;  // the causal-mask buffers of older checkpoints
    }
    if (!layout.find(name)) {
      throw IoError(file.string() + " holds tensor '" + t.name +
                    "', which this GPT-2 does not have; see docs/gpt2_weights.md");
    }
    if (!by_name.emplace(name, &t).second) {
      throw IoError(file.string() + " holds '" + name + "' both with and without the '" +
                    kPrefix + "' prefix; it is ambiguous which to load");
    }
  }
  std::memset(params, 0, layout.numel() * sizeof(float));
  std::vector<float> tmp;
  for (const TensorEntry& e : layout.entries()) {
    auto it = by_name.find(e.name);
    if (it == by_name.end()) {
      throw IoError(file.string() + " has no tensor '" + e.name + "' (nor '" + kPrefix + e.name +
                    "'); the model needs every tensor of docs/gpt2_weights.md");
    }
    const std::vector<int64_t> shape = file_shape(e, c);
    float* dst = params + e.offset;
    if (is_conv1d(e.name)) {
      tmp.resize(e.numel());
      f.read_into(it->second->name, tmp.data(), SafetensorsDType::kF32, shape);
      transpose(tmp.data(), dst, shape[0], shape[1]);
    } else {
      f.read_into(it->second->name, dst, SafetensorsDType::kF32, shape);
    }
  }
  if (lm_head) {
    const float* wte = params + layout.find("wte.weight")->offset;
    tmp.resize(c.vocab_size * c.d_model);
    f.read_into(lm_head->name, tmp.data(), SafetensorsDType::kF32, {c.vocab_size, c.d_model});
    if (std::memcmp(tmp.data(), wte, tmp.size() * sizeof(float)) != 0) {
      throw IoError(file.string() + ": lm_head.weight differs from wte.weight, but etr's GPT-2 "
                    "ties them; export an untied model's wte as lm_head is not supported");
    }
  }
}

}  // namespace etr::gpt
