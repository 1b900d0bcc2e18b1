#include "runtime/config/train_config.h"

#include "runtime/config/settings.h"
#include "runtime/config/pipeline_settings.h"

#include <google/protobuf/descriptor.h>
#include <google/protobuf/io/tokenizer.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>
#include <google/protobuf/text_format.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <sstream>
#include <thread>
#include <utility>

#include "runtime/bytes.h"
#include "runtime/config/config_fields.h"
#include "runtime/error.h"

namespace etr {
namespace {

// Keeps the parser's first error; later ones are usually consequences of it.
class FirstError : public google::protobuf::io::ErrorCollector {
 public:
  void AddError(int line, google::protobuf::io::ColumnNumber column,
                const std::string& message) override {
    if (found) return;
    found = true;
    this->line = line;
    this->column = column;
    this->message = message;
  }
  bool found = false;
  int line = 0;
  int column = 0;
  std::string message;
};

// For the parser's 'Message type "etr.config.ModelConfig" has no field named "nlayer".':
// " Did you mean n_layer?", or "" when the message is another one or nothing is close.
std::string unknown_field_hint(const std::string& message) {
  static constexpr std::string_view kType = "Message type \"";
  static constexpr std::string_view kField = "has no field named \"";
  size_t t = message.find(kType);
  size_t f = message.find(kField);
  if (t == std::string::npos || f == std::string::npos) return "";
  t += kType.size();
  f += kField.size();
  std::string type_name = message.substr(t, message.find('"', t) - t);
  std::string field = message.substr(f, message.find('"', f) - f);
  const google::protobuf::Descriptor* type =
      google::protobuf::DescriptorPool::generated_pool()->FindMessageTypeByName(type_name);
  if (type == nullptr) return "";
  std::vector<std::string> names;
  for (int i = 0; i < type->field_count(); ++i) names.push_back(type->field(i)->name());
  std::vector<std::string> close = closest_matches(field, names);
  if (close.empty()) return "";
  std::string hint = " Did you mean ";
  for (size_t i = 0; i < close.size(); ++i) hint += (i > 0 ? " or " : "") + close[i];
  return hint + "?";
}

std::string text(double v) {
  char buf[32];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
  return ec == std::errc() ? std::string(buf, end) : std::to_string(v);
}
std::string text(int64_t v) {
  return std::to_string(v);
}
std::string text(int v) {
  return std::to_string(v);
}

void require(bool ok, const std::string& sentence) {
  if (!ok) throw ConfigError(sentence);
}

// "<path> is <value>; it must be <rule>."
template <typename T>
void require(bool ok, std::string_view path, T value, std::string_view rule) {
  require(ok, std::string(path) + " is " + text(value) + "; it must be " + std::string(rule) + ".");
}

std::string preset_names(std::span<const ModelPreset> presets) {
  std::string names;
  for (const ModelPreset& p : presets) names += (names.empty() ? "" : ", ") + std::string(p.name);
  return names;
}

// Fills the sizes the user left unset from model.preset ("" = no preset: all given),
// looked up in the program's `presets`.
void apply_preset(config::ModelConfig& model, std::span<const ModelPreset> presets) {
  if (model.preset().empty()) {
    const char* missing = !model.has_n_layer()      ? "model.n_layer"
                          : !model.has_n_head()     ? "model.n_head"
                          : !model.has_d_model()    ? "model.d_model"
                          : !model.has_seq_len()    ? "model.seq_len"
                          : !model.has_vocab_size() ? "model.vocab_size"
                                                    : nullptr;
    const std::string choice =
        presets.empty() ? "give" : "name a preset (" + preset_names(presets) + ") or give";
    require(missing == nullptr, std::string(missing ? missing : "") +
                                    " is not set and model.preset is empty; " + choice +
                                    " all five model sizes.");
    return;
  }
  if (presets.empty()) {
    throw ConfigError("model.preset \"" + model.preset() + "\" names a model preset, but this "
                      "program has none; set model.preset to \"\" and give all five model sizes.");
  }
  const ModelPreset* p = nullptr;
  for (const ModelPreset& q : presets) {
    if (q.name == model.preset()) p = &q;
  }
  if (p == nullptr) {
    std::vector<std::string> names;
    for (const ModelPreset& q : presets) names.emplace_back(q.name);
    std::vector<std::string> close = closest_matches(model.preset(), names);
    throw ConfigError("model.preset \"" + model.preset() + "\" is not a preset" +
                      (close.empty() ? "" : " (did you mean " + close.front() + "?)") +
                      "; the presets are " + preset_names(presets) + ", or \"\" for none.");
  }
  if (!model.has_n_layer()) model.set_n_layer(p->n_layer);
  if (!model.has_n_head()) model.set_n_head(p->n_head);
  if (!model.has_d_model()) model.set_d_model(p->d_model);
  if (!model.has_seq_len()) model.set_seq_len(p->seq_len);
  if (!model.has_vocab_size()) model.set_vocab_size(p->vocab_size);
}

void validate_model(const config::ModelConfig& m) {
  require(m.n_layer() >= 1, "model.n_layer", m.n_layer(), "at least 1");
  require(m.n_head() >= 1, "model.n_head", m.n_head(), "at least 1");
  require(m.d_model() >= 1, "model.d_model", m.d_model(), "at least 1");
  require(m.seq_len() >= 1, "model.seq_len", m.seq_len(), "at least 1");
  require(m.vocab_size() >= 1, "model.vocab_size", m.vocab_size(), "at least 1");
  require(m.d_model() % m.n_head() == 0,
          "model.d_model = " + text(m.d_model()) + " is not a multiple of model.n_head = " +
              text(m.n_head()) + "; the heads must split the model width evenly.");
  require(m.init_std() > 0, "model.init_std", m.init_std(), "greater than 0");
}

void validate_optimizer(const config::OptimizerConfig& o) {
  require(o.lr() > 0, "optimizer.lr", o.lr(), "greater than 0");
  require(o.beta1() >= 0 && o.beta1() < 1, "optimizer.beta1", o.beta1(), "in [0, 1)");
  require(o.beta2() >= 0 && o.beta2() < 1, "optimizer.beta2", o.beta2(), "in [0, 1)");
  require(o.eps() > 0, "optimizer.eps", o.eps(), "greater than 0");
  require(o.weight_decay() >= 0, "optimizer.weight_decay", o.weight_decay(), "0 or more");
  require(o.grad_clip() >= 0, "optimizer.grad_clip", o.grad_clip(), "0 (no clipping) or more");
  require(o.skip_nonfinite_steps() >= 0, "optimizer.skip_nonfinite_steps", o.skip_nonfinite_steps(),
          "0 (stop at the first non-finite step) or more");
}

void validate_schedule(const config::ScheduleConfig& s) {
  require(s.max_steps() >= 1, "schedule.max_steps", s.max_steps(), "at least 1");
  require(s.stop_at_step() >= 0, "schedule.stop_at_step", s.stop_at_step(), "at least 0 (0: none)");
  require(s.warmup_steps() >= 0, "schedule.warmup_steps", s.warmup_steps(), "0 or more");
  require(s.warmup_steps() <= s.max_steps(),
          "schedule.warmup_steps = " + text(s.warmup_steps()) +
              " is more than schedule.max_steps = " + text(s.max_steps()) +
              "; warmup must end by the last step.");
  require(s.min_lr_ratio() >= 0 && s.min_lr_ratio() <= 1, "schedule.min_lr_ratio", s.min_lr_ratio(),
          "in [0, 1]");
}

void validate_data(const TrainConfig& c) {
  const config::DataConfig& d = c.data();
  require(!d.train_file().empty() || d.synthetic(),
          "No training data: set data.train_file to a token file (etr-tokenize makes one "
          "from text), or data.synthetic=true for a generated corpus.");
  require(d.train_file().empty() || !d.synthetic(),
          "data.train_file = \"" + d.train_file() +
              "\" and data.synthetic = true both name a corpus; keep one.");
  require(d.val_fraction() >= 0 && d.val_fraction() < 1, "data.val_fraction", d.val_fraction(),
          "in [0, 1)");
  // The readers are examples/data/token_file_format.h's; the names are checked here, early.
  require(d.format() == "auto" || d.format() == "etr" || d.format() == "llmc" ||
              d.format() == "nanogpt",
          "data.format = \"" + d.format() +
              "\" is not a token file format; choose auto (etr or llm.c, by the header), etr, "
              "llmc or nanogpt.");
  require(c.log().eval_every() == 0 || d.val_fraction() > 0,
          "log.eval_every = " + text(c.log().eval_every()) +
              " asks for evaluations but data.val_fraction is 0; hold out some data or set "
              "log.eval_every=0.");
  size_t bytes = 0;
  try {
    bytes = parse_bytes(d.synthetic_size());
  } catch (const ConfigError& e) {
    throw ConfigError("data.synthetic_size: " + std::string(e.what()));
  }
  if (!d.synthetic()) return;
  require(c.model().vocab_size() >= 256, "model.vocab_size", c.model().vocab_size(),
          "at least 256 with data.synthetic, whose tokens are bytes");
  // One sequence needs seq_len + 1 tokens (inputs and their next-token targets).
  double need = c.model().seq_len() + 1.0;
  double val = std::floor(static_cast<double>(bytes) * d.val_fraction());
  double train = static_cast<double>(bytes) - val;
  require(train >= need, "data.synthetic_size = " + d.synthetic_size() + " leaves " + text(train) +
                             " training tokens, fewer than one sequence of " + text(need) +
                             " (model.seq_len + 1); make it larger.");
  require(c.log().eval_every() == 0 || val >= need,
          "data.synthetic_size = " + d.synthetic_size() +
              " with data.val_fraction = " + text(d.val_fraction()) + " holds out " + text(val) +
              " tokens, fewer than one sequence of " + text(need) +
              " (model.seq_len + 1); make either larger or set log.eval_every=0.");
}

// A sample is for reading in the log; each token is one forward pass of the model.
constexpr int kMaxSampleTokens = 100000;

void validate_log(const config::LogConfig& l) {
  require(l.log_every() >= 1, "log.log_every", l.log_every(), "at least 1");
  require(l.eval_every() >= 0, "log.eval_every", l.eval_every(), "0 (never) or more");
  require(l.eval_batches() >= 1, "log.eval_batches", l.eval_batches(), "at least 1");
  require(l.sample_tokens() >= 0, "log.sample_tokens", l.sample_tokens(), "0 (none) or more");
  require(l.sample_tokens() <= kMaxSampleTokens, "log.sample_tokens", l.sample_tokens(),
          "at most " + text(kMaxSampleTokens) + " (a sample is for reading in the log)");
  require(l.trace_steps() >= 0, "log.trace_steps", l.trace_steps(), "0 (all) or more");
  require(l.log_level() != config::LOG_LEVEL_UNSPECIFIED,
          "log.log_level is LOG_LEVEL_UNSPECIFIED; choose debug, info, warn, error or off.");
}

void validate_parallel(const config::ParallelConfig& p) {
  try {
    parse_bytes(p.zero_prefetch_size());
  } catch (const ConfigError& e) {
    throw ConfigError(std::string("parallel.zero_prefetch_size: ") + e.what());
  }
  for (auto [name, value] : {std::pair{"parallel.first_bucket_size", &p.first_bucket_size()},
                             std::pair{"parallel.bucket_size", &p.bucket_size()}}) {
    size_t bytes = 0;
    try {
      bytes = parse_bytes(*value);
    } catch (const ConfigError& e) {
      throw ConfigError(std::string(name) + ": " + e.what());
    }
    require(bytes >= 4, std::string(name) + " = \"" + *value +
                            "\" is smaller than one gradient (4 bytes); give a size such as 4MiB.");
  }
  require(p.zero_stage() >= 0 && p.zero_stage() <= 3, "parallel.zero_stage", p.zero_stage(),
          "0 (replicas), 1 (optimizer state sharded), 2 (and gradients) or 3 (and parameters)");
  require(p.pp() >= 1, "parallel.pp", p.pp(), "1 (no pipeline) or more stages");
  require(p.pp_virtual_stages() >= 0, "parallel.pp_virtual_stages", p.pp_virtual_stages(),
          "0 (automatic) or more model chunks per rank");
}

void validate_checkpoint(const config::CheckpointConfig& c) {
  require(c.every() >= 0, "checkpoint.every", c.every(), "0 (only at the end) or more");
  require(c.fast_every() >= 0, "checkpoint.fast_every", c.fast_every(), "0 (none) or more");
  require(c.keep() >= 0, "checkpoint.keep", c.keep(), "0 (keep all) or more");
  require(c.fast_keep() >= 0, "checkpoint.fast_keep", c.fast_keep(), "0 (keep all) or more");
  require(c.fast_every() == 0 || !c.fast_dir().empty(),
          "checkpoint.fast_every = " + text(c.fast_every()) +
              " but checkpoint.fast_dir is empty; name a directory for the fast tier "
              "(e.g. /dev/shm/etr-job).");
  require(c.fast_dir().empty() || c.fast_dir() != c.dir(),
          "checkpoint.fast_dir and checkpoint.dir are both \"" + c.dir() +
              "\"; the two tiers need directories of their own.");
  require(c.resume() != "latest" || !c.dir().empty() || !c.fast_dir().empty(),
          "checkpoint.resume = latest but neither checkpoint.dir nor checkpoint.fast_dir is "
          "set; name the directory to resume from.");
  require(c.memory_every() >= 0, "checkpoint.memory_every", c.memory_every(), "0 (off) or more");
  require(c.memory_keep() >= 1, "checkpoint.memory_keep", c.memory_keep(), "1 or more");
  require(c.memory_max_stall() >= 0 && c.memory_max_stall() < 1, "checkpoint.memory_max_stall",
          c.memory_max_stall(), "a fraction in [0, 1) (0.01 = 1 % of a step; 0 = no bound)");
  require(c.memory_every() == 0 || !c.memory_dir().empty() || !c.dir().empty(),
          "checkpoint.memory_every = " + text(c.memory_every()) +
              " but neither checkpoint.memory_dir nor checkpoint.dir is set; the memory tier "
              "falls back to (and names its default directory after) the durable tier.");
  require(c.memory_dir().empty() || (c.memory_dir() != c.dir() && c.memory_dir() != c.fast_dir()),
          "checkpoint.memory_dir is \"" + c.memory_dir() +
              "\", the directory of another tier; the memory tier needs one of its own.");
  require(c.writer_cpus() != config::WRITER_CPUS_UNSPECIFIED,
          "checkpoint.writer_cpus is WRITER_CPUS_UNSPECIFIED; choose spare or rank.");
}

void validate_runtime(const config::RuntimeConfig& r) {
  require(r.threads() >= 0, "runtime.threads", r.threads(), "0 (automatic) or more");
  // Bounded by the machine's CPUs (hardware_concurrency), not by this process's affinity
  // mask: a rank bound to fewer cores may oversubscribe them on purpose (etr-bench
  // measures that), but threads beyond every CPU of the machine never run in parallel and
  // tens of thousands of them crash libgomp (SIGSEGV in GOMP_parallel at 65536).
  const int cpus = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  require(r.threads() <= cpus, "runtime.threads is " + text(r.threads()) + ", more than the " +
                                   text(cpus) + " CPUs of this machine; set at most " + text(cpus) +
                                   ", or 0 for automatic.");
  require(r.recompute() == "off" || r.recompute() == "blocks" || r.recompute() == "auto",
          "runtime.recompute = \"" + r.recompute() + "\" is not off, blocks or auto.");
  require(r.device() == "cpu" || r.device() == "cuda" || r.device() == "auto",
          "runtime.device = \"" + r.device() + "\" is not cpu, cuda or auto.");
  require(r.gpu_matmul() == "tf32" || r.gpu_matmul() == "fp32",
          "runtime.gpu_matmul = \"" + r.gpu_matmul() + "\" is not tf32 or fp32.");
  require(r.precision() == "auto" || r.precision() == "fp32" || r.precision() == "bf16",
          "runtime.precision = \"" + r.precision() + "\" is not auto, fp32 or bf16.");
  if (r.memory_budget().empty()) return;
  size_t budget = 0;
  try {
    budget = parse_bytes(r.memory_budget());
  } catch (const ConfigError& e) {
    throw ConfigError("runtime.memory_budget: " + std::string(e.what()));
  }
  require(budget > 0,
          "runtime.memory_budget is 0; give a size such as 8GiB, or \"\" for "
          "the allocator's default.");
}

void validate_batch(const TrainConfig& config) {
  const config::BatchConfig& b = config.batch();
  require(b.global_batch() >= 0, "batch.global_batch", b.global_batch(),
          "at least 1, or auto (0)");
  require(b.micro_batch() >= 0, "batch.micro_batch", b.micro_batch(), "at least 1, or auto (0)");
  require(b.min_global_batch() >= 1, "batch.min_global_batch", b.min_global_batch(), "at least 1");
  require(b.max_global_batch() >= b.min_global_batch(),
          "batch.max_global_batch = " + text(b.max_global_batch()) +
              " is smaller than batch.min_global_batch = " + text(b.min_global_batch()) + ".");
  require(b.lr_scaling() == "adascale" || b.lr_scaling() == "sqrt" || b.lr_scaling() == "linear",
          "batch.lr_scaling = \"" + b.lr_scaling() + "\" is not adascale, sqrt or linear.");
  require(b.memory_margin() >= 0 && b.memory_margin() <= 0.9, "batch.memory_margin",
          b.memory_margin(), "a fraction in [0, 0.9]");
  require(b.shares() == "equal" || b.shares() == "throughput",
          "batch.shares = \"" + b.shares() + "\" is not equal or throughput.");
  if (b.global_batch() > 0 && b.micro_batch() > 0) accumulation_steps(config, 1);
  // The sampler counts the sequences seen in a uint64; int64 keeps a margin.
  const int64_t largest = b.global_batch() > 0 ? b.global_batch() : b.max_global_batch();
  const int64_t max_steps = std::numeric_limits<int64_t>::max() / largest;
  require(config.schedule().max_steps() <= max_steps,
          "schedule.max_steps = " + text(config.schedule().max_steps()) +
              " x batch.global_batch = " + text(largest) +
              " sequences overflow the sample counter; set at most " + text(max_steps) + " steps.");
}

}  // namespace


TrainConfig load_config(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw IoError("cannot read config file " + path + ": " + std::strerror(errno));
  std::ostringstream content;
  content << in.rdbuf();
  if (in.bad()) throw IoError("cannot read config file " + path + ": " + std::strerror(errno));
  return parse_config(content.str(), path);
}

namespace {

// The names of the fields that take `auto` for 0 (the accepts_auto option), anywhere in
// the config.
void auto_fields(const google::protobuf::Descriptor& d, std::vector<std::string>& names) {
  for (int i = 0; i < d.field_count(); ++i) {
    const google::protobuf::FieldDescriptor& f = *d.field(i);
    if (f.options().GetExtension(config::accepts_auto)) names.push_back(f.name());
    if (f.message_type() && f.message_type() != &d) auto_fields(*f.message_type(), names);
  }
}

// The byte offset of the tokenizer's column `column` on the line that starts at `start`:
// the tokenizer counts a tab as reaching the next multiple of 8 columns.
size_t byte_offset(std::string_view text, size_t start, size_t column) {
  size_t pos = start;
  for (size_t col = 0; col < column && pos < text.size() && text[pos] != '\n'; ++pos) {
    col = text[pos] == '\t' ? col + 8 - col % 8 : col + 1;
  }
  return pos;
}

// `micro_batch: auto` as `micro_batch: 0` for the text format parser, for the fields that
// accept it (found by protobuf's own tokenizer, so comments and strings are left alone).
std::string substitute_auto(std::string_view text) {
  std::vector<std::string> names;
  auto_fields(*TrainConfig::descriptor(), names);
  std::vector<size_t> line_start{0};
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '\n') line_start.push_back(i + 1);
  }
  google::protobuf::io::ArrayInputStream input(text.data(), static_cast<int>(text.size()));
  FirstError ignored;
  google::protobuf::io::Tokenizer tok(&input, &ignored);
  tok.set_comment_style(google::protobuf::io::Tokenizer::SH_COMMENT_STYLE);
  std::vector<size_t> at;  // offsets of the `auto` tokens to replace
  std::string previous[2];
  while (tok.Next()) {
    const auto& t = tok.current();
    if (t.type == google::protobuf::io::Tokenizer::TYPE_IDENTIFIER && t.text == "auto" &&
        previous[1] == ":" && std::find(names.begin(), names.end(), previous[0]) != names.end() &&
        static_cast<size_t>(t.line) < line_start.size()) {
      at.push_back(byte_offset(text, line_start[static_cast<size_t>(t.line)],
                               static_cast<size_t>(t.column)));
    }
    previous[0] = previous[1];
    previous[1] = t.text;
  }
  std::string out(text);
  for (auto it = at.rbegin(); it != at.rend(); ++it) {
    if (*it + 4 <= out.size() && out.compare(*it, 4, "auto") == 0) out.replace(*it, 4, "0");
  }
  return out;
}

}  // namespace

TrainConfig parse_config(std::string_view text, std::string_view source) {
  TrainConfig config;
  FirstError errors;
  google::protobuf::TextFormat::Parser parser;
  parser.RecordErrorsTo(&errors);
  if (!parser.ParseFromString(substitute_auto(text), &config)) {
    if (!errors.found) throw ConfigError(std::string(source) + ": not a valid config.");
    throw ConfigError(std::string(source) + ":" + std::to_string(errors.line + 1) + ":" +
                      std::to_string(errors.column + 1) + ": " + errors.message +
                      unknown_field_hint(errors.message));
  }
  return config;
}

void apply_overrides(TrainConfig& config, const std::vector<std::string>& overrides) {
  for (const std::string& item : overrides) {
    size_t eq = item.find('=');
    if (eq == std::string::npos)
      throw ConfigError("config override \"" + item +
                        "\" is not of the form path=value (e.g. model.n_layer=4).");
    std::string_view path = std::string_view(item).substr(0, eq);
    while (!path.empty() && path.back() == ' ') path.remove_suffix(1);
    while (!path.empty() && path.front() == ' ') path.remove_prefix(1);
    set_field(config, path, std::string_view(item).substr(eq + 1));
  }
}

void resolve(TrainConfig& config, std::span<const ModelPreset> presets) {
  apply_field_defaults(config);
  apply_preset(*config.mutable_model(), presets);
  validate(config);
}

void validate(const TrainConfig& config) {
  require_finite_reals(config);  // the same sentence as --set gives for inf and nan
  validate_model(config.model());
  validate_optimizer(config.optimizer());
  validate_schedule(config.schedule());
  validate_env_settings(config);  // the comm section (runtime/config/settings.h)
  validate_batch(config);
  validate_data(config);
  validate_log(config.log());
  validate_runtime(config.runtime());
  validate_parallel(config.parallel());
  validate_pipeline_settings(config);
  validate_checkpoint(config.checkpoint());
}

std::string format_config(const TrainConfig& config) {
  google::protobuf::TextFormat::Printer printer;
  printer.SetUseUtf8StringEscaping(true);
  std::string out;
  printer.PrintToString(config, &out);
  return out;
}

int accumulation_steps(const TrainConfig& config, int data_parallel_ranks) {
  const config::BatchConfig& b = config.batch();
  int64_t per_step = static_cast<int64_t>(b.micro_batch()) * data_parallel_ranks;
  require(per_step > 0 && b.global_batch() % per_step == 0,
          "batch.global_batch = " + text(b.global_batch()) +
              " is not a multiple of batch.micro_batch = " + text(b.micro_batch()) + " x " +
              text(data_parallel_ranks) + (data_parallel_ranks == 1 ? " rank" : " ranks") +
              "; make it one so that every rank accumulates the same number of micro-batches.");
  return static_cast<int>(b.global_batch() / per_step);
}

LogLevel log_level(const TrainConfig& config) {
  switch (config.log().log_level()) {
    case config::LOG_LEVEL_DEBUG:
      return LogLevel::kDebug;
    case config::LOG_LEVEL_WARN:
      return LogLevel::kWarn;
    case config::LOG_LEVEL_ERROR:
      return LogLevel::kError;
    case config::LOG_LEVEL_OFF:
      return LogLevel::kOff;
    default:
      return LogLevel::kInfo;
  }
}

}  // namespace etr
