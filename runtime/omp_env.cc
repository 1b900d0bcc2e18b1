#include "runtime/omp_env.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>

namespace etr {

void ensure_omp_spin_limit(char** argv) {
  if (std::getenv("GOMP_SPINCOUNT") || std::getenv("OMP_WAIT_POLICY")) return;
  setenv("GOMP_SPINCOUNT", "10000", 1);
  execv("/proc/self/exe", argv);
  // exec failed (no /proc): run on with libgomp's default, which is only slower.
}

}  // namespace etr
