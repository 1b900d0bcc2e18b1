// Tests of runtime/config: defaults and model presets, validation and the text round-trip.
// Expected sizes are written out from the table, not read from the code's table.
#include "unit/config_test_util.h"

namespace etr {
namespace {

using namespace config_testing;

TEST(Defaults, EveryScalarHasPresenceAndADefaultOrAPreset) {
  const std::set<std::string> from_preset = {"n_layer", "n_head", "d_model", "seq_len",
                                             "vocab_size"};
  std::function<void(const google::protobuf::Descriptor&)> check =
      [&](const google::protobuf::Descriptor& type) {
        for (int i = 0; i < type.field_count(); ++i) {
          const FieldDescriptor& f = *type.field(i);
          SCOPED_TRACE(f.full_name());
          if (f.cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) {
            check(*f.message_type());
            continue;
          }
          EXPECT_TRUE(f.has_presence()) << "declare it `optional`";
          bool preset = type.name() == "ModelConfig" && from_preset.contains(f.name());
          EXPECT_NE(f.options().HasExtension(config::default_value), preset);
        }
      };
  check(*TrainConfig::descriptor());
}

TEST(Defaults, ResolveFillsEveryFieldWithTheDocumentedDefaults) {
  TrainConfig c = resolved();
  std::vector<std::string> unset;
  collect_unset(c, "", unset);
  EXPECT_TRUE(unset.empty()) << unset.front();
  EXPECT_EQ(c.model().preset(), "tiny");
  EXPECT_EQ(c.model().n_layer(), 2);
  EXPECT_DOUBLE_EQ(c.model().init_std(), 0.02);
  EXPECT_DOUBLE_EQ(c.optimizer().lr(), 6e-4);
  EXPECT_DOUBLE_EQ(c.optimizer().beta2(), 0.95);
  EXPECT_DOUBLE_EQ(c.optimizer().eps(), 1e-8);
  EXPECT_EQ(c.schedule().max_steps(), 200);
  EXPECT_EQ(c.batch().global_batch(), 8);
  EXPECT_EQ(c.data().synthetic_size(), "1MiB");
  EXPECT_EQ(c.log().log_level(), config::LOG_LEVEL_INFO);
  EXPECT_EQ(c.runtime().memory_budget(), "");
  EXPECT_EQ(c.output().export_safetensors(), "");
}

TEST(Defaults, ExplicitValuesAreKeptEvenWhenZero) {
  TrainConfig c =
      resolved({"log.eval_every=0", "schedule.warmup_steps=0", "optimizer.grad_clip=0"});
  EXPECT_EQ(c.log().eval_every(), 0);
  EXPECT_EQ(c.schedule().warmup_steps(), 0);
  EXPECT_EQ(c.optimizer().grad_clip(), 0.0);
}

TEST(Defaults, ResolveIsIdempotent) {
  TrainConfig once = resolved({"model.preset=small"});
  TrainConfig twice = once;
  resolve(twice, gpt::model_presets());
  EXPECT_TRUE(MessageDifferencer::Equals(once, twice));
}

TEST(Defaults, ApplyFieldDefaultsLeavesMessagesWithoutDefaultsAlone) {
  google::protobuf::FileDescriptorProto file;
  apply_field_defaults(file);
  EXPECT_EQ(file.ByteSizeLong(), 0u);
}

TEST(Presets, ResolveToTheStatedSizes) {
  struct Want {
    const char* name;
    int n_layer, n_head, d_model, seq_len, vocab_size;
  };
  const Want wants[] = {
      {"tiny", 2, 2, 64, 64, 256},
      {"small", 4, 4, 256, 128, 256},
      {"gpt2-124m", 12, 12, 768, 1024, 50257},
      {"gpt2-350m", 24, 16, 1024, 1024, 50257},
      {"gpt2-774m", 36, 20, 1280, 1024, 50257},
      {"gpt2-1558m", 48, 25, 1600, 1024, 50257},
  };
  for (const Want& w : wants) {
    SCOPED_TRACE(w.name);
    TrainConfig c = resolved({std::string("model.preset=") + w.name, "data.synthetic_size=8MiB"});
    EXPECT_EQ(c.model().n_layer(), w.n_layer);
    EXPECT_EQ(c.model().n_head(), w.n_head);
    EXPECT_EQ(c.model().d_model(), w.d_model);
    EXPECT_EQ(c.model().seq_len(), w.seq_len);
    EXPECT_EQ(c.model().vocab_size(), w.vocab_size);
  }
  // Every preset in the table resolves and is a valid model.
  for (const ModelPreset& p : gpt::model_presets()) {
    SCOPED_TRACE(std::string(p.name));
    TrainConfig c = resolved({"model.preset=" + std::string(p.name), "data.synthetic_size=8MiB"});
    EXPECT_EQ(c.model().d_model() % c.model().n_head(), 0);
    EXPECT_EQ(gpt::find_model_preset(p.name), &p);
  }
  EXPECT_NE(gpt::find_model_preset("medium-cpu"), nullptr);
  EXPECT_EQ(gpt::find_model_preset("gpt2"), nullptr);
}

TEST(Presets, ExplicitSizesBeatThePreset) {
  TrainConfig c = parse_config("model { preset: \"gpt2-124m\" n_layer: 2 }");
  apply_overrides(c, {"model.seq_len=256", "data.synthetic=true"});
  resolve(c, gpt::model_presets());
  EXPECT_EQ(c.model().n_layer(), 2);
  EXPECT_EQ(c.model().seq_len(), 256);
  EXPECT_EQ(c.model().d_model(), 768);
  EXPECT_EQ(c.model().vocab_size(), 50257);
}

TEST(Presets, UnknownOrMissingPreset) {
  EXPECT_EQ(resolve_error({"model.preset=gpt2-125m"}),
            "model.preset \"gpt2-125m\" is not a preset (did you mean gpt2-124m?); the presets "
            "are tiny, small, medium-cpu, gpt2-124m, gpt2-350m, gpt2-774m, gpt2-1558m, or \"\" "
            "for none.");
  EXPECT_THAT(resolve_error({"model.preset=", "model.n_layer=2"}),
              StartsWith("model.n_head is not set and model.preset is empty; name a preset"));
  TrainConfig c = resolved({"model.preset=", "model.n_layer=1", "model.n_head=1", "model.d_model=8",
                            "model.seq_len=8", "model.vocab_size=256"});
  EXPECT_EQ(c.model().d_model(), 8);
}

// ---------------------------------------------------------------------------------------
// Validation: each rule, one sentence naming field and value

TEST(Validation, EachRuleHasItsSentence) {
  struct Case {
    std::vector<std::string> overrides;
    std::string message;
  };
  const Case cases[] = {
      {{"model.n_layer=0"}, "model.n_layer is 0; it must be at least 1."},
      {{"model.n_head=-2"}, "model.n_head is -2; it must be at least 1."},
      {{"model.d_model=100", "model.n_head=3"},
       "model.d_model = 100 is not a multiple of model.n_head = 3; the heads must split the "
       "model width evenly."},
      {{"model.seq_len=0"}, "model.seq_len is 0; it must be at least 1."},
      {{"model.vocab_size=100"},
       "model.vocab_size is 100; it must be at least 256 with data.synthetic, whose tokens are "
       "bytes."},
      {{"model.init_std=0"}, "model.init_std is 0; it must be greater than 0."},
      {{"optimizer.lr=0"}, "optimizer.lr is 0; it must be greater than 0."},
      {{"optimizer.lr=-0.001"}, "optimizer.lr is -0.001; it must be greater than 0."},
      {{"optimizer.beta1=1"}, "optimizer.beta1 is 1; it must be in [0, 1)."},
      {{"optimizer.beta2=-0.5"}, "optimizer.beta2 is -0.5; it must be in [0, 1)."},
      {{"optimizer.eps=0"}, "optimizer.eps is 0; it must be greater than 0."},
      {{"optimizer.weight_decay=-1"}, "optimizer.weight_decay is -1; it must be 0 or more."},
      {{"optimizer.grad_clip=-1"},
       "optimizer.grad_clip is -1; it must be 0 (no clipping) or more."},
      {{"schedule.max_steps=0"}, "schedule.max_steps is 0; it must be at least 1."},
      {{"schedule.warmup_steps=300", "schedule.max_steps=200"},
       "schedule.warmup_steps = 300 is more than schedule.max_steps = 200; warmup must end by "
       "the last step."},
      {{"schedule.warmup_steps=-1"}, "schedule.warmup_steps is -1; it must be 0 or more."},
      {{"schedule.min_lr_ratio=1.5"}, "schedule.min_lr_ratio is 1.5; it must be in [0, 1]."},
      {{"batch.global_batch=-1"}, "batch.global_batch is -1; it must be at least 1, or auto (0)."},
      {{"batch.micro_batch=-2"}, "batch.micro_batch is -2; it must be at least 1, or auto (0)."},
      {{"batch.min_global_batch=0"}, "batch.min_global_batch is 0; it must be at least 1."},
      {{"batch.min_global_batch=16", "batch.max_global_batch=8"},
       "batch.max_global_batch = 8 is smaller than batch.min_global_batch = 16."},
      {{"batch.lr_scaling=cubic"}, "batch.lr_scaling = \"cubic\" is not adascale, sqrt or linear."},
      {{"batch.memory_margin=0.95"},
       "batch.memory_margin is 0.95; it must be a fraction in [0, 0.9]."},
      {{"batch.shares=fair"}, "batch.shares = \"fair\" is not equal or throughput."},
      {{"runtime.recompute=yes"}, "runtime.recompute = \"yes\" is not off, blocks or auto."},
      {{"batch.global_batch=10", "batch.micro_batch=4"},
       "batch.global_batch = 10 is not a multiple of batch.micro_batch = 4 x 1 rank; make it "
       "one so that every rank accumulates the same number of micro-batches."},
      {{"data.synthetic=false"},
       "No training data: set data.train_file to a token file (etr-tokenize makes one from "
       "text), or data.synthetic=true for a generated corpus."},
      {{"data.train_file=x.tok"},
       "data.train_file = \"x.tok\" and data.synthetic = true both name a corpus; keep one."},
      {{"data.val_fraction=1"}, "data.val_fraction is 1; it must be in [0, 1)."},
      {{"data.val_fraction=0"},
       "log.eval_every = 100 asks for evaluations but data.val_fraction is 0; hold out some "
       "data or set log.eval_every=0."},
      {{"data.synthetic_size=50", "log.eval_every=0"},
       "data.synthetic_size = 50 leaves 45 training tokens, fewer than one sequence of 65 "
       "(model.seq_len + 1); make it larger."},
      {{"data.synthetic_size=600"},
       "data.synthetic_size = 600 with data.val_fraction = 0.1 holds out 60 tokens, fewer than "
       "one sequence of 65 (model.seq_len + 1); make either larger or set log.eval_every=0."},
      {{"log.log_every=0"}, "log.log_every is 0; it must be at least 1."},
      {{"log.eval_every=-5"}, "log.eval_every is -5; it must be 0 (never) or more."},
      {{"log.eval_batches=0"}, "log.eval_batches is 0; it must be at least 1."},
      {{"log.sample_tokens=-1"}, "log.sample_tokens is -1; it must be 0 (none) or more."},
      {{"log.log_level=unspecified"},
       "log.log_level is LOG_LEVEL_UNSPECIFIED; choose debug, info, warn, error or off."},
      {{"runtime.threads=-1"}, "runtime.threads is -1; it must be 0 (automatic) or more."},
      {{"runtime.memory_budget=0"},
       "runtime.memory_budget is 0; give a size such as 8GiB, or \"\" for the "
       "allocator's default."},
      {{"checkpoint.every=-1"}, "checkpoint.every is -1; it must be 0 (only at the end) or more."},
      {{"checkpoint.keep=-2"}, "checkpoint.keep is -2; it must be 0 (keep all) or more."},
      {{"checkpoint.fast_every=5"},
       "checkpoint.fast_every = 5 but checkpoint.fast_dir is empty; name a directory for the "
       "fast tier (e.g. /dev/shm/etr-job)."},
      {{"checkpoint.dir=ck", "checkpoint.fast_dir=ck"},
       "checkpoint.fast_dir and checkpoint.dir are both \"ck\"; the two tiers need "
       "directories of their own."},
      {{"checkpoint.resume=latest"},
       "checkpoint.resume = latest but neither checkpoint.dir nor checkpoint.fast_dir is set; "
       "name the directory to resume from."},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(::testing::PrintToString(c.overrides));
    EXPECT_EQ(resolve_error(c.overrides), c.message);
  }
  EXPECT_THAT(resolve_error({"data.synthetic_size=lots"}),
              StartsWith("data.synthetic_size: 'lots' is not a byte count"));
  EXPECT_THAT(resolve_error({"runtime.memory_budget=8 gigs"}),
              StartsWith("runtime.memory_budget: '8 gigs' is not a byte count"));
  // Not synthetic: the byte-token vocabulary and corpus-size rules do not apply.
  EXPECT_NO_THROW(resolved({"data.synthetic=false", "data.train_file=x.tok", "model.vocab_size=100",
                            "data.synthetic_size=1"}));
}

TEST(Validation, AutoIsZeroOnlyWhereAFieldAcceptsIt) {
  const TrainConfig c = resolved({"batch.micro_batch=auto", "batch.global_batch= auto"});
  EXPECT_EQ(c.batch().micro_batch(), 0);
  EXPECT_EQ(c.batch().global_batch(), 0);
  // 10 sequences need no micro-batch multiple when the micro-batch is automatic.
  EXPECT_EQ(resolved({"batch.micro_batch=auto", "batch.global_batch=10"}).batch().global_batch(), 10);
  EXPECT_EQ(resolve_error({"model.n_layer=auto"}),
            "bad value \"auto\" for model.n_layer (int32): expected an integer");
  // In a config file too; a comment or a string saying `micro_batch: auto` is left alone.
  const TrainConfig f = parse_config(
      "batch { micro_batch: auto  # micro_batch: auto\n global_batch:auto }\n"
      "log { sample_prompt: \"micro_batch: auto\" }\n", "test");
  EXPECT_EQ(f.batch().micro_batch(), 0);
  EXPECT_TRUE(f.batch().has_micro_batch());
  EXPECT_EQ(f.batch().global_batch(), 0);
  EXPECT_EQ(f.log().sample_prompt(), "micro_batch: auto");
  EXPECT_THROW(parse_config("model { n_layer: auto }", "test"), ConfigError);
  // Tab-indented: the tokenizer counts a tab as up to 8 columns, the text as one byte.
  const TrainConfig t = parse_config("batch {\tmicro_batch:\tauto\n\t\tglobal_batch: auto }", "t");
  EXPECT_TRUE(t.batch().has_micro_batch());
  EXPECT_EQ(t.batch().micro_batch(), 0);
  EXPECT_EQ(t.batch().global_batch(), 0);
  // A tab's columns reaching past the end of the text (found by fuzz_config).
  EXPECT_THROW(parse_config("batch {\n\tglobal_batch:auto", "t"), ConfigError);
}

TEST(Validation, AccumulationStepsPerDataParallelWorld) {
  TrainConfig c = resolved({"batch.global_batch=24", "batch.micro_batch=4"});
  EXPECT_EQ(accumulation_steps(c), 6);
  EXPECT_EQ(accumulation_steps(c, 2), 3);
  EXPECT_EQ(accumulation_steps(c, 6), 1);
  EXPECT_THAT(config_error([&] { accumulation_steps(c, 4); }),
              StartsWith("batch.global_batch = 24 is not a multiple of batch.micro_batch = 4 x "
                         "4 ranks"));
}

TEST(Validation, LogLevelMapsToTheLoggers) {
  EXPECT_EQ(log_level(resolved()), LogLevel::kInfo);
  EXPECT_EQ(log_level(resolved({"log.log_level=debug"})), LogLevel::kDebug);
  EXPECT_EQ(log_level(resolved({"log.log_level=warn"})), LogLevel::kWarn);
  EXPECT_EQ(log_level(resolved({"log.log_level=error"})), LogLevel::kError);
  EXPECT_EQ(log_level(resolved({"log.log_level=off"})), LogLevel::kOff);
}

// ---------------------------------------------------------------------------------------
// The start-up print

TEST(Format, RoundTripsThroughTheParser) {
  std::vector<TrainConfig> configs = {TrainConfig(), resolved()};
  for (const auto& file : example_configs()) {
    configs.push_back(load_config(file.string()));
    configs.push_back(configs.back());
    resolve(configs.back(), gpt::model_presets());
  }
  TrainConfig tricky =
      resolved({"optimizer.lr=0.1", "optimizer.eps=1e-300", "model.init_std=0.30000000000000004"});
  tricky.mutable_log()->set_sample_prompt("quote \" backslash \\ newline \n tab \t é ✓ \x01");
  configs.push_back(tricky);
  for (const TrainConfig& c : configs) {
    std::string text = format_config(c);
    TrainConfig back = parse_config(text, "formatted");
    EXPECT_TRUE(MessageDifferencer::Equals(c, back)) << text;
  }
}

TEST(Format, PrintsOneFieldPerLineGroupedBySection) {
  std::string text = format_config(resolved());
  EXPECT_THAT(text, HasSubstr("model {\n  preset: \"tiny\"\n  n_layer: 2\n"));
  EXPECT_THAT(text, HasSubstr("  lr: 0.0006\n"));
  EXPECT_THAT(text, HasSubstr("  log_level: LOG_LEVEL_INFO\n"));
  EXPECT_THAT(text, HasSubstr("  export_safetensors: \"\"\n"));
}

// ---------------------------------------------------------------------------------------
// closest_matches

TEST(ClosestMatches, TyposAndMisplacedNames) {
  std::vector<std::string> names = {"model.n_layer", "model.n_head", "optimizer.lr",
                                    "schedule.max_steps"};
  EXPECT_EQ(closest_matches("model.n_layr", names), std::vector<std::string>{"model.n_layer"});
  EXPECT_EQ(closest_matches("lr", names), std::vector<std::string>{"optimizer.lr"});
  EXPECT_EQ(closest_matches("max_step", names), std::vector<std::string>{"schedule.max_steps"});
  EXPECT_TRUE(closest_matches("zzzzzz", names).empty());
  // Only the best: "lr" is not also "log" (two edits away).
  EXPECT_EQ(closest_matches("lr", {"log", "optimizer.lr"}),
            std::vector<std::string>{"optimizer.lr"});
  // Ties in candidate order, at most `max`.
  EXPECT_EQ(closest_matches("ab", {"xb", "ax", "ay"}, 2), (std::vector<std::string>{"xb", "ax"}));
  // A sibling containing the name; not a cousin.
  EXPECT_EQ(closest_matches("data.file", {"data.train_file", "log.metrics_file"}),
            std::vector<std::string>{"data.train_file"});
  EXPECT_TRUE(closest_matches("batch.size", {"batch.global_batch", "data.synthetic_size"}).empty());
  EXPECT_TRUE(closest_matches("x", {}).empty());
}

}  // namespace
}  // namespace etr
