// runtime/memory_budget.h: memory cgroups v1 and v2 read from fake trees in a temporary
// directory (and this process's own, read independently), the budget's sources; and
// etr-run's use of the cgroup's oom_kill count (launcher/oom_watch.h).
#include "runtime/memory_budget.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "launcher/mpirun_output.h"
#include "launcher/oom_watch.h"
#include "runtime/error.h"
#include "scoped_env.h"

namespace etr {
namespace {

namespace fs = std::filesystem;

constexpr size_t kGiB = size_t{1} << 30;
constexpr size_t kMiB = size_t{1} << 20;
constexpr char kHuge[] = "9223372036854771712\n";  // v1's "no limit" with 4 KiB pages

// A temporary directory standing for "/": write("sys/fs/cgroup/x/memory.max", "max\n").
class FakeRoot {
 public:
  FakeRoot() {
    std::string tmpl = (fs::temp_directory_path() / "etr-cgroup-XXXXXX").string();
    if (::mkdtemp(tmpl.data()) == nullptr) ADD_FAILURE() << "mkdtemp: " << std::strerror(errno);
    root_ = tmpl;
  }
  ~FakeRoot() {
    std::error_code ec;
    fs::remove_all(root_, ec);
  }
  const std::string& root() const { return root_; }
  void write(const std::string& path, const std::string& text) const {
    const fs::path p = fs::path(root_) / path;
    fs::create_directories(p.parent_path());
    std::ofstream(p, std::ios::binary | std::ios::trunc) << text;
  }

 private:
  std::string root_;
};

// mountinfo as on this machine: cgroup v1 controllers under /sys/fs/cgroup, and v2 at
// /sys/fs/cgroup/unified without the memory controller.
constexpr char kHybridMountinfo[] =
    "31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n"
    "32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu\n"
    "35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n"
    "41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n";
constexpr char kHybridCgroup[] = "4:memory:/jobs/a\n1:cpu:/\n0::/\n";

// A v1 tree: /jobs/a limited to 3 GiB, /jobs and the root without a limit.
void write_v1(const FakeRoot& f, const std::string& limit = "3221225472\n") {
  f.write("sys/fs/cgroup/memory/memory.limit_in_bytes", kHuge);
  f.write("sys/fs/cgroup/memory/jobs/memory.limit_in_bytes", kHuge);
  f.write("sys/fs/cgroup/memory/jobs/a/memory.limit_in_bytes", limit);
  f.write("sys/fs/cgroup/memory/jobs/a/memory.usage_in_bytes", "1048576\n");
  f.write("sys/fs/cgroup/memory/jobs/a/memory.oom_control",
          "oom_kill_disable 0\nunder_oom 0\noom_kill 3\n");
  f.write("sys/fs/cgroup/unified/cgroup.procs", "");  // v2 without memory.max
}

constexpr char kV2Mountinfo[] =
    "25 20 0:22 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:4 - cgroup2 cgroup2 "
    "rw,nsdelegate,memory_recursiveprot\n";

void write_v2(const FakeRoot& f, const std::string& max = "2147483648\n") {
  f.write("sys/fs/cgroup/user.slice/memory.max", "max\n");
  f.write("sys/fs/cgroup/user.slice/job/memory.max", max);
  f.write("sys/fs/cgroup/user.slice/job/memory.current", "4096\n");
  f.write("sys/fs/cgroup/user.slice/job/memory.events",
          "low 0\nhigh 0\nmax 5\noom 2\noom_group_kill 7\noom_kill 2\n");
}

TEST(CgroupMemory, V1Tree) {
  FakeRoot f;
  write_v1(f);
  const auto m = read_cgroup_memory(kHybridCgroup, kHybridMountinfo, f.root());
  ASSERT_TRUE(m);
  EXPECT_EQ(m->version, 1);  // v2 is mounted, but its directory has no memory.max
  EXPECT_EQ(m->dir, f.root() + "/sys/fs/cgroup/memory/jobs/a");
  ASSERT_TRUE(m->limit);
  EXPECT_EQ(*m->limit, 3 * kGiB);
  EXPECT_EQ(m->usage, kMiB);
  EXPECT_EQ(m->oom_kills, 3u);
}

TEST(CgroupMemory, V2Tree) {
  FakeRoot f;
  write_v2(f);
  const auto m = read_cgroup_memory("0::/user.slice/job\n", kV2Mountinfo, f.root());
  ASSERT_TRUE(m);
  EXPECT_EQ(m->version, 2);
  EXPECT_EQ(m->dir, f.root() + "/sys/fs/cgroup/user.slice/job");
  ASSERT_TRUE(m->limit);
  EXPECT_EQ(*m->limit, 2 * kGiB);
  EXPECT_EQ(m->usage, 4096u);
  EXPECT_EQ(m->oom_kills, 2u);  // the oom_kill line, not oom_group_kill's
}

TEST(CgroupMemory, MaxAndHugeAreNoLimit) {
  FakeRoot v1, v2;
  write_v1(v1, kHuge);
  write_v2(v2, "max\n");
  const auto m1 = read_cgroup_memory(kHybridCgroup, kHybridMountinfo, v1.root());
  const auto m2 = read_cgroup_memory("0::/user.slice/job\n", kV2Mountinfo, v2.root());
  ASSERT_TRUE(m1 && m2);
  EXPECT_FALSE(m1->limit);
  EXPECT_FALSE(m2->limit);
  EXPECT_EQ(m1->oom_kills, 3u);  // the counts are read all the same
}

TEST(CgroupMemory, AnAncestorsLimitBounds) {
  FakeRoot f;
  write_v2(f, "max\n");
  f.write("sys/fs/cgroup/user.slice/memory.max", "1073741824\n");
  const auto m = read_cgroup_memory("0::/user.slice/job\n", kV2Mountinfo, f.root());
  ASSERT_TRUE(m && m->limit);
  EXPECT_EQ(*m->limit, kGiB);
}

TEST(CgroupMemory, PrefersV2WhenItHasMemoryMax) {
  FakeRoot f;
  write_v1(f);
  f.write("sys/fs/cgroup/unified/memory.max", "536870912\n");
  f.write("sys/fs/cgroup/unified/memory.current", "0\n");
  const auto m = read_cgroup_memory(kHybridCgroup, kHybridMountinfo, f.root());
  ASSERT_TRUE(m && m->limit);
  EXPECT_EQ(m->version, 2);
  EXPECT_EQ(*m->limit, 512 * kMiB);
  EXPECT_EQ(m->oom_kills, 0u);  // no memory.events: no kill counted
}

TEST(CgroupMemory, ContainerMountRootAndEscapedMountPoint) {
  // A v1 hierarchy mounted from /docker/abc (the container's cgroup) at a path with a space.
  FakeRoot f;
  f.write("cg mem/memory.limit_in_bytes", "1073741824\n");
  f.write("cg mem/memory.usage_in_bytes", "10\n");
  const auto m = read_cgroup_memory(
      "9:memory:/docker/abc\n", "40 31 0:32 /docker/abc /cg\\040mem rw - cgroup cgroup rw,memory\n",
      f.root());
  ASSERT_TRUE(m && m->limit);
  EXPECT_EQ(m->dir, f.root() + "/cg mem");
  EXPECT_EQ(*m->limit, kGiB);
  // A path outside the mount's root is not under it.
  EXPECT_FALSE(read_cgroup_memory(
      "9:memory:/docker/abcd\n",
      "40 31 0:32 /docker/abc /cg\\040mem rw - cgroup cgroup rw,memory\n", f.root()));
}

TEST(CgroupMemory, NoMemoryCgroupIsNullopt) {
  FakeRoot f;
  write_v1(f);
  // No memory line and a v2 directory without memory.max.
  EXPECT_FALSE(read_cgroup_memory("1:cpu:/\n0::/\n", kHybridMountinfo, f.root()));
  // A memory line but no memory hierarchy mounted.
  EXPECT_FALSE(read_cgroup_memory(
      kHybridCgroup, "32 31 0:29 / /sys/fs/cgroup/cpu rw - cgroup cgroup rw,cpu\n", f.root()));
  // Nothing at all, and garbage.
  EXPECT_FALSE(read_cgroup_memory("", "", f.root()));
  EXPECT_FALSE(read_cgroup_memory("garbage\n::\n", "a b c\n - \n", f.root()));
}

// --- this machine ------------------------------------------------------------------

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// The mount point of the v1 memory hierarchy (mounted from its root), read plainly.
std::string v1_memory_mount() {
  std::istringstream in(slurp("/proc/self/mountinfo"));
  for (std::string line; std::getline(in, line);) {
    std::istringstream w(line);
    std::string id, parent, dev, root, mount, word;
    w >> id >> parent >> dev >> root >> mount;
    while (w >> word && word != "-") {
    }
    std::string fstype, source, options;
    w >> fstype >> source >> options;
    if (fstype == "cgroup" && root == "/" &&
        ("," + options + ",").find(",memory,") != std::string::npos) {
      return mount;
    }
  }
  return "";
}

TEST(CgroupMemory, FindsThisProcesssCgroup) {
  // An independent reading of /proc/self/cgroup's memory line (v1, as on this machine).
  std::string path;
  std::istringstream in(slurp("/proc/self/cgroup"));
  for (std::string line; std::getline(in, line);) {
    const size_t at = line.find(":memory:");
    if (at != std::string::npos) path = line.substr(at + 8);
  }
  const std::string mount = v1_memory_mount();
  const auto m = read_cgroup_memory();
  if (path.empty() || mount.empty() || (m && m->version == 2)) {
    GTEST_SKIP() << "this process has no v1 memory cgroup to compare with";
  }
  ASSERT_TRUE(m) << "/proc/self/cgroup names the memory cgroup " << path;
  const std::string dir = mount + (path == "/" ? "" : path);
  EXPECT_EQ(m->version, 1);
  EXPECT_EQ(m->dir, dir);
  const uint64_t limit = std::stoull(slurp(dir + "/memory.limit_in_bytes"));
  if (limit >= (uint64_t{1} << 62)) {
    EXPECT_FALSE(m->limit);
  } else {
    ASSERT_TRUE(m->limit);
    EXPECT_LE(*m->limit, limit);  // an ancestor may bound it more
  }
  std::istringstream oom(slurp(dir + "/memory.oom_control"));
  uint64_t kills = 0;
  for (std::string key, value; oom >> key >> value;) {
    if (key == "oom_kill") kills = std::stoull(value);
  }
  EXPECT_EQ(m->oom_kills, kills);
  EXPECT_GT(m->usage, 0u);
}

// --- MemoryBudget --------------------------------------------------------------------

const size_t kPage = static_cast<size_t>(::sysconf(_SC_PAGESIZE));

// Inputs with a v1 cgroup of `limit` and a statm of `resident` bytes.
MemoryBudget::Inputs inputs(const FakeRoot& f, const std::string& limit, size_t resident) {
  write_v1(f, limit);
  f.write("statm", "1000 " + std::to_string(resident / kPage) + " 10 1 0 100 0\n");
  MemoryBudget::Inputs in;
  in.cgroup = find_memory_cgroup(kHybridCgroup, kHybridMountinfo, f.root());
  in.available = 16 * kGiB;
  in.statm = f.root() + "/statm";
  return in;
}

TEST(MemoryBudget, CgroupShareLessOutsideTheAllocator) {
  FakeRoot f;
  MemoryBudget::Inputs in = inputs(f, "3221225472\n", 200 * kMiB);
  in.local_ranks = 2;
  const MemoryBudget budget(in);
  const auto r = budget.read(80 * kMiB);  // 120 MiB resident outside the allocator
  EXPECT_EQ(r.source, MemoryBudget::Source::kCgroup);
  EXPECT_EQ(r.bytes, 3 * kGiB / 2 - 120 * kMiB);
  EXPECT_EQ(r.describe(),
            "cgroup v1 memory.limit_in_bytes 3 GiB / 2 ranks, less 120 MiB outside the allocator");
  // The allocator reserving more than is resident (untouched pages): nothing outside.
  EXPECT_EQ(budget.read(1 * kGiB).bytes, 3 * kGiB / 2);
}

// A soft limit below the hard one (how a scheduler asks a job to shrink without the OOM
// killer) binds, is named, and is re-read by every read().
TEST(MemoryBudget, ASoftLimitBindsAndIsReReadEachTime) {
  FakeRoot f;
  MemoryBudget::Inputs in = inputs(f, "3221225472\n", 0);
  f.write("sys/fs/cgroup/memory/jobs/a/memory.soft_limit_in_bytes", kHuge);
  in.cgroup = find_memory_cgroup(kHybridCgroup, kHybridMountinfo, f.root());
  const MemoryBudget budget(in);
  EXPECT_EQ(budget.read(0).bytes, 3 * kGiB);
  f.write("sys/fs/cgroup/memory/jobs/a/memory.soft_limit_in_bytes", "1073741824\n");
  const auto r = budget.read(0);
  EXPECT_EQ(r.bytes, 1 * kGiB);
  EXPECT_EQ(r.describe(),
            "cgroup v1 memory.soft_limit_in_bytes 1 GiB / 1 rank, less 0 B outside the allocator");
}

TEST(MemoryBudget, ASharePerLocalRank) {
  for (int ranks : {1, 2, 3, 4, 7}) {
    FakeRoot f;
    MemoryBudget::Inputs in = inputs(f, "8589934592\n", 0);
    in.local_ranks = ranks;
    const auto r = MemoryBudget(in).read(0);
    EXPECT_EQ(r.bytes, 8 * kGiB / static_cast<size_t>(ranks)) << ranks;
    EXPECT_EQ(r.local_ranks, ranks);
  }
}

TEST(MemoryBudget, TheSmallestSourceWinsAndIsNamed) {
  FakeRoot f;
  MemoryBudget::Inputs in = inputs(f, "3221225472\n", 0);
  in.config = "8GiB";
  in.environment = "4GiB";
  auto r = MemoryBudget(in).read(0);
  EXPECT_EQ(r.source, MemoryBudget::Source::kCgroup);
  EXPECT_EQ(r.bytes, 3 * kGiB);

  in.environment = "512MiB";
  r = MemoryBudget(in).read(0);
  EXPECT_EQ(r.source, MemoryBudget::Source::kEnvironment);
  EXPECT_EQ(r.bytes, 512 * kMiB);
  EXPECT_EQ(r.describe(), "ETR_HOST_MEMORY_BUDGET 512 MiB");

  in.config = "1.5GB";
  in.environment = "";
  in.cgroup.reset();
  r = MemoryBudget(in).read(0);
  EXPECT_EQ(r.source, MemoryBudget::Source::kConfig);
  EXPECT_EQ(r.bytes, size_t{1'500'000'000});
  EXPECT_STREQ(to_string(r.source), "config");
  EXPECT_EQ(r.describe().rfind("runtime.memory_budget ", 0), 0u) << r.describe();
}

TEST(MemoryBudget, AvailableMemoryOnlyWhenNothingElse) {
  FakeRoot f;
  MemoryBudget::Inputs in = inputs(f, kHuge, 0);  // a cgroup without a limit
  auto r = MemoryBudget(in).read(0);
  EXPECT_EQ(r.source, MemoryBudget::Source::kAvailable);
  EXPECT_EQ(r.bytes, 16 * kGiB);
  EXPECT_EQ(r.describe(), "the machine's available memory at start-up, 16 GiB");
  in.config = "20GiB";  // more than available, but set: it wins
  r = MemoryBudget(in).read(0);
  EXPECT_EQ(r.source, MemoryBudget::Source::kConfig);
  EXPECT_EQ(r.bytes, 20 * kGiB);
}

TEST(MemoryBudget, ReadsTheLimitAgainAndCanBeZero) {
  FakeRoot f;
  const MemoryBudget budget(inputs(f, "1073741824\n", 300 * kMiB));
  EXPECT_EQ(budget.read(0).bytes, kGiB - 300 * kMiB);
  f.write("sys/fs/cgroup/memory/jobs/a/memory.limit_in_bytes", "268435456\n");  // lowered
  const auto r = budget.read(0);
  EXPECT_EQ(r.source, MemoryBudget::Source::kCgroup);
  EXPECT_EQ(r.bytes, 0u);  // 256 MiB share, 300 MiB already outside the allocator
}

TEST(MemoryBudget, RefusesBadSettings) {
  auto message = [](MemoryBudget::Inputs in) -> std::string {
    try {
      MemoryBudget b(std::move(in));
    } catch (const ConfigError& e) {
      return e.what();
    }
    return "no ConfigError";
  };
  MemoryBudget::Inputs in;
  in.config = "lots";
  EXPECT_EQ(message(in).rfind("runtime.memory_budget: 'lots' is not a byte count", 0), 0u)
      << message(in);
  in.config = "";
  in.environment = "0";
  EXPECT_EQ(message(in).rfind("ETR_HOST_MEMORY_BUDGET is 0", 0), 0u) << message(in);
  in.environment = "";
  in.local_ranks = 0;
  EXPECT_NE(message(in).find("at least 1"), std::string::npos) << message(in);
}

TEST(MemoryBudget, OnThisMachine) {
  testing::ScopedEnv env("ETR_HOST_MEMORY_BUDGET", "64MiB");
  const MemoryBudget budget("", 1);
  const auto r = budget.read(0);
  EXPECT_GT(r.bytes, 0u);
  EXPECT_LE(r.bytes, 64 * kMiB);  // the environment's, or a smaller cgroup share
  EXPECT_GT(resident_bytes(), 0u);
}

// The kernel's peak count of this process: 64 MiB touched raise VmHWM by at least that
// much over what was resident before, and a reset brings it back to what is resident now;
// the parser reads VmHWM's kB from a status text.
TEST(PeakResident, FollowsTouchedMemoryAndResets) {
  const std::filesystem::path status = std::filesystem::temp_directory_path() / ("etr_status_test_" + std::to_string(::getpid()));
  std::ofstream(status) << "Name:\tx\nVmPeak:\t  999 kB\nVmHWM:\t    2048 kB\nVmRSS:\t 1024 kB\n";
  EXPECT_EQ(peak_resident_bytes(status.string()), 2048u * 1024);
  std::ofstream(status) << "Name:\tx\n";
  EXPECT_EQ(peak_resident_bytes(status.string()), 0u);
  std::filesystem::remove(status);

  if (!reset_peak_resident()) GTEST_SKIP() << "this kernel does not let a process reset VmHWM";
  const size_t before = resident_bytes();
  EXPECT_LE(peak_resident_bytes(), before + 4 * kMiB) << "the reset";
  {
    std::vector<char> big(64 * kMiB);
    std::memset(big.data(), 1, big.size());
    EXPECT_GE(peak_resident_bytes(), before + 64 * kMiB - kMiB);
  }
  // The 64 MiB went back (to the heap; under ASan to its quarantine, still resident): the
  // reset brings the peak to what is resident now.
  ASSERT_TRUE(reset_peak_resident());
  EXPECT_LE(peak_resident_bytes(), resident_bytes() + 4 * kMiB) << "the reset after the free";
}

// --- etr-run: OOM kills (launcher/oom_watch.h) ----------------------------------------

using launcher::OomCount;
using launcher::OomEvidence;

OomEvidence evidence(uint64_t before, uint64_t after) {
  OomEvidence e;
  e.before = OomCount{before, true};
  e.after = OomCount{after, true};
  e.status = 1;
  return e;
}

TEST(OomWatch, ACountUpAndASigkilledRankIsAnOomKill) {
  OomEvidence e = evidence(4, 5);
  e.killed_rank = 1;
  e.killed_signal = 9;
  e.status = 137;
  const auto k = launcher::oom_kill_in(e);
  ASSERT_TRUE(k);
  EXPECT_EQ(k->rank, 1);
  EXPECT_EQ(launcher::describe(*k),
            "rank 1 was killed by the kernel's out-of-memory killer (the memory cgroup counted "
            "1 oom_kill)");
  // A rank that exited 137 (a shell whose child was killed) is named too.
  e = evidence(0, 2);
  e.exit_rank = 3;
  e.exit_code = 137;
  ASSERT_TRUE(launcher::oom_kill_in(e));
  EXPECT_EQ(launcher::oom_kill_in(e)->rank, 3);
  EXPECT_EQ(launcher::oom_kill_in(e)->kills, 2u);
}

TEST(OomWatch, EitherAloneIsNot) {
  OomEvidence kill9 = evidence(5, 5);  // kill -9 of a rank: no count
  kill9.killed_rank = 0;
  kill9.killed_signal = 9;
  kill9.status = 137;
  EXPECT_FALSE(launcher::oom_kill_in(kill9));
  EXPECT_EQ(launcher::unexplained_oom_note(kill9), "");
  OomEvidence other = evidence(5, 6);  // another process of the cgroup: no SIGKILL here
  other.killed_rank = 0;
  other.killed_signal = 11;
  EXPECT_FALSE(launcher::oom_kill_in(other));
  EXPECT_NE(launcher::unexplained_oom_note(other).find("counted 1 oom_kill during the launch"),
            std::string::npos);
  OomEvidence unknown = evidence(0, 1);  // the count could not be read before
  unknown.before.reset();
  unknown.status = 137;
  EXPECT_FALSE(launcher::oom_kill_in(unknown));
}

TEST(OomWatch, HalvesUntilTheMinimumOrTheLimit) {
  launcher::OomKill k;
  k.rank = 1;
  k.kills = 1;
  auto d = launcher::decide_after_oom(k, 0, 0);
  EXPECT_TRUE(d.relaunch);
  EXPECT_EQ(d.halvings, 1);
  EXPECT_EQ(d.message,
            "rank 1 was killed by the kernel's out-of-memory killer (the memory cgroup counted 1 "
            "oom_kill); relaunching with the micro-batch halved (ETR_RUN_MEMORY_HALVINGS=1)");
  d = launcher::decide_after_oom(k, 2, 4);
  EXPECT_TRUE(d.relaunch);
  EXPECT_EQ(d.halvings, 3);
  d = launcher::decide_after_oom(k, 2, 1);  // the job said it ran at micro-batch 1
  EXPECT_FALSE(d.relaunch);
  EXPECT_NE(d.message.find("micro-batch 1, its smallest; not relaunching"), std::string::npos);
  d = launcher::decide_after_oom(k, launcher::kMaxMemoryHalvings, 0);
  EXPECT_FALSE(d.relaunch);
  EXPECT_NE(d.message.find("halved 6 times; not relaunching"), std::string::npos);
}

TEST(OomWatch, MpirunReports) {
  EXPECT_EQ(
      launcher::killed_signal_in(
          "mpirun noticed that process rank 1 with PID 0 on node vm exited on signal 9 (Killed)."),
      9);
  EXPECT_EQ(launcher::killed_signal_in("process rank 1 exited on signal x"), 0);
  EXPECT_EQ(launcher::killed_signal_in("a line"), 0);
  const std::string frame =
      "--------------------------------------------------------------------------\n"
      "mpirun detected that one or more processes exited with non-zero status, thus causing\n"
      "the job to be terminated. The first process to do so was:\n\n"
      "  Process name: [[8986,1],1]\n"
      "  Exit code:    137\n"
      "--------------------------------------------------------------------------\n";
  const auto r = launcher::nonzero_exit_in(frame);
  EXPECT_EQ(r.rank, 1);
  EXPECT_EQ(r.code, 137);
  EXPECT_EQ(launcher::nonzero_exit_in("Process name: [[1,1],x]\nExit code: 1\n").rank, -1);
  EXPECT_EQ(launcher::nonzero_exit_in("exited with non-zero status\nProcess name: [[1,1],2\n"
                                      "Exit code: 1\n")
                .rank,
            -1);
}

}  // namespace
}  // namespace etr
