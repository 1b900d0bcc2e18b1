// Tests of etr-run's Slurm side (launcher/srun_launch.h, issue 36): Slurm's compressed
// counts, which node states ranks run on, the usable nodes of an allocation from scontrol's
// and sinfo's output, a job step's command line and SLURM_HOSTFILE, srun's reports of a
// lost node, and the refusal of --launcher srun outside an allocation. The outputs are
// written out by hand in the forms Slurm 22.05 prints.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <string>
#include <vector>

#include "launcher/run_options.h"
#include "launcher/srun_launch.h"
#include "runtime/error.h"

namespace etr {
namespace {

using launcher::HostSlots;

TEST(SrunLaunch, TasksPerNode) {
  EXPECT_EQ(launcher::parse_tasks_per_node("1"), (std::vector<int>{1}));
  EXPECT_EQ(launcher::parse_tasks_per_node("2(x3),1"), (std::vector<int>{2, 2, 2, 1}));
  EXPECT_EQ(launcher::parse_tasks_per_node("4,3(x2)"), (std::vector<int>{4, 3, 3}));
  for (const char* bad : {"", "x", "2(3)", "2(x)", "0", "2(x3", "-1", "2(x3)z"}) {
    EXPECT_THROW(launcher::parse_tasks_per_node(bad), ConfigError) << bad;
  }
}

TEST(SrunLaunch, NodeStates) {
  for (const char* ok : {"allocated", "mixed", "idle", "completing"}) {
    EXPECT_TRUE(launcher::usable_node_state(ok)) << ok;
  }
  for (const char* no : {"allocated*", "mixed*", "down", "down*", "drained", "draining", "fail",
                         "failing", "idle~", "unknown", ""}) {
    EXPECT_FALSE(launcher::usable_node_state(no)) << no;
  }
}

TEST(SrunLaunch, UsableAllocation) {
  const std::string job = "JobId=7 JobName=etr JobState=RUNNING NodeList=h[1-3] NumNodes=3";
  EXPECT_EQ(launcher::scontrol_field(job, "NodeList"), "h[1-3]");
  EXPECT_EQ(launcher::scontrol_field(job, "Partition"), "");
  // h2 does not answer; h4 left the allocation (Slurm removed it after it went DOWN).
  const auto usable = launcher::usable_allocation(
      {"h1", "h2", "h3", "h4"}, {2, 2, 1, 1}, {"h1", "h2", "h3"},
      "h1 allocated\nh2 allocated*\nh3 mixed\nh4 down\n");
  EXPECT_EQ(usable, (std::vector<HostSlots>{{"h1", 2}, {"h3", 1}}));
  EXPECT_TRUE(launcher::usable_allocation({"h1"}, {1}, {"h1"}, "").empty());  // no state: not usable
}

TEST(SrunLaunch, StepCommand) {
  const std::vector<HostSlots> hosts = {{"h1", 2}, {"h2", 2}, {"h3", 2}};
  EXPECT_EQ(launcher::hostfile_lines(hosts, 3), "h1\nh1\nh2\n");
  unsetenv("OMPI_MCA_btl");
  setenv("OMPI_MCA_btl_tcp_if_include", "10.0.0.0/8", 1);  // the user's setting wins
  launcher::MpiNetwork net;
  net.local = false;
  net.iface = "198.18.0.0/24";
  const auto c = launcher::srun_command("srun", {"--cpu-bind=none"}, hosts, 3, net, "/r/hosts",
                                        {"etr-train", "--config", "c"});
  const std::vector<std::string> want = {
      "srun", "--mpi=pmix", "--kill-on-bad-exit=1", "--overlap", "--export=ALL", "--nodes=2",
      "--ntasks=3", "--distribution=arbitrary", "--cpu-bind=none", "etr-train", "--config", "c"};
  EXPECT_EQ(c.argv, want);
  EXPECT_EQ(c.env.at("SLURM_HOSTFILE"), "/r/hosts");
  EXPECT_EQ(c.env.at("OMPI_MCA_btl"), "self,vader,tcp");
  EXPECT_EQ(c.env.count("OMPI_MCA_btl_tcp_if_include"), 0u);
  EXPECT_EQ(c.env.count("OMPI_MCA_plm_rsh_agent"), 0u);
  unsetenv("OMPI_MCA_btl_tcp_if_include");
}

TEST(SrunLaunch, LostNode) {
  EXPECT_EQ(launcher::srun_lost_node_in("srun: error: Node failure on h2"), "h2");
  EXPECT_EQ(launcher::srun_lost_node_in(
                "srun: error: Task launch for StepId=5.3 failed on node node-07: Communication "
                "connection failure"),
            "node-07");
  EXPECT_EQ(launcher::srun_lost_node_in("srun: error: h1: task 0: Exited with exit code 1"), "");
  EXPECT_EQ(launcher::srun_lost_node_in("rank 0: Node failure on h2"), "");  // not srun's
}

TEST(SrunLaunch, OutsideAnAllocation) {
  unsetenv("SLURM_JOB_ID");
  EXPECT_FALSE(launcher::in_slurm_allocation());
  launcher::RunOptions o;
  o.launcher = "srun";
  o.command = {"/bin/true"};
  try {
    launcher::validate(o);
    FAIL() << "--launcher srun outside an allocation was accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("needs a Slurm allocation"), std::string::npos) << e.what();
  }
  setenv("SLURM_JOB_ID", "12", 1);
  o.srun = "/nonexistent/srun";
  EXPECT_THROW(launcher::validate(o), ConfigError);
  unsetenv("SLURM_JOB_ID");
  launcher::RunOptions m;  // outside an allocation the default stays mpirun
  m.command = {"/bin/true"};
  m.hosts.emplace(launcher::HostSource::Kind::kList, "localhost");
  launcher::validate(m);
  EXPECT_EQ(m.launcher, "mpirun");
}

}  // namespace
}  // namespace etr
