#include "collectives/comm_options.h"

#include <algorithm>
#include <cstdint>
#include <sstream>
#include <string>

#include "runtime/bytes.h"
#include "runtime/error.h"
#include "runtime/config/settings.h"

namespace etr {

AllreduceAlgo parse_allreduce_algo(const std::string& name) {
  if (name == "auto") return AllreduceAlgo::kAuto;
  if (name == "ring") return AllreduceAlgo::kRing;
  if (name == "rd" || name == "recursive_doubling") return AllreduceAlgo::kRecursiveDoubling;
  if (name == "hier" || name == "hierarchical") return AllreduceAlgo::kHierarchical;
  if (name == "mpi") return AllreduceAlgo::kMpi;
  throw ConfigError("unknown allreduce algorithm '" + name + "'; use auto, ring, rd, hier or mpi");
}

const char* allreduce_algo_name(AllreduceAlgo algo) {
  switch (algo) {
    case AllreduceAlgo::kAuto: return "auto";
    case AllreduceAlgo::kRing: return "ring";
    case AllreduceAlgo::kRecursiveDoubling: return "rd";
    case AllreduceAlgo::kHierarchical: return "hier";
    case AllreduceAlgo::kMpi: return "mpi";
  }
  return "?";
}

CommOptions CommOptions::from_config(const config::CommConfig& c) {
  CommOptions o;
  o.timeout = std::chrono::milliseconds(static_cast<int64_t>(c.timeout_s() * 1000));
  o.learned_timeout_multiple = c.learned_timeout_multiple();
  o.learned_timeout_floor =
      std::chrono::milliseconds(static_cast<int64_t>(c.learned_timeout_floor_s() * 1000));
  o.allreduce_algo = parse_allreduce_algo(c.allreduce_algo());
  o.small_bytes = parse_bytes(c.allreduce_small_bytes());
  o.chunk_bytes = parse_bytes(c.ring_chunk_bytes());
  if (o.chunk_bytes < 64) throw ConfigError("comm.ring_chunk_bytes must be at least 64 bytes");
  o.depth = c.ring_depth();
  if (o.depth < 1) throw ConfigError("comm.ring_depth must be at least 1");
  o.inline_bytes = parse_bytes(c.inline_bytes());
  o.spin_polls = std::max(-1, c.spin_polls());
  o.yield_polls = std::max(-1, c.yield_polls());
  o.max_idle_sleep = std::chrono::microseconds(c.max_idle_sleep_us() > 0 ? c.max_idle_sleep_us() : -1);
  o.device_backend = c.device_backend().empty() ? "auto" : c.device_backend();
  if (o.device_backend != "auto" && o.device_backend != "nccl" && o.device_backend != "staged") {
    throw ConfigError("comm.device_backend = \"" + o.device_backend + "\" is not auto, nccl or staged");
  }
  return o;
}

CommOptions CommOptions::from_env() { return from_config(comm_config_from_env()); }

std::string CommOptions::str() const {
  std::ostringstream s;
  s << "timeout=" << timeout.count() / 1000.0 << "s learned_timeout=";
  if (learned_timeout_multiple > 0) {
    s << learned_timeout_multiple << "xp99>=" << learned_timeout_floor.count() / 1000.0 << "s";
  } else {
    s << "off";
  }
  s << " algo=" << allreduce_algo_name(allreduce_algo)
    << " small_bytes=" << format_bytes(static_cast<double>(small_bytes))
    << " chunk_bytes=" << format_bytes(static_cast<double>(chunk_bytes)) << " depth=" << depth
    << " inline_bytes=" << format_bytes(static_cast<double>(inline_bytes)) << " spin_polls="
    << (spin_polls < 0 ? std::string("auto") : std::to_string(spin_polls)) << " yield_polls="
    << (yield_polls < 0 ? std::string("auto") : std::to_string(yield_polls))
    << " max_idle_sleep="
    << (max_idle_sleep.count() < 0 ? std::string("auto")
                                   : std::to_string(max_idle_sleep.count()) + "us")
    << " device_backend=" << device_backend;
  return s.str();
}

}  // namespace etr
