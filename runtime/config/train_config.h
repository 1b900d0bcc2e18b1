// The settings of a training job (runtime/config/etr_config.proto, documented field by
// field there): loading, command-line overrides, defaults and model presets,
// validation, and the print of the effective settings at start-up.
//
//   TrainConfig config = load_config("configs/demo.pbtxt");
//   apply_overrides(config, {"model.n_layer=4", "optimizer.lr=1e-3"});
//   resolve(config, gpt::model_presets());  // defaults, preset sizes, validation
//   logger.info("config:\n", format_config(config));
//
// Override syntax: each override is one `path=value` string. The path is the dotted
// field path of etr_config.proto (model.n_layer, log.log_level), the value is written
// as runtime/config/config_fields.h describes (integers, reals, true/false, strings
// verbatim, enum names case-insensitive with their prefix optional, comma lists).
// Overrides apply in order, so a later one wins. etr-train takes them as repeated
// `--set path=value` flags.
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/config/etr_config.pb.h"
#include "runtime/log.h"

namespace etr {

using config::TrainConfig;

// Reads and parses a text-format config file; fields it leaves out stay unset (resolve
// fills them). Throws IoError when the file cannot be read, ConfigError
// "<path>:<line>:<column>: <parser message>" when it does not parse (for an unknown
// field name, with the closest valid names).
TrainConfig load_config(const std::string& path);

// The same for text in memory; `source` names it in error messages.
TrainConfig parse_config(std::string_view text, std::string_view source = "<config text>");

// Applies `path=value` overrides in order (see the top of this file). Throws ConfigError
// for an item without '=', an unknown field (naming the closest valid ones) or a value
// of the wrong type; overrides before the bad one stay applied.
void apply_overrides(TrainConfig& config, const std::vector<std::string>& overrides);

// A named model size (model.preset). The library has no table of its own: a program
// passes its presets to resolve().
struct ModelPreset {
  std::string_view name;
  int n_layer;
  int n_head;
  int d_model;
  int seq_len;
  int vocab_size;
  std::string_view purpose;
};

// Completes and checks `config`: unset fields take their `(default_value)`, unset model
// sizes take those of the preset model.preset names among `presets` (the program's own
// table: etr-train's are GPT-2's, examples/gpt/model_presets.h), then validate().
// Afterwards every field is set. Idempotent.
void resolve(TrainConfig& config, std::span<const ModelPreset> presets = {});

// Throws ConfigError, one sentence naming the field(s) and value(s), for the first
// setting that cannot be used: sizes that are not positive, d_model not a multiple of
// n_head, global_batch not a multiple of micro_batch, lr <= 0, warmup_steps >
// max_steps, no corpus or two of them, ... Expects a resolved config (every field set);
// for a single rank (the data-parallel split is checked by accumulation_steps).
void validate(const TrainConfig& config);

// The config in protobuf text format, one field per line, for the start-up log;
// parse_config(format_config(c)) equals c.
std::string format_config(const TrainConfig& config);

// Micro-batches each rank accumulates per optimizer step: global_batch / (micro_batch *
// data_parallel_ranks). Throws ConfigError when that does not divide evenly.
int accumulation_steps(const TrainConfig& config, int data_parallel_ranks = 1);

// log.log_level as the logger's level.
LogLevel log_level(const TrainConfig& config);

}  // namespace etr
