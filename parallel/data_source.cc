#include "parallel/data_source.h"

#include "runtime/error.h"

namespace etr {

std::string to_string(const DataPosition& position) {
  return "step " + std::to_string(position.step) + ", samples " +
         std::to_string(position.samples_seen) + ", seed " + std::to_string(position.seed);
}

void DataSource::gather_eval(uint64_t, uint64_t, std::span<int32_t>, std::span<int32_t>) const {
  throw InvalidArgument("this data source has no held-out samples");
}

}  // namespace etr
