// etr-run with pipelines (launcher/run_options.h, hosts.h): --pp from the job's
// parallel.pp=N argument or the flag, --min-np and --max-np in whole pipelines, every
// launch a multiple of pp, growth only by a whole pipeline.
#include <gtest/gtest.h>

#include <limits>
#include <string>
#include <vector>

#include "launcher/hosts.h"
#include "launcher/run_options.h"
#include "runtime/error.h"
namespace etr {
namespace {

launcher::RunOptions pipeline_options(std::vector<std::string> job) {
  launcher::RunOptions o;
  o.hosts = launcher::HostSource(launcher::HostSource::Kind::kList, "localhost:5");
  o.command = std::move(job);
  o.mpirun = "mpirun";
  return o;
}

TEST(Validate, PipelineStagesComeFromTheJobOrPp) {
  auto o = pipeline_options({"etr-train", "--set", "parallel.pp=2"});
  launcher::validate(o);
  EXPECT_EQ(o.pp, 2);
  EXPECT_EQ(o.min_np, 2);  // 1 rounded up to a whole pipeline
  o = pipeline_options({"etr-train"});
  o.pp = 3;  // a pipeline set in the job's config file
  o.min_np = 4;
  o.max_np = 8;
  launcher::validate(o);
  EXPECT_EQ(o.min_np, 6);
  EXPECT_EQ(o.max_np, 6);
  o = pipeline_options({"etr-train"});
  launcher::validate(o);
  EXPECT_EQ(o.pp, 1);
}

TEST(Validate, NpThatIsNotWholePipelinesOrABadPpIsAConfigError) {
  auto o = pipeline_options({"etr-train", "--set", "parallel.pp=2"});
  o.np = 3;
  EXPECT_THROW(launcher::validate(o), ConfigError);
  o = pipeline_options({"etr-train", "--set", "parallel.pp=two"});
  EXPECT_THROW(launcher::validate(o), ConfigError);
  o = pipeline_options({"etr-train"});
  o.pp = -1;
  EXPECT_THROW(launcher::validate(o), ConfigError);
  o = pipeline_options({"etr-train", "--set", "parallel.pp=4"});
  o.max_np = 3;  // not one pipeline
  try {
    launcher::validate(o);
    ADD_FAILURE() << "--max-np 3 with 4 stages accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("--max-np 3 is less than one pipeline"), std::string::npos) << e.what();
  }
  o = pipeline_options({"etr-train", "--set", "parallel.pp=2"});
  o.pp = 4;  // disagrees with the job
  EXPECT_THROW(launcher::validate(o), ConfigError);
}

TEST(WholePipelines, LaunchesAMultipleOfPpWithinSlotsAndMaxNp) {
  auto o = pipeline_options({"etr-train", "--set", "parallel.pp=2"});
  launcher::validate(o);
  EXPECT_EQ(launcher::whole_pipelines(o, 5), 4);
  EXPECT_EQ(launcher::whole_pipelines(o, 1), 0);
  o.max_np = 2;
  EXPECT_EQ(launcher::whole_pipelines(o, 5), 2);
}

TEST(ResizeReason, GrowsOnlyByAWholePipeline) {
  const std::vector<launcher::HostSlots> job{{"localhost", 2}};
  const int kNoLimit = std::numeric_limits<int>::max();
  EXPECT_EQ(launcher::resize_reason(job, 2, {{"localhost", 3}}, kNoLimit, 2), "");
  EXPECT_NE(launcher::resize_reason(job, 2, {{"localhost", 4}}, kNoLimit, 2), "");
  EXPECT_NE(launcher::resize_reason(job, 2, {{"localhost", 3}}, kNoLimit, 1), "");
  EXPECT_EQ(launcher::resize_reason(job, 2, {{"localhost", 4}}, 3, 2), "");
}

}  // namespace
}  // namespace etr
