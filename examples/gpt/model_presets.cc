#include "examples/gpt/model_presets.h"

#include <array>

namespace etr::gpt {
namespace {

constexpr std::array<ModelPreset, 7> kPresets = {{
    {"tiny", 2, 2, 64, 64, 256, "unit tests and quick checks"},
    {"small", 4, 4, 256, 128, 256, "the CPU benchmark"},
    {"medium-cpu", 6, 6, 384, 256, 256, "a longer CPU run"},
    {"gpt2-124m", 12, 12, 768, 1024, 50257, "GPT-2 small"},
    {"gpt2-350m", 24, 16, 1024, 1024, 50257, "GPT-2 medium"},
    {"gpt2-774m", 36, 20, 1280, 1024, 50257, "GPT-2 large"},
    {"gpt2-1558m", 48, 25, 1600, 1024, 50257, "GPT-2 XL"},
}};

}  // namespace

std::span<const ModelPreset> model_presets() { return kPresets; }

const ModelPreset* find_model_preset(std::string_view name) {
  for (const ModelPreset& p : kPresets) {
    if (p.name == name) return &p;
  }
  return nullptr;
}

}  // namespace etr::gpt
