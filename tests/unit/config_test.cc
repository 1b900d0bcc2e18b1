// Tests of runtime/config: loading config files, `path=value` overrides of every field
// type, defaults and model presets, validation, and the text round-trip. Expected sizes
// are written out from the table, not read from the code's table.
#include <gmock/gmock.h>
#include <google/protobuf/descriptor.h>
#include <google/protobuf/descriptor.pb.h>
#include <google/protobuf/struct.pb.h>
#include <google/protobuf/util/message_differencer.h>
#include <google/protobuf/wrappers.pb.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "runtime/config/config_fields.h"
#include "runtime/config/train_config.h"
#include "runtime/error.h"

namespace etr {
namespace {

using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::util::MessageDifferencer;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

// The message of the ConfigError that `f` throws; fails the test when it throws nothing
// or something else.
std::string config_error(const std::function<void()>& f) {
  try {
    f();
  } catch (const ConfigError& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "expected ConfigError, got: " << e.what();
    return "";
  }
  ADD_FAILURE() << "expected ConfigError, nothing was thrown";
  return "";
}

// A small valid job, resolved after `overrides`.
TrainConfig resolved(const std::vector<std::string>& overrides = {}) {
  TrainConfig c = parse_config("data { synthetic: true }");
  apply_overrides(c, overrides);
  resolve(c);
  return c;
}

std::string resolve_error(const std::vector<std::string>& overrides) {
  return config_error([&] { resolved(overrides); });
}

std::vector<std::filesystem::path> example_configs() {
  std::vector<std::filesystem::path> files;
  for (const auto& entry : std::filesystem::directory_iterator(ETR_CONFIGS_DIR))
    if (entry.path().extension() == ".pbtxt") files.push_back(entry.path());
  std::sort(files.begin(), files.end());
  return files;
}

// Every scalar field of `m` and its sub-messages has a value (and every sub-message
// exists); the names of those that do not.
void collect_unset(const Message& m, const std::string& prefix, std::vector<std::string>& out) {
  const auto& type = *m.GetDescriptor();
  const auto& r = *m.GetReflection();
  for (int i = 0; i < type.field_count(); ++i) {
    const FieldDescriptor& f = *type.field(i);
    std::string path = prefix + f.name();
    if (f.is_repeated()) continue;
    if (!r.HasField(m, &f)) out.push_back(path);
    if (f.cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE)
      collect_unset(r.GetMessage(m, &f), path + ".", out);
  }
}

// ---------------------------------------------------------------------------------------
// Config files

TEST(ConfigFiles, EveryExampleLoadsAndResolves) {
  std::set<std::string> names;
  for (const auto& file : example_configs()) {
    SCOPED_TRACE(file.string());
    names.insert(file.filename().string());
    TrainConfig c = load_config(file.string());
    EXPECT_NO_THROW(resolve(c));
    std::vector<std::string> unset;
    collect_unset(c, "", unset);
    EXPECT_TRUE(unset.empty()) << "unset after resolve: " << unset.front();
  }
  EXPECT_TRUE(names.contains("tiny.pbtxt"));
  EXPECT_TRUE(names.contains("small.pbtxt"));
  EXPECT_TRUE(names.contains("demo.pbtxt"));
}

TEST(ConfigFiles, TinyAndSmallAreTheirPresets) {
  TrainConfig tiny = load_config(std::string(ETR_CONFIGS_DIR) + "/tiny.pbtxt");
  resolve(tiny);
  EXPECT_EQ(tiny.model().n_layer(), 2);
  EXPECT_EQ(tiny.model().d_model(), 64);
  EXPECT_EQ(tiny.model().seq_len(), 64);
  TrainConfig small = load_config(std::string(ETR_CONFIGS_DIR) + "/small.pbtxt");
  resolve(small);
  EXPECT_EQ(small.model().n_layer(), 4);
  EXPECT_EQ(small.model().n_head(), 4);
  EXPECT_EQ(small.model().d_model(), 256);
  EXPECT_EQ(small.model().seq_len(), 128);
}

TEST(ConfigFiles, MissingFileIsAnIoErrorNamingIt) {
  try {
    load_config("/nonexistent/dir/job.pbtxt");
    FAIL() << "no error";
  } catch (const IoError& e) {
    EXPECT_THAT(e.what(), HasSubstr("/nonexistent/dir/job.pbtxt"));
    EXPECT_THAT(e.what(), HasSubstr("No such file"));
  }
}

TEST(ConfigFiles, SyntaxErrorNamesFileLineColumnAndParserMessage) {
  std::string msg =
      config_error([] { parse_config("model {\n  n_layer: 4\n  n_head: four\n}\n", "job.pbtxt"); });
  EXPECT_THAT(msg, StartsWith("job.pbtxt:3:11: "));
  EXPECT_THAT(msg, HasSubstr("Expected integer"));

  msg = config_error([] { parse_config("model {\n  n_layer: 4\n", "job.pbtxt"); });
  EXPECT_THAT(msg, StartsWith("job.pbtxt:3:"));

  msg = config_error([] { parse_config("model { n_layer: 4 n_layer: 5 }", "job.pbtxt"); });
  EXPECT_THAT(msg, StartsWith("job.pbtxt:1:"));
  EXPECT_THAT(msg, HasSubstr("n_layer"));
}

TEST(ConfigFiles, UnknownFieldInFileSuggestsTheClosest) {
  std::string msg =
      config_error([] { parse_config("optimizer { lr: 1 }\nmodel {\n  nlayer: 4\n}\n", "j"); });
  EXPECT_THAT(msg, StartsWith("j:3:"));  // the parser points just after the name
  EXPECT_THAT(msg, HasSubstr("has no field named \"nlayer\""));
  EXPECT_THAT(msg, HasSubstr("Did you mean n_layer?"));
}

TEST(ConfigFiles, LoadConfigReportsThePathOnSyntaxErrors) {
  std::filesystem::path file = std::filesystem::temp_directory_path() /
                               ("etr_config_test_" + std::to_string(::getpid()) + ".pbtxt");
  {
    std::ofstream out(file);
    out << "# comment\nschedule { max_steps: -}\n";
  }
  std::string msg = config_error([&] { load_config(file.string()); });
  std::filesystem::remove(file);
  EXPECT_THAT(msg, StartsWith(file.string() + ":2:"));
}

// ---------------------------------------------------------------------------------------
// Overrides of TrainConfig's fields, one of each type

TEST(Overrides, EveryFieldTypeOfTrainConfig) {
  TrainConfig c;
  apply_overrides(c, {"model.n_layer=4",                  // int32
                      "schedule.max_steps=5000000000",    // int64
                      "data.seed=18446744073709551615",   // uint64
                      "optimizer.lr=1e-3",                // double
                      "data.synthetic=true",              // bool
                      "data.train_file=my data/a=b.tok",  // string, verbatim
                      "log.log_level=debug",              // enum, short name
                      "model.preset="});                  // empty string
  EXPECT_EQ(c.model().n_layer(), 4);
  EXPECT_EQ(c.schedule().max_steps(), 5000000000);
  EXPECT_EQ(c.data().seed(), 18446744073709551615u);
  EXPECT_DOUBLE_EQ(c.optimizer().lr(), 1e-3);
  EXPECT_TRUE(c.data().synthetic());
  EXPECT_EQ(c.data().train_file(), "my data/a=b.tok");
  EXPECT_EQ(c.log().log_level(), config::LOG_LEVEL_DEBUG);
  EXPECT_TRUE(c.model().has_preset());
  EXPECT_EQ(c.model().preset(), "");
}

TEST(Overrides, LaterOverridesWinAndOverrideTheFile) {
  TrainConfig c = parse_config("model { n_layer: 2 } log { log_level: LOG_LEVEL_INFO }");
  apply_overrides(c, {"model.n_layer=3", "model.n_layer=6", "log.log_level=LOG_LEVEL_WARN",
                      "data.synthetic=1", "data.synthetic=0"});
  EXPECT_EQ(c.model().n_layer(), 6);
  EXPECT_EQ(c.log().log_level(), config::LOG_LEVEL_WARN);
  EXPECT_TRUE(c.data().has_synthetic());
  EXPECT_FALSE(c.data().synthetic());
}

TEST(Overrides, EnumNamesAreCaseInsensitiveWithOptionalPrefix) {
  TrainConfig c;
  for (const auto& [text, want] : std::vector<std::pair<std::string, config::LogLevel>>{
           {"error", config::LOG_LEVEL_ERROR},
           {"Off", config::LOG_LEVEL_OFF},
           {"log_level_info", config::LOG_LEVEL_INFO},
           {"LOG_LEVEL_DEBUG", config::LOG_LEVEL_DEBUG},
           {" warn ", config::LOG_LEVEL_WARN}}) {
    apply_overrides(c, {"log.log_level=" + text});
    EXPECT_EQ(c.log().log_level(), want) << text;
  }
}

TEST(Overrides, SpacesAroundThePathAreIgnored) {
  TrainConfig c;
  apply_overrides(c, {" model.n_head =8"});
  EXPECT_EQ(c.model().n_head(), 8);
}

// ---------------------------------------------------------------------------------------
// Overrides of the types TrainConfig does not use (yet), on protobuf's own messages

TEST(Overrides, FloatAndUnsigned32) {
  google::protobuf::FloatValue f;
  set_field(f, "value", "0.25");
  EXPECT_EQ(f.value(), 0.25f);
  EXPECT_THAT(config_error([&] { set_field(f, "value", "1e39"); }), HasSubstr("out of range"));

  google::protobuf::UInt32Value u;
  set_field(u, "value", "4294967295");
  EXPECT_EQ(u.value(), 4294967295u);
  EXPECT_THAT(config_error([&] { set_field(u, "value", "4294967296"); }),
              HasSubstr("out of range [0, 4294967295]"));
  EXPECT_THAT(config_error([&] { set_field(u, "value", "-1"); }),
              HasSubstr("expected a non-negative integer"));
}

TEST(Overrides, Int64Uint64DoubleBytes) {
  google::protobuf::UninterpretedOption o;
  set_field(o, "negative_int_value", "-9223372036854775808");
  set_field(o, "positive_int_value", "+7");
  set_field(o, "double_value", "-2.5e-300");
  set_field(o, "string_value", "raw,bytes");
  EXPECT_EQ(o.negative_int_value(), INT64_MIN);
  EXPECT_EQ(o.positive_int_value(), 7u);
  EXPECT_EQ(o.double_value(), -2.5e-300);
  EXPECT_EQ(o.string_value(), "raw,bytes");
}

TEST(Overrides, RepeatedFieldsAreCommaListsThatReplace) {
  google::protobuf::FileDescriptorProto file;
  file.add_dependency("old.proto");
  set_field(file, "dependency", "a.proto,b.proto,c.proto");
  ASSERT_EQ(file.dependency_size(), 3);
  EXPECT_EQ(file.dependency(2), "c.proto");
  set_field(file, "public_dependency", "0, 2");
  ASSERT_EQ(file.public_dependency_size(), 2);
  EXPECT_EQ(file.public_dependency(1), 2);
  // A bad element leaves the list as it was.
  EXPECT_THAT(config_error([&] { set_field(file, "public_dependency", "1,x"); }),
              HasSubstr("bad value \"x\" for public_dependency (list of int32)"));
  EXPECT_EQ(file.public_dependency_size(), 2);
  set_field(file, "dependency", "");
  EXPECT_EQ(file.dependency_size(), 0);
}

TEST(Overrides, NestedMessagesAreCreatedOnTheWay) {
  google::protobuf::FileDescriptorProto file;
  set_field(file, "options.java_package", "org.example");
  set_field(file, "options.optimize_for", "code_size");  // enum without a common prefix
  EXPECT_EQ(file.options().java_package(), "org.example");
  EXPECT_EQ(file.options().optimize_for(), google::protobuf::FileOptions::CODE_SIZE);
}

TEST(Overrides, MapsAndRepeatedMessagesAreRefused) {
  google::protobuf::Struct s;
  EXPECT_THAT(config_error([&] { set_field(s, "fields", "x"); }), HasSubstr("is a map"));
  google::protobuf::FileDescriptorProto file;
  EXPECT_THAT(config_error([&] { set_field(file, "message_type", "x"); }),
              HasSubstr("message_type is a list of messages"));
  EXPECT_THAT(config_error([&] { set_field(file, "message_type.name", "x"); }),
              HasSubstr("message_type is a list of messages"));
}

// ---------------------------------------------------------------------------------------
// Override errors

TEST(OverrideErrors, UnknownFieldListsTheClosestNames) {
  TrainConfig c;
  std::string msg = config_error([&] { apply_overrides(c, {"model.nlayer=4"}); });
  EXPECT_THAT(msg, HasSubstr("unknown config field \"model.nlayer\""));
  EXPECT_THAT(msg, HasSubstr("did you mean model.n_layer?"));
  EXPECT_THAT(msg, HasSubstr("fields of model: preset, n_layer, n_head"));

  msg = config_error([&] { apply_overrides(c, {"modle.n_layer=4"}); });
  EXPECT_THAT(msg, HasSubstr("did you mean model.n_layer?"));
  EXPECT_THAT(msg, HasSubstr("top-level fields: model, optimizer, schedule"));

  // The right name under a missing or wrong parent.
  msg = config_error([&] { apply_overrides(c, {"n_layer=4"}); });
  EXPECT_THAT(msg, HasSubstr("did you mean model.n_layer?"));
  msg = config_error([&] { apply_overrides(c, {"data.file=x"}); });
  EXPECT_THAT(msg, HasSubstr("did you mean data.train_file?"));
  msg = config_error([&] { apply_overrides(c, {"optimizer.max_steps=4"}); });
  EXPECT_THAT(msg, HasSubstr("did you mean schedule.max_steps?"));

  // Nothing close: no guess, but the valid names.
  msg = config_error([&] { apply_overrides(c, {"optimizer.learning_rate=1"}); });
  EXPECT_THAT(msg, Not(HasSubstr("did you mean")));
  EXPECT_THAT(msg, HasSubstr("fields of optimizer: lr, beta1, beta2, eps"));
  EXPECT_FALSE(c.has_model());  // nothing was created on the way
}

TEST(OverrideErrors, BadValuesNameFieldTypeAndWhatIsExpected) {
  TrainConfig c;
  auto error = [&](const std::string& item) {
    return config_error([&] { apply_overrides(c, {item}); });
  };
  EXPECT_EQ(error("model.n_layer=four"),
            "bad value \"four\" for model.n_layer (int32): expected an integer");
  EXPECT_EQ(error("model.n_layer=4.5"),
            "bad value \"4.5\" for model.n_layer (int32): expected an integer");
  EXPECT_EQ(error("model.n_layer=3000000000"),
            "bad value \"3000000000\" for model.n_layer (int32): out of range "
            "[-2147483648, 2147483647]");
  EXPECT_EQ(error("data.seed=-1"),
            "bad value \"-1\" for data.seed (uint64): expected a non-negative integer");
  EXPECT_THAT(error("optimizer.lr=fast"),
              StartsWith("bad value \"fast\" for optimizer.lr (double): expected a finite"));
  EXPECT_THAT(error("optimizer.lr=nan"), HasSubstr("expected a finite number"));
  EXPECT_THAT(error("optimizer.lr=inf"), HasSubstr("out of range"));
  EXPECT_THAT(error("optimizer.lr="), HasSubstr("expected a finite number"));
  EXPECT_EQ(error("data.synthetic=yes"),
            "bad value \"yes\" for data.synthetic (bool): expected true or false");
  EXPECT_THAT(error("log.log_level=loud"),
              StartsWith("bad value \"loud\" for log.log_level (enum etr.config.LogLevel): "
                         "expected one of unspecified, debug, info, warn, error, off"));
  EXPECT_FALSE(c.has_optimizer());  // a bad value creates nothing
  EXPECT_FALSE(c.has_model());
}

TEST(OverrideErrors, MalformedItemsAndPaths) {
  TrainConfig c;
  auto error = [&](const std::string& item) {
    return config_error([&] { apply_overrides(c, {item}); });
  };
  EXPECT_THAT(error("model.n_layer"), HasSubstr("is not of the form path=value"));
  EXPECT_THAT(error("=4"), HasSubstr("names no field"));
  EXPECT_THAT(error("model=4"),
              HasSubstr("model is a group of settings, not a value; set one of its fields, "
                        "e.g. model.preset=..."));
  EXPECT_THAT(error("model.n_layer.x=4"), StartsWith("model.n_layer is a value"));
  EXPECT_THAT(error("model..n_layer=4"), HasSubstr("unknown config field"));
}

// ---------------------------------------------------------------------------------------
// Defaults and presets

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
  EXPECT_EQ(c.runtime().host_memory_budget(), "");
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
  resolve(twice);
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
  for (const ModelPreset& p : model_presets()) {
    SCOPED_TRACE(std::string(p.name));
    TrainConfig c = resolved({"model.preset=" + std::string(p.name), "data.synthetic_size=8MiB"});
    EXPECT_EQ(c.model().d_model() % c.model().n_head(), 0);
    EXPECT_EQ(find_model_preset(p.name), &p);
  }
  EXPECT_NE(find_model_preset("medium-cpu"), nullptr);
  EXPECT_EQ(find_model_preset("gpt2"), nullptr);
}

TEST(Presets, ExplicitSizesBeatThePreset) {
  TrainConfig c = parse_config("model { preset: \"gpt2-124m\" n_layer: 2 }");
  apply_overrides(c, {"model.seq_len=256", "data.synthetic=true"});
  resolve(c);
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
      {{"batch.global_batch=0"}, "batch.global_batch is 0; it must be at least 1."},
      {{"batch.micro_batch=0"}, "batch.micro_batch is 0; it must be at least 1."},
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
      {{"runtime.host_memory_budget=0"},
       "runtime.host_memory_budget is 0; give a size such as 8GiB, or \"\" for the "
       "allocator's default."},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(::testing::PrintToString(c.overrides));
    EXPECT_EQ(resolve_error(c.overrides), c.message);
  }
  EXPECT_THAT(resolve_error({"data.synthetic_size=lots"}),
              StartsWith("data.synthetic_size: 'lots' is not a byte count"));
  EXPECT_THAT(resolve_error({"runtime.host_memory_budget=8 gigs"}),
              StartsWith("runtime.host_memory_budget: '8 gigs' is not a byte count"));
  // Not synthetic: the byte-token vocabulary and corpus-size rules do not apply.
  EXPECT_NO_THROW(resolved({"data.synthetic=false", "data.train_file=x.tok", "model.vocab_size=100",
                            "data.synthetic_size=1"}));
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
    resolve(configs.back());
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
