// The settings registry (runtime/config/settings.h): every variable names a real field of
// the config with a default; a set variable overrides the config file and a bad one is
// refused with a sentence naming it; a bad value in the config file is refused naming
// the field; CommOptions::from_config carries every field (collectives/comm_options.h).
#include "runtime/config/settings.h"

#include <gtest/gtest.h>

#include <functional>
#include <set>
#include <string>

#include "collectives/comm_options.h"
#include "runtime/config/config_fields.h"
#include "runtime/config/train_config.h"
#include "runtime/error.h"
#include "unit/scoped_env.h"

namespace etr {
namespace {

using testing::ScopedEnv;

std::string config_error(const std::function<void()>& f) {
  try {
    f();
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(SettingsRegistry, EveryVariableSetsADistinctFieldThatHasADefault) {
  std::set<std::string> envs, paths;
  for (const EnvSetting& s : env_settings()) {
    EXPECT_TRUE(envs.insert(std::string(s.env)).second) << s.env;
    EXPECT_TRUE(paths.insert(std::string(s.path)).second) << s.path;
    EXPECT_EQ(find_env_setting(s.env), &s);
  }
  EXPECT_EQ(env_settings().size(), 12u);
  config::TrainConfig c;
  apply_field_defaults(c);
  EXPECT_NO_THROW(validate_env_settings(c));  // the defaults are valid
  EXPECT_EQ(c.comm().timeout_s(), 300);
  EXPECT_EQ(find_env_setting("ETR_NO_SUCH"), nullptr);
}

TEST(SettingsRegistry, AVariableOverridesTheConfigFile) {
  config::TrainConfig c = parse_config("comm { ring_depth: 2 timeout_s: 50 }");
  ScopedEnv depth("ETR_RING_DEPTH", "8");
  ScopedEnv empty("ETR_COMM_TIMEOUT_S", "");  // empty: unset
  ScopedEnv algo("ETR_ALLREDUCE_ALGO", "ring");
  const std::vector<std::string> applied = apply_env_settings(c);
  EXPECT_EQ(c.comm().ring_depth(), 8);
  EXPECT_EQ(c.comm().timeout_s(), 50);
  EXPECT_EQ(c.comm().allreduce_algo(), "ring");
  EXPECT_EQ(applied, (std::vector<std::string>{"ETR_ALLREDUCE_ALGO=ring", "ETR_RING_DEPTH=8"}));
  // --set comes after the variables (parallel/program.cc) and wins.
  apply_overrides(c, {"comm.ring_depth=3"});
  EXPECT_EQ(c.comm().ring_depth(), 3);
}

TEST(SettingsRegistry, BadValuesAreOneSentenceNamingTheirSource) {
  {
    ScopedEnv depth("ETR_RING_DEPTH", "0");
    config::TrainConfig c;
    EXPECT_EQ(config_error([&] { apply_env_settings(c); }),
              "ETR_RING_DEPTH='0' is not a positive whole number");
    EXPECT_FALSE(c.comm().has_ring_depth());  // unchanged when refused
  }
  {
    ScopedEnv chunk("ETR_RING_CHUNK_BYTES", "12");
    config::TrainConfig c;
    EXPECT_EQ(config_error([&] { apply_env_settings(c); }),
              "ETR_RING_CHUNK_BYTES='12' is not a byte count of at least 64 bytes");
  }
  {
    ScopedEnv algo("ETR_ALLREDUCE_ALGO", "tree");
    EXPECT_EQ(config_error([] { CommOptions::from_env(); }),
              "ETR_ALLREDUCE_ALGO='tree' is not an allreduce algorithm (auto, ring, rd, hier or mpi)");
  }
  config::TrainConfig c = parse_config("comm { max_idle_sleep_us: 0 }");
  apply_field_defaults(c);
  EXPECT_EQ(config_error([&] { validate_env_settings(c); }),
            "comm.max_idle_sleep_us = 0 is not a positive number of microseconds (or -1 for "
            "etr's choice)");
}

TEST(SettingsRegistry, CommOptionsCarryEveryField) {
  config::TrainConfig c = parse_config(
      "comm { timeout_s: 2.5 allreduce_algo: \"rd\" allreduce_small_bytes: \"4KiB\" "
      "ring_chunk_bytes: \"1MiB\" ring_depth: 6 inline_bytes: \"0\" spin_polls: 7 "
      "yield_polls: 0 max_idle_sleep_us: 300 device_backend: \"staged\" "
      "learned_timeout_multiple: 4 learned_timeout_floor_s: 1.5 }");
  const CommOptions o = CommOptions::from_config(c.comm());
  EXPECT_EQ(o.timeout.count(), 2500);
  EXPECT_EQ(o.allreduce_algo, AllreduceAlgo::kRecursiveDoubling);
  EXPECT_EQ(o.small_bytes, 4096u);
  EXPECT_EQ(o.chunk_bytes, 1u << 20);
  EXPECT_EQ(o.depth, 6);
  EXPECT_EQ(o.inline_bytes, 0u);
  EXPECT_EQ(o.spin_polls, 7);
  EXPECT_EQ(o.yield_polls, 0);
  EXPECT_EQ(o.max_idle_sleep.count(), 300);
  EXPECT_EQ(o.device_backend, "staged");
  EXPECT_EQ(o.learned_timeout_multiple, 4);
  EXPECT_EQ(o.learned_timeout_floor.count(), 1500);
  // The defaults leave the choices to etr (-1).
  config::TrainConfig d;
  apply_field_defaults(d);
  const CommOptions od = CommOptions::from_config(d.comm());
  EXPECT_EQ(od.spin_polls, -1);
  EXPECT_EQ(od.yield_polls, -1);
  EXPECT_LT(od.max_idle_sleep.count(), 0);
  EXPECT_EQ(od.timeout.count(), 300'000);
  EXPECT_EQ(od.device_backend, "auto");
  EXPECT_EQ(od.learned_timeout_multiple, 10);
  EXPECT_EQ(od.learned_timeout_floor.count(), 30'000);
}

}  // namespace
}  // namespace etr
