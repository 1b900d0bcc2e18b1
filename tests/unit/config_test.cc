// Tests of runtime/config: loading config files and `path=value` overrides of every field
// type, with their errors. Defaults, presets, validation and the text round-trip are in
// config_resolve_test.cc.
#include "unit/config_test_util.h"
#include "examples/gpt/model_presets.h"

namespace etr {
namespace {

using namespace config_testing;


TEST(ConfigFiles, EveryExampleLoadsAndResolves) {
  std::set<std::string> names;
  for (const auto& file : example_configs()) {
    SCOPED_TRACE(file.string());
    names.insert(file.filename().string());
    TrainConfig c = load_config(file.string());
    EXPECT_NO_THROW(resolve(c, gpt::model_presets()));
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
  resolve(tiny, gpt::model_presets());
  EXPECT_EQ(tiny.model().n_layer(), 2);
  EXPECT_EQ(tiny.model().d_model(), 64);
  EXPECT_EQ(tiny.model().seq_len(), 64);
  TrainConfig small = load_config(std::string(ETR_CONFIGS_DIR) + "/small.pbtxt");
  resolve(small, gpt::model_presets());
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

}  // namespace
}  // namespace etr
