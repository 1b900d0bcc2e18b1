#include "mpi/checkpoint_test_util.h"

#include <gtest/gtest.h>
#include <mpi.h>
#include <stdlib.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <sstream>
#include <thread>

#include "mpi/mpi_test_main.h"
#include "runtime/error.h"
#include "runtime/mpi_check.h"
#include "examples/gpt/model_presets.h"

namespace etr::testing {
namespace fs = std::filesystem;

Logger& test_log(LogLevel level) {
  static Logger log("etr", stderr);
  log.set_level(level);
  return log;
}

TrainConfig tiny_config(const std::vector<std::string>& overrides) {
  TrainConfig c = parse_config(R"(
    model { preset: "tiny" }
    optimizer { lr: 3e-3 }
    schedule { warmup_steps: 2 max_steps: 6 }
    batch { global_batch: 10 micro_batch: 2 }
    data { synthetic: true synthetic_size: "64KiB" val_fraction: 0.1 }
    log { log_every: 1000 eval_every: 0 eval_batches: 2 log_level: LOG_LEVEL_WARN }
    runtime { threads: 1 }
  )");
  apply_overrides(c, overrides);
  resolve(c, gpt::model_presets());
  return c;
}

SharedTempDir::SharedTempDir(const Group& group, const std::string& tag) : group_(group) {
  std::string name;
  if (group.rank() == 0) {
    std::string pattern = (fs::temp_directory_path() / ("etr_" + tag + "_XXXXXX")).string();
    if (!::mkdtemp(pattern.data())) throw IoError("mkdtemp " + pattern + " failed");
    name = pattern;
  }
  uint64_t size = name.size();
  MPI_CHECK(MPI_Bcast(&size, 1, MPI_UINT64_T, 0, group.comm()));
  name.resize(size);
  MPI_CHECK(MPI_Bcast(name.data(), static_cast<int>(size), MPI_CHAR, 0, group.comm()));
  path_ = name;
}

SharedTempDir::~SharedTempDir() {
  idle_barrier(group_);
  if (group_.rank() == 0) {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
}

void idle_barrier(const Group& group) {
  MPI_Request request;
  MPI_CHECK(MPI_Ibarrier(group.comm(), &request));
  int done = 0;
  for (;;) {
    MPI_CHECK(MPI_Test(&request, &done, MPI_STATUS_IGNORE));
    if (done) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

void guarded(const std::function<void()>& body) {
  try {
    body();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "rank " << world().rank() << ": " << e.what();
  }
}

std::optional<Group> first_ranks(int n) {
  const Group& w = world().group();
  return w.split(w.rank() < n ? std::optional<int>(0) : std::nullopt, w.rank(),
                 "first-" + std::to_string(n));
}

TrainState snapshot(train::Trainer& t) {
  const size_t n = static_cast<size_t>(t.model().layout().numel());
  TrainState s;
  s.params.assign(t.model().params(), t.model().params() + n);
  s.m.assign(t.adam_m(), t.adam_m() + n);
  s.v.assign(t.adam_v(), t.adam_v() + n);
  s.position = t.position();
  return s;
}

namespace {

template <typename T>
void broadcast_vector(std::vector<T>& v, MPI_Datatype type, int root, const Group& group) {
  uint64_t size = v.size();
  MPI_CHECK(MPI_Bcast(&size, 1, MPI_UINT64_T, root, group.comm()));
  v.resize(size);
  MPI_CHECK(MPI_Bcast(v.data(), static_cast<int>(size), type, root, group.comm()));
}

}  // namespace

void broadcast(std::vector<float>& v, int root, const Group& group) {
  broadcast_vector(v, MPI_FLOAT, root, group);
}

void broadcast(std::vector<double>& v, int root, const Group& group) {
  broadcast_vector(v, MPI_DOUBLE, root, group);
}

void broadcast(TrainState& s, int root, const Group& group) {
  broadcast(s.params, root, group);
  broadcast(s.m, root, group);
  broadcast(s.v, root, group);
  uint64_t pos[3] = {s.position.step, s.position.samples_seen, s.position.seed};
  MPI_CHECK(MPI_Bcast(pos, 3, MPI_UINT64_T, root, group.comm()));
  s.position = data::DataPosition{pos[0], pos[1], pos[2]};
}

bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return std::numeric_limits<double>::infinity();
  double d = 0;
  for (size_t i = 0; i < a.size(); ++i) d = std::max(d, std::fabs(double(a[i]) - double(b[i])));
  return d;
}

CapturedLog::CapturedLog(LogLevel level) : file_(std::tmpfile()), log_("etr", file_) {
  if (!file_) throw IoError("tmpfile() failed");
  log_.set_level(level);
}

CapturedLog::~CapturedLog() {
  std::fclose(file_);
}

std::string CapturedLog::text() const {
  std::fflush(file_);
  const long end = std::ftell(file_);
  std::string out(static_cast<size_t>(std::max(0L, end - start_)), '\0');
  std::fseek(file_, start_, SEEK_SET);
  const size_t got = std::fread(out.data(), 1, out.size(), file_);
  out.resize(got);
  std::fseek(file_, 0, SEEK_END);
  return out;
}

void CapturedLog::clear() {
  std::fflush(file_);
  start_ = std::ftell(file_);
}

std::string read_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

void write_bytes(const fs::path& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out) throw IoError("cannot write " + path.string());
}

std::vector<fs::path> files_in(const fs::path& dir) {
  std::vector<fs::path> out;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.is_regular_file()) out.push_back(e.path());
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<std::string> names_in(const fs::path& dir) {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace etr::testing
