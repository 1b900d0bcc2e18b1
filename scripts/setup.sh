#!/usr/bin/env bash
# Installs what etr needs on Debian 12 (as root) and builds it into build/.
# Idempotent and quiet: packages already present are not touched; an up-to-date
# build does nothing. Sourced by quickstart.sh and test.sh; usable on its own:
#   scripts/setup.sh            # install + configure + build (build/)
# Environment: ETR_BUILD_DIR (default build), ETR_JOBS (default: all cores),
#              ETR_CMAKE_ARGS (extra configure arguments), ETR_SETUP_BUILD=0 (install only).
set -euo pipefail

ETR_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
ETR_BUILD_DIR="${ETR_BUILD_DIR:-$ETR_ROOT/build}"
ETR_JOBS="${ETR_JOBS:-$(nproc)}"

# Debian packages and why (README.md, "Dependencies").
ETR_PACKAGES=(
  build-essential cmake ninja-build pkg-config   # compilers and build
  ccache                                         # compiler cache: a fresh clone's build trees (CI's) reuse objects
  openmpi-bin libopenmpi-dev                     # the job runtime: mpirun, MPI
  libprotobuf-dev protobuf-compiler              # configs and checkpoint manifests
  libopenblas-dev                                # matrix products on the CPU
  libgtest-dev libgmock-dev                      # unit and multi-rank tests
  libbenchmark-dev                               # kernel micro-benchmarks
  libcli11-dev                                   # command-line parsing
  libxxhash-dev                                  # checkpoint checksums (XXH3)
  nlohmann-json3-dev                             # JSON: metrics, traces, bench output
  clang libclang-rt-14-dev                       # libFuzzer + sanitizers: the fuzz targets (build-fuzz/)
  python3 python3-venv                           # Python peers (compat tests, PyTorch bench)
  iproute2                                       # ip, tc: the simulated hosts (tests/cluster)
  slurmctld slurmd slurm-client munge           # a Slurm cluster on the simulated hosts (tests/cluster/sim_slurm.sh);
                                                 # srun, sbatch, scontrol, sinfo for etr-run --launcher srun
  libsentencepiece-dev                           # subword tokenizers (etr-tokenize, etr-train)
)

etr_install_packages() {
  local missing=()
  for p in "${ETR_PACKAGES[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
      missing+=("$p")
    fi
  done
  if ((${#missing[@]})); then
    if [[ $(id -u) -ne 0 ]]; then
      echo "etr setup: missing packages: ${missing[*]}; run this as root (or install them)" >&2
      exit 1
    fi
    echo "etr setup: installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >/dev/null
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  fi
}

# CUDA: nvcc may be installed without being on PATH.
etr_find_cuda() {
  if ! command -v nvcc >/dev/null 2>&1 && [[ -z "${CUDACXX:-}" && -x /usr/local/cuda/bin/nvcc ]]; then
    export CUDACXX=/usr/local/cuda/bin/nvcc
  fi
}

# The compiler cache (ETR_CCACHE=0: none). Paths under the repository are hashed relative
# to it (CCACHE_BASEDIR), so another clone of the same commit, and each of the build trees
# (build/, build-asan/, build-fuzz/, the device bundle's), finds the objects compiled
# before with the same flags. The cache is ccache's own (~/.cache/ccache, 5 GB at most).
# The base directory goes into the launcher itself (`env CCACHE_BASEDIR=... ccache`), so
# that every later build of the tree, by ninja or cmake --build from any shell, hashes
# alike: exported from here it reached only the shells that called etr_build, and the
# ASan tree, built by sanitize.sh's own ninja, missed the cache in every clean clone.
etr_compiler_launcher() {
  if [[ "${ETR_CCACHE:-1}" != 0 ]] && command -v ccache >/dev/null 2>&1; then
    local l="env;CCACHE_BASEDIR=$ETR_ROOT;ccache"
    echo "-DCMAKE_C_COMPILER_LAUNCHER=$l -DCMAKE_CXX_COMPILER_LAUNCHER=$l -DCMAKE_CUDA_COMPILER_LAUNCHER=$l"
  fi
}

# etr_build DIR [cmake args...]: configure once, then build.
etr_build() {
  local dir="$1"
  shift
  export CCACHE_BASEDIR="$ETR_ROOT"  # for trees configured before the launcher carried it
  if [[ ! -f "$dir/build.ninja" ]]; then
    mkdir -p "$dir"
    cmake -S "$ETR_ROOT" -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Release $(etr_compiler_launcher) \
      ${ETR_CMAKE_ARGS:-} "$@" >"$dir/configure.log" 2>&1 || { cat "$dir/configure.log" >&2; exit 1; }
  fi
  ninja -C "$dir" -j "$ETR_JOBS" --quiet
}

etr_install_packages
etr_find_cuda
# ETR_SETUP_BUILD=0: install only (scripts/device_bundle.sh builds its own tree).
if [[ "${ETR_SETUP_BUILD:-1}" != 0 ]]; then
  mkdir -p "$(dirname "$ETR_BUILD_DIR")"
  etr_build "$ETR_BUILD_DIR"
fi
