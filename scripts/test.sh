#!/usr/bin/env bash
# Quick start, command 2: set everything up and run the whole test suite via ctest.
# Also builds etr with CUDA turned off, so the build without a CUDA toolkit is checked on
# every run (in build-asan/ with the sanitized unit tests; in build-nocuda/ when those are
# skipped or ctest is given arguments), and sets up the Python peers (PyTorch, transformers,
# safetensors in .venv/, scripts/setup_python.sh) for the compatibility tests: if that
# cannot be installed (no network), those tests are reported as skipped. Set
# ETR_SKIP_PYTHON=1 to skip it. Extra arguments go to ctest (e.g. -L mpi); without any,
# the unit tests also run under ASan+UBSan (ETR_SKIP_SANITIZE=1 skips that) and the
# readers' fuzz targets run briefly (ETR_SKIP_FUZZ=1 skips that).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
# The programs built without CUDA: the sanitizer tree below is configured without CUDA, so
# a full run builds them there (one library build fewer); otherwise in build-nocuda/.
ETR_PROGRAMS="etr-train etr-run etr-ckpt etr-tokenize"
full_sanitize=0
[[ $# -eq 0 && "${ETR_SKIP_SANITIZE:-0}" != 1 ]] && full_sanitize=1
if ((full_sanitize == 0)); then
  echo "etr test: building without CUDA in ${ETR_BUILD_DIR}-nocuda"
  etr_build "${ETR_BUILD_DIR}-nocuda" -DETR_WITH_CUDA=OFF -DETR_BUILD_TESTS=OFF
fi
if [[ "${ETR_SKIP_PYTHON:-0}" != 1 ]]; then
  "$ETR_ROOT/scripts/setup_python.sh" ||
    echo "etr test: warning: the Python peers could not be installed; the compat tests will be skipped" >&2
fi
cd "$ETR_BUILD_DIR"
status=0
ctest --output-on-failure -j "${ETR_TEST_JOBS:-2}" "$@" || status=1
# A full run (no ctest arguments) also runs the unit tests under ASan+UBSan
# (scripts/sanitize.sh asan-unit, in build-asan/, without CUDA, with the programs): ~6 min
# of building on 2 cores the first time, seconds of running. ETR_SKIP_SANITIZE=1 skips it.
if ((full_sanitize == 1)); then
  echo "etr test: the unit tests under ASan+UBSan, and the programs without CUDA, in $ETR_ROOT/build-asan"
  ETR_SANITIZE_EXTRA_TARGETS="$ETR_PROGRAMS" "$ETR_ROOT/scripts/sanitize.sh" asan-unit || status=1
fi
# A full run also fuzzes each reader for 20 s (tests/fuzz; label "fuzz" of build-fuzz/,
# built with clang: ~2 min of building the first time, 40 s of running with -j2; the seed
# corpora keep the coverage of longer runs).
# ETR_SKIP_FUZZ=1 skips it; scripts/fuzz.sh runs longer.
if [[ $# -eq 0 && "${ETR_SKIP_FUZZ:-0}" != 1 ]]; then
  echo "etr test: fuzzing the readers in $ETR_ROOT/build-fuzz"
  CC=clang CXX=clang++ etr_build "$ETR_ROOT/build-fuzz" -DETR_FUZZ=ON -DETR_FUZZ_SECONDS=20
  ctest --test-dir "$ETR_ROOT/build-fuzz" -L fuzz --output-on-failure -j 2 || status=1
fi
exit "$status"
