#include "runtime/config/settings.h"

#include <google/protobuf/text_format.h>

#include <cstdlib>

#include "runtime/bytes.h"
#include "runtime/config/config_fields.h"
#include "runtime/error.h"
#include "runtime/env.h"

namespace etr {
namespace {

using config::CommConfig;
using config::TrainConfig;

bool is_bytes(const std::string& text, size_t at_least = 0) {
  try {
    return parse_bytes(text) >= at_least;
  } catch (const ConfigError&) {
    return false;
  }
}

bool known_algo(const std::string& a) {
  return a == "auto" || a == "ring" || a == "rd" || a == "recursive_doubling" || a == "hier" ||
         a == "hierarchical" || a == "mpi";
}

struct Entry {
  EnvSetting setting;
  bool (*accept)(const CommConfig&);
};

// The registry. Validation sentences read "<ETR_X='v' | path = v> is not <expect>".
const Entry kEntries[] = {
    {{"ETR_COMM_TIMEOUT_S", "comm.timeout_s", "a positive number of seconds"},
     [](const CommConfig& c) { return c.timeout_s() > 0 && c.timeout_s() < 1e9; }},
    {{"ETR_COMM_LEARNED_TIMEOUT_MULTIPLE", "comm.learned_timeout_multiple",
      "a multiple >= 0 of the 99th percentile (0 turns learning off)"},
     [](const CommConfig& c) { return c.learned_timeout_multiple() >= 0 && c.learned_timeout_multiple() < 1e9; }},
    {{"ETR_COMM_LEARNED_TIMEOUT_FLOOR_S", "comm.learned_timeout_floor_s", "a positive number of seconds"},
     [](const CommConfig& c) { return c.learned_timeout_floor_s() > 0 && c.learned_timeout_floor_s() < 1e9; }},
    {{"ETR_ALLREDUCE_ALGO", "comm.allreduce_algo", "an allreduce algorithm (auto, ring, rd, hier or mpi)"},
     [](const CommConfig& c) { return known_algo(c.allreduce_algo()); }},
    {{"ETR_ALLREDUCE_SMALL_BYTES", "comm.allreduce_small_bytes", "a byte count (e.g. 16KiB)"},
     [](const CommConfig& c) { return is_bytes(c.allreduce_small_bytes()); }},
    {{"ETR_RING_CHUNK_BYTES", "comm.ring_chunk_bytes", "a byte count of at least 64 bytes"},
     [](const CommConfig& c) { return is_bytes(c.ring_chunk_bytes(), 64); }},
    {{"ETR_RING_DEPTH", "comm.ring_depth", "a positive whole number"},
     [](const CommConfig& c) { return c.ring_depth() >= 1; }},
    {{"ETR_INLINE_BYTES", "comm.inline_bytes", "a byte count (0 turns it off)"},
     [](const CommConfig& c) { return is_bytes(c.inline_bytes()); }},
    {{"ETR_SPIN_POLLS", "comm.spin_polls", "a count of polls (>= 0, or -1 for etr's choice)"},
     [](const CommConfig& c) { return c.spin_polls() >= -1; }},
    {{"ETR_YIELD_POLLS", "comm.yield_polls", "a count of polls (>= 0, or -1 for etr's choice)"},
     [](const CommConfig& c) { return c.yield_polls() >= -1; }},
    {{"ETR_MAX_IDLE_SLEEP_US", "comm.max_idle_sleep_us",
      "a positive number of microseconds (or -1 for etr's choice)"},
     [](const CommConfig& c) { return c.max_idle_sleep_us() > 0 || c.max_idle_sleep_us() == -1; }},
    {{"ETR_DEVICE_BACKEND", "comm.device_backend", "a device backend (auto, nccl or staged)"},
     [](const CommConfig& c) {
       return c.device_backend() == "auto" || c.device_backend() == "nccl" ||
              c.device_backend() == "staged";
     }},
};

const std::vector<EnvSetting>& settings_list() {
  static const std::vector<EnvSetting> list = [] {
    std::vector<EnvSetting> v;
    for (const Entry& e : kEntries) v.push_back(e.setting);
    return v;
  }();
  return list;
}

// The field at `path` of `config` as text ("300", "\"16KiB\"").
std::string field_text(const TrainConfig& config, std::string_view path) {
  const google::protobuf::Message* m = &config;
  std::string_view rest = path;
  for (;;) {
    const size_t dot = rest.find('.');
    const auto* f = m->GetDescriptor()->FindFieldByName(std::string(rest.substr(0, dot)));
    if (!f) return "?";
    if (dot == std::string_view::npos) {
      std::string out;
      google::protobuf::TextFormat::PrintFieldValueToString(*m, f, -1, &out);
      return out;
    }
    m = &m->GetReflection()->GetMessage(*m, f);
    rest = rest.substr(dot + 1);
  }
}

}  // namespace

std::span<const EnvSetting> env_settings() { return settings_list(); }

const EnvSetting* find_env_setting(std::string_view env) {
  for (const EnvSetting& s : settings_list()) {
    if (s.env == env) return &s;
  }
  return nullptr;
}

std::vector<std::string> apply_env_settings(TrainConfig& config, std::string_view prefix) {
  std::vector<std::string> applied;
  for (const Entry& e : kEntries) {
    if (e.setting.path.substr(0, prefix.size()) != prefix) continue;
    const char* v = env_value(std::string(e.setting.env).c_str());
    if (!v || !*v) continue;
    const std::string sentence =
        std::string(e.setting.env) + "='" + v + "' is not " + std::string(e.setting.expect);
    TrainConfig trial = config;
    try {
      set_field(trial, e.setting.path, v);
    } catch (const ConfigError&) {
      throw ConfigError(sentence);
    }
    apply_field_defaults(*trial.mutable_comm());
    if (!e.accept(trial.comm())) throw ConfigError(sentence);
    set_field(config, e.setting.path, v);
    applied.push_back(std::string(e.setting.env) + "=" + v);
  }
  return applied;
}

void validate_env_settings(const TrainConfig& config) {
  for (const Entry& e : kEntries) {
    if (!e.accept(config.comm())) {
      throw ConfigError(std::string(e.setting.path) + " = " + field_text(config, e.setting.path) +
                        " is not " + std::string(e.setting.expect));
    }
  }
}

std::string env_settings_line() {
  std::string line;
  for (const EnvSetting& s : settings_list()) {
    const char* v = env_value(std::string(s.env).c_str());
    if (!v || !*v) continue;
    line += (line.empty() ? "" : ", ") + std::string(s.env) + "=" + v + " (" + std::string(s.path) + ")";
  }
  return "settings from the environment: " + (line.empty() ? std::string("none") : line);
}

CommConfig comm_config_from_env() {
  TrainConfig config;
  apply_env_settings(config, "comm.");
  apply_field_defaults(*config.mutable_comm());
  return config.comm();
}

}  // namespace etr
