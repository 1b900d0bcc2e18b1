// Fuzz target: the training config, as etr-train reads it (runtime/config/train_config.h).
//
// Input: a config text in protobuf text format, then (after the first NUL byte, if any)
// `path=value` overrides, one a line. The target parses the text, applies the overrides,
// resolves and validates; bad input must end in a ConfigError (any other exception, a
// crash or a sanitizer report is a finding). A config that resolves must print and parse
// back to the same message (format_config's promise) and give a batch split.
#include <google/protobuf/util/message_differencer.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/config/train_config.h"
#include "runtime/error.h"
#include "examples/gpt/model_presets.h"

namespace {

std::vector<std::string> split_lines(std::string_view text) {
  std::vector<std::string> lines;
  while (!text.empty()) {
    const size_t end = text.find('\n');
    lines.emplace_back(text.substr(0, end));
    if (end == std::string_view::npos) break;
    text.remove_prefix(end + 1);
  }
  return lines;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const size_t nul = input.find('\0');
  const std::string_view text = input.substr(0, nul);
  const std::vector<std::string> overrides = nul == std::string_view::npos
                                                 ? std::vector<std::string>{}
                                                 : split_lines(input.substr(nul + 1));
  etr::TrainConfig config;
  try {
    config = etr::parse_config(text, "<fuzz>");
    etr::apply_overrides(config, overrides);
    etr::resolve(config, etr::gpt::model_presets());
  } catch (const etr::ConfigError&) {
    return 0;
  }
  const etr::TrainConfig back = etr::parse_config(etr::format_config(config), "<formatted>");
  if (!google::protobuf::util::MessageDifferencer::Equals(back, config)) std::abort();
  try {
    (void)etr::accumulation_steps(config, 1);
    (void)etr::log_level(config);
  } catch (const etr::ConfigError&) {
  }
  return 0;
}
