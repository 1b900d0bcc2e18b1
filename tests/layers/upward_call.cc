// A deliberate upward call (tests/layers/CMakeLists.txt): code of the runtime layer that
// calls parallel/'s describe_partition. Nothing calls this function, so an ordinary link
// would drop its object and pass; the layer's link check links the whole library and
// must fail on the undefined describe_partition.
#include <string>

#include "parallel/pipeline_partition.h"

namespace etr {

std::string runtime_piece_calling_up() {
  const int bounds[] = {0, 2, 4};
  return describe_partition(bounds);
}

}  // namespace etr
