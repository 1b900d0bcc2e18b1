#include "runtime/omp_env.h"
#include "runtime/env.h"

#include <cblas.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>

namespace etr {

const char* openblas_coretype_for(std::string_view corename, bool avx512, bool avx2_fma) {
  if (corename != "Prescott") return nullptr;  // OpenBLAS knew the CPU
  if (avx512) return "SkylakeX";
  if (avx2_fma) return "Haswell";
  return nullptr;
}

std::vector<std::pair<const char*, const char*>> missing_spin_limits() {
  std::vector<std::pair<const char*, const char*>> out;
  if (!env_value("GOMP_SPINCOUNT") && !env_value("OMP_WAIT_POLICY")) {
    out.emplace_back("GOMP_SPINCOUNT", "10000");  // iterations
  }
  if (!env_value("OPENBLAS_THREAD_TIMEOUT")) {
    out.emplace_back("OPENBLAS_THREAD_TIMEOUT", "20");  // 2^20 cycles
  }
  return out;
}

void ensure_omp_spin_limit(char** argv) {
  bool changed = false;
  for (const auto& [name, value] : missing_spin_limits()) {
    setenv(name, value, 1);
    changed = true;
  }
  if (!env_value("OPENBLAS_CORETYPE")) {
    // __builtin_cpu_supports also checks that the OS saves the AVX / AVX-512 registers.
    const bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                        __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
    const bool avx2_fma = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    const char* name = openblas_get_corename();
    if (const char* core = openblas_coretype_for(name ? name : "", avx512, avx2_fma)) {
      setenv("OPENBLAS_CORETYPE", core, 1);
      changed = true;
    }
  }
  if (!changed) return;
  // By the executable's own path, not /proc/self/exe: the process keeps its name (ps, top
  // and pkill see etr-train, not "exe").
  char self[4096];
  const ssize_t n = ::readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0) return;  // no /proc: run on with the libraries' defaults, only slower
  self[n] = '\0';
  execv(self, argv);
  // exec failed: run on with the libraries' defaults, which are only slower.
}

}  // namespace etr
