#include "collectives/comm_options.h"

#include <cstdlib>
#include <sstream>
#include <string>

#include "runtime/bytes.h"
#include "runtime/error.h"
#include "runtime/mpi_wait.h"

namespace etr {

AllreduceAlgo parse_allreduce_algo(const std::string& name) {
  if (name == "auto") return AllreduceAlgo::kAuto;
  if (name == "ring") return AllreduceAlgo::kRing;
  if (name == "rd" || name == "recursive_doubling") return AllreduceAlgo::kRecursiveDoubling;
  if (name == "mpi") return AllreduceAlgo::kMpi;
  throw ConfigError("unknown allreduce algorithm '" + name + "'; use auto, ring, rd or mpi");
}

const char* allreduce_algo_name(AllreduceAlgo algo) {
  switch (algo) {
    case AllreduceAlgo::kAuto: return "auto";
    case AllreduceAlgo::kRing: return "ring";
    case AllreduceAlgo::kRecursiveDoubling: return "rd";
    case AllreduceAlgo::kMpi: return "mpi";
  }
  return "?";
}

namespace {

const char* env(const char* name) {
  const char* v = std::getenv(name);
  return (v && *v) ? v : nullptr;
}

long parse_positive(const char* name, const char* text) {
  char* end = nullptr;
  double v = std::strtod(text, &end);
  if (end == text || *end != '\0' || !(v > 0)) {
    throw ConfigError(std::string(name) + "='" + text + "' is not a positive number");
  }
  return static_cast<long>(v);
}

}  // namespace

CommOptions CommOptions::from_env() {
  CommOptions o;
  o.timeout = collective_timeout();  // ETR_COMM_TIMEOUT_S, read in one place
  if (const char* v = env("ETR_ALLREDUCE_ALGO")) o.allreduce_algo = parse_allreduce_algo(v);
  if (const char* v = env("ETR_ALLREDUCE_SMALL_BYTES")) o.small_bytes = parse_bytes(v);
  if (const char* v = env("ETR_RING_CHUNK_BYTES")) {
    o.chunk_bytes = parse_bytes(v);
    if (o.chunk_bytes < 64) throw ConfigError("ETR_RING_CHUNK_BYTES must be at least 64 bytes");
  }
  if (const char* v = env("ETR_RING_DEPTH")) o.depth = static_cast<int>(parse_positive("ETR_RING_DEPTH", v));
  if (const char* v = env("ETR_INLINE_BYTES")) o.inline_bytes = parse_bytes(v);
  if (const char* v = env("ETR_SPIN_POLLS")) {
    char* end = nullptr;
    long polls = std::strtol(v, &end, 10);
    if (end == v || *end != '\0' || polls < 0) {
      throw ConfigError(std::string("ETR_SPIN_POLLS='") + v + "' is not a count of polls (>= 0)");
    }
    o.spin_polls = static_cast<int>(polls);
  }
  if (const char* v = env("ETR_YIELD_POLLS")) {
    char* end = nullptr;
    long polls = std::strtol(v, &end, 10);
    if (end == v || *end != '\0' || polls < 0) {
      throw ConfigError(std::string("ETR_YIELD_POLLS='") + v + "' is not a count of polls (>= 0)");
    }
    o.yield_polls = static_cast<int>(polls);
  }
  if (const char* v = env("ETR_MAX_IDLE_SLEEP_US")) {
    o.max_idle_sleep = std::chrono::microseconds(
        static_cast<long long>(parse_positive("ETR_MAX_IDLE_SLEEP_US", v)));
  }
  return o;
}

std::string CommOptions::str() const {
  std::ostringstream s;
  s << "timeout=" << timeout.count() / 1000.0 << "s algo=" << allreduce_algo_name(allreduce_algo)
    << " small_bytes=" << format_bytes(static_cast<double>(small_bytes))
    << " chunk_bytes=" << format_bytes(static_cast<double>(chunk_bytes)) << " depth=" << depth
    << " inline_bytes=" << format_bytes(static_cast<double>(inline_bytes)) << " spin_polls="
    << (spin_polls < 0 ? std::string("auto") : std::to_string(spin_polls)) << " yield_polls="
    << (yield_polls < 0 ? std::string("auto") : std::to_string(yield_polls))
    << " max_idle_sleep="
    << (max_idle_sleep.count() < 0 ? std::string("auto")
                                   : std::to_string(max_idle_sleep.count()) + "us");
  return s.str();
}

}  // namespace etr
