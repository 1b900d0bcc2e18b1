#include "bench/bench_context.h"

#include <sched.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <thread>

#include "runtime/cpu_affinity.h"
#include "runtime/mpi_check.h"

namespace etr::bench {

namespace {

// "0-3,6" for the CPUs this process may run on.
std::string allowed_cpus() {
  return format_cpus(this_thread_cpus());
}

std::string cpu_model_name() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) {
      size_t colon = line.find(':');
      if (colon != std::string::npos) {
        size_t start = line.find_first_not_of(" \t", colon + 1);
        return start == std::string::npos ? "" : line.substr(start);
      }
    }
  }
  return "unknown";
}

std::string mpi_library_first_line() {
  char version[MPI_MAX_LIBRARY_VERSION_STRING] = {0};
  int len = 0;
  MPI_CHECK(MPI_Get_library_version(version, &len));
  std::string v(version, static_cast<size_t>(std::max(0, len)));
  size_t nl = v.find('\n');
  if (nl != std::string::npos) v.resize(nl);
  while (!v.empty() && (v.back() == '\0' || v.back() == ' ' || v.back() == ',')) v.pop_back();
  return v;
}

// Every rank's `mine` (at most `width` - 1 bytes kept), in rank order, on every rank.
std::vector<std::string> allgather_strings(MPI_Comm comm, int size, const std::string& mine) {
  constexpr int kWidth = 256;
  std::vector<char> send(kWidth, '\0'), recv(static_cast<size_t>(kWidth) * size, '\0');
  std::memcpy(send.data(), mine.data(), std::min(mine.size(), size_t{kWidth - 1}));
  MPI_CHECK(MPI_Allgather(send.data(), kWidth, MPI_CHAR, recv.data(), kWidth, MPI_CHAR, comm));
  std::vector<std::string> out;
  for (int r = 0; r < size; ++r) out.emplace_back(recv.data() + static_cast<size_t>(r) * kWidth);
  return out;
}

// "0-1,3" for a sorted list of ranks (the form of a CPU list).
std::string rank_ranges(const std::vector<int>& ranks) {
  return format_cpus(ranks);
}

}  // namespace

std::string MachineInfo::placement() const {
  std::map<std::string, std::vector<int>> by_host;
  for (size_t r = 0; r < hostnames.size(); ++r)
    by_host[hostnames[r]].push_back(static_cast<int>(r));
  std::string s = std::to_string(hostnames.size()) + (hostnames.size() == 1 ? " rank" : " ranks") +
                  " on " + std::to_string(by_host.size()) +
                  (by_host.size() == 1 ? " host" : " hosts") + " (";
  bool first = true;
  for (const auto& [host, ranks] : by_host) {
    s += (first ? "" : "; ") + host + ": rank" + (ranks.size() > 1 ? "s " : " ") +
         rank_ranges(ranks);
    first = false;
  }
  return s + ")";
}

nlohmann::json MachineInfo::to_json() const {
  return {{"world_size", hostnames.size()}, {"hostnames", hostnames},
          {"cpus_per_rank", cpus},          {"cpu_model", cpu_model},
          {"cpus_online", cpus_online},     {"mpi_library", mpi_library}};
}

BenchContext::BenchContext(World& world) : world_(world) {
  MPI_Comm comm = world_.group().comm();
  machine_.hostnames = allgather_strings(comm, size(), world_.hostname());
  machine_.cpus = allgather_strings(comm, size(), allowed_cpus());
  machine_.cpu_model = cpu_model_name();
  machine_.cpus_online = static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN));
  machine_.mpi_library = mpi_library_first_line();
}

void BenchContext::print(const std::string& text) const {
  if (!is_root()) return;
  std::fputs(text.c_str(), stdout);
  std::fflush(stdout);
}

void BenchContext::sleeping_barrier() const {
  MPI_Request req;
  MPI_CHECK(MPI_Ibarrier(world_.group().comm(), &req));
  int done = 0;
  for (;;) {
    MPI_CHECK(MPI_Test(&req, &done, MPI_STATUS_IGNORE));
    if (done) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

void BenchContext::max_over_ranks(double* values, int n) const {
  MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, values, n, MPI_DOUBLE, MPI_MAX, world_.group().comm()));
}

double BenchContext::max_over_ranks(double value) const {
  max_over_ranks(&value, 1);
  return value;
}

std::vector<CpuUse> BenchContext::gather_cpu_use(const CpuUse& mine) const {
  struct Wire {
    double wall, cpu, wait, others;
    cpu_set_t cpus;
  };
  Wire w{mine.wall_seconds, mine.cpu_seconds, mine.wait_seconds, mine.others_seconds, {}};
  CPU_ZERO(&w.cpus);
  for (int c : mine.cpus) {
    if (c >= 0 && c < CPU_SETSIZE) CPU_SET(c, &w.cpus);
  }
  std::vector<Wire> all(static_cast<size_t>(size()));
  MPI_CHECK(
      MPI_Allgather(&w, sizeof w, MPI_BYTE, all.data(), sizeof w, MPI_BYTE, world_.group().comm()));
  std::vector<CpuUse> out(all.size());
  for (size_t r = 0; r < all.size(); ++r) {
    out[r].wall_seconds = all[r].wall;
    out[r].cpu_seconds = all[r].cpu;
    out[r].wait_seconds = all[r].wait;
    out[r].others_seconds = all[r].others;
    for (int c = 0; c < CPU_SETSIZE; ++c) {
      if (CPU_ISSET(c, &all[r].cpus)) out[r].cpus.push_back(c);
    }
  }
  return out;
}

std::string BenchContext::premise_failure_of_ranks(const Premise& p, const CpuUse& mine) const {
  return ranks_premise_failure(p, gather_cpu_use(mine), machine_.hostnames);
}

void BenchContext::require_own_cores(const std::string& what, const Premise& p) const {
  const std::string why = premise_failure_of_ranks(p, CpuUse{.cpus = this_thread_cpus()});
  if (why.empty()) return;
  throw AgreedError(what + " needs each rank's " + std::to_string(p.threads) + " thread" +
                    (p.threads == 1 ? "" : "s") + " on cores of its own, but " + why +
                    "; start at most one rank per " + (p.threads == 1 ? "core" : "group of cores") +
                    (p.pinned ? ", bound to it (mpirun --bind-to core)" : ""));
}

void BenchContext::agree(const std::string& local_error) const {
  MPI_Comm comm = world_.group().comm();
  int mine = local_error.empty() ? INT_MAX : rank();
  int first = INT_MAX;
  MPI_CHECK(MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, comm));
  if (first == INT_MAX) return;
  int len = first == rank() ? static_cast<int>(local_error.size()) : 0;
  MPI_CHECK(MPI_Bcast(&len, 1, MPI_INT, first, comm));
  std::string message = first == rank() ? local_error : std::string(static_cast<size_t>(len), ' ');
  MPI_CHECK(MPI_Bcast(message.data(), len, MPI_CHAR, first, comm));
  if (size() > 1 && first != 0) message = "on rank " + std::to_string(first) + ": " + message;
  throw AgreedError(message);
}

void BenchContext::write_json(const std::string& path, const nlohmann::json& doc) const {
  std::string error;
  if (is_root()) {
    std::string tmp = path + ".tmp";
    std::FILE* f = std::fopen(tmp.c_str(), "w");
    if (!f) {
      error = "cannot write the JSON report '" + path + "': " + std::strerror(errno);
    } else {
      std::string text = doc.dump(2) + "\n";
      bool ok = std::fwrite(text.data(), 1, text.size(), f) == text.size();
      ok = (std::fclose(f) == 0) && ok;
      if (!ok || std::rename(tmp.c_str(), path.c_str()) != 0) {
        error = "cannot write the JSON report '" + path + "': " + std::strerror(errno);
        std::remove(tmp.c_str());
      }
    }
  }
  agree(error);
}

void throw_refused(int rows) {
  throw AgreedError(std::to_string(rows) + (rows == 1 ? " row" : " rows") +
                    " did not run on the threads and cores stated (\"premise failed\" above), "
                    "so the figures are withheld; run on otherwise idle cores with the "
                    "binding the header names");
}


double process_cpu_seconds() {
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  const auto s = [](const timeval& t) { return static_cast<double>(t.tv_sec) + t.tv_usec * 1e-6; };
  return s(u.ru_utime) + s(u.ru_stime);
}

TrainConfig bench_train_config(std::string_view model_and_batch, int threads,
                               std::string_view source, const std::string& config_path,
                               const std::vector<std::string>& overrides) {
  TrainConfig c;
  if (!config_path.empty()) {
    c = load_config(config_path);
  } else {
    std::string text(model_and_batch);
    text += R"(
      schedule { warmup_steps: 10 max_steps: 1000000 }
      data { synthetic: true synthetic_size: "2MiB" }
      log { log_every: 1000000 eval_every: 1000000 log_level: LOG_LEVEL_WARN }
    )";
    c = parse_config(text, source);
    if (threads > 0) c.mutable_runtime()->set_threads(threads);
  }
  apply_overrides(c, overrides);
  return c;
}

}  // namespace etr::bench
