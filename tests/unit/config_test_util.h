// Helpers shared by the runtime/config tests (config_test.cc, config_resolve_test.cc).
#pragma once

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
#include "examples/gpt/model_presets.h"

namespace etr::config_testing {

using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::util::MessageDifferencer;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

// The message of the ConfigError that `f` throws; fails the test when it throws nothing
// or something else.
inline std::string config_error(const std::function<void()>& f) {
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
inline TrainConfig resolved(const std::vector<std::string>& overrides = {}) {
  TrainConfig c = parse_config("data { synthetic: true }");
  apply_overrides(c, overrides);
  resolve(c, gpt::model_presets());
  return c;
}

inline std::string resolve_error(const std::vector<std::string>& overrides) {
  return config_error([&] { resolved(overrides); });
}

inline std::vector<std::filesystem::path> example_configs() {
  std::vector<std::filesystem::path> files;
  for (const auto& entry : std::filesystem::directory_iterator(ETR_CONFIGS_DIR))
    if (entry.path().extension() == ".pbtxt") files.push_back(entry.path());
  std::sort(files.begin(), files.end());
  return files;
}

// Every scalar field of `m` and its sub-messages has a value (and every sub-message
// exists); the names of those that do not.
inline void collect_unset(const Message& m, const std::string& prefix, std::vector<std::string>& out) {
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
}  // namespace etr::config_testing
