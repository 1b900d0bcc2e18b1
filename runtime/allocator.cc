#include "runtime/allocator.h"

#include <string>

#include "runtime/bytes.h"
#include "runtime/error.h"

namespace etr {

void throw_out_of_memory(Device device, size_t requested, const MemoryStats& stats,
                         const char* hint) {
  std::string msg = "out of memory on " + device.str() + ": requested " +
                    format_bytes(static_cast<double>(requested)) + " with " +
                    format_bytes(static_cast<double>(stats.in_use)) + " in use (peak " +
                    format_bytes(static_cast<double>(stats.peak)) + ") under a budget of " +
                    format_bytes(static_cast<double>(stats.budget)) + "; " + hint;
  throw OutOfMemory(msg, requested, stats.in_use, stats.peak, stats.budget);
}

}  // namespace etr
