#!/usr/bin/env bash
# Builds etr with sanitizers and runs tests under them, in one command:
#   scripts/sanitize.sh asan        ASan+UBSan (build-asan/): labels unit, mpi and e2e
#   scripts/sanitize.sh asan-unit   ASan+UBSan: only the unit tests and what they need (CI)
#   scripts/sanitize.sh tsan        TSan (build-tsan/): the collectives and checkpoint-writer tests
#   scripts/sanitize.sh all         asan, then tsan (the default)
# Arguments after the mode go to ctest and narrow the mode's selection
# (scripts/sanitize.sh asan -R config; with tsan, -R replaces its selection and -E narrows
# it). Only the targets the selected tests run are built.
# The sanitizer options, with the suppressions of tests/sanitizers/*.supp (each with its
# reason), are exported here, so every test gets them: ctest's children, the ranks that
# etr-mpirun and etr-run start (local ranks inherit mpirun's environment). Run ctest in a
# sanitizer build by hand with the same variables (`scripts/sanitize.sh env` prints them).
# Ends with ctest's summary and the count of sanitizer reports in the test logs; exits
# non-zero if a test failed or a sanitizer reported anything.
# Environment: ETR_JOBS (build jobs, default all cores; the build runs under nice -n 10),
#              ETR_TEST_JOBS (ctest -j, default 2).
set -euo pipefail

ETR_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# The packages (present: a second) and etr_compiler_launcher, without building build/.
ETR_SETUP_BUILD=0 source "$ETR_ROOT/scripts/setup.sh"
SUPP="$ETR_ROOT/tests/sanitizers"
JOBS="${ETR_JOBS:-$(nproc)}"

# Sanitizer runtime options. halt_on_error: the first finding fails the test (UBSan is
# also compiled with -fno-sanitize-recover). allocator_may_return_null: malloc and
# aligned_alloc return null for a request beyond the sanitizer's limit, as glibc's do, and
# etr's allocators turn that into an OutOfMemory the tests expect (runtime/host_allocator)
# instead of ASan aborting on it. LSan runs (ASan's default) with Open MPI's own
# allocations suppressed by library name (tests/sanitizers/lsan.supp), which needs full
# allocation stacks in MPI programs: MPI_ASAN_OPTIONS adds fast_unwind_on_malloc=0 for
# the tests that run them (lsan.supp says why; trainer_test takes 24 s instead of 15 s,
# data_test, which runs no MPI, over 120 s instead of 8 s, so not for the unit tests).
# use_tls=0: GCC 12's LSan crashes ("Tracer caught signal 11" in ScanRangeForPointers)
# scanning the dynamic TLS of Open MPI plugins that MPI_Finalize has unloaded (seen in
# collectives_errors_test at np 3 and data_parallel_test at np 2); without TLS as roots a
# block held only by a thread_local would be reported as a leak, never hidden.
# TSan: libgomp, libmpi and OpenBLAS are not instrumented, so their internal
# synchronisation is invisible to it; ignore_noninstrumented_modules drops the reports of
# accesses made inside them.
ASAN_BASE="halt_on_error=1:allocator_may_return_null=1:detect_leaks=1:check_initialization_order=1:strict_init_order=1:detect_odr_violation=2:suppressions=$SUPP/asan.supp"
MPI_ASAN_OPTIONS="$ASAN_BASE:fast_unwind_on_malloc=0"
sanitizer_env() {
  export ASAN_OPTIONS="$ASAN_BASE"
  export LSAN_OPTIONS="suppressions=$SUPP/lsan.supp:print_suppressions=0:use_tls=0"
  export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1:suppressions=$SUPP/ubsan.supp"
  export TSAN_OPTIONS="halt_on_error=0:allocator_may_return_null=1:second_deadlock_stack=1:ignore_noninstrumented_modules=1:suppressions=$SUPP/tsan.supp"
}

# configure DIR SANITIZERS: a Release build of the library, tests and examples (no CUDA,
# no benchmarks) with -DETR_SANITIZE, at -O1 (the sanitizers' advice: full stacks, and a
# third less compiling than -O3).
configure() {
  local dir="$1" sanitizers="$2"
  if [[ ! -f "$dir/build.ninja" ]]; then
    mkdir -p "$dir"
    cmake -S "$ETR_ROOT" -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DETR_WITH_CUDA=OFF \
      $(etr_compiler_launcher) -DCMAKE_CXX_FLAGS_RELEASE="-O1 -DNDEBUG" -DETR_BUILD_BENCH=OFF \
      -DETR_SANITIZE="$sanitizers" >"$dir/configure.log" 2>&1 ||
      { cat "$dir/configure.log" >&2; exit 1; }
  else
    # Regenerated now (a few seconds), so that the tests picked below are those of the
    # current CMake files: ninja would regenerate them only after the targets were chosen.
    cmake "$dir" >"$dir/configure.log" 2>&1 || { cat "$dir/configure.log" >&2; exit 1; }
  fi
}

# needed_targets DIR CTEST_ARGS...: the build outputs that the selected tests run (every
# command-line word that ninja knows how to build, the test's name without _npN: ctest
# leaves out the command of a test whose program is not built yet, and etr-run for a test
# under etr-mpirun), so a narrow run builds only those.
needed_targets() {
  local dir="$1"
  shift
  (cd "$dir" && ctest --show-only=json-v1 "$@") | python3 -c '
import json, os, re, sys
root = sys.argv[1]
seen = []
for test in json.load(sys.stdin)["tests"]:
    words = [re.sub(r"_np[0-9]+$", "", test["name"])]
    words += [os.path.relpath(w, root) for w in test.get("command", [])
              if w.startswith(root + "/")]
    # etr-mpirun (a script) asks etr-run for the transports: build it too
    if any(os.path.basename(w) == "etr-mpirun" for w in test.get("command", [])):
        words.append("etr-run")
    seen += [w for w in words if w not in seen]
print("\n".join(seen))' "$dir" | while read -r out; do
    if ninja -C "$dir" -t query "$out" >/dev/null 2>&1; then echo "$out"; fi
  done
}

# report DIR: the number of sanitizer reports in the last ctest run's log; fails if any.
report() {
  local log="$1/Testing/Temporary/LastTest.log" pattern n rc=0
  for pattern in "ERROR: AddressSanitizer" "ERROR: LeakSanitizer" "runtime error:" \
    "WARNING: ThreadSanitizer" "Sanitizer has encountered a fatal error"; do
    n=$(grep -c -- "$pattern" "$log" 2>/dev/null || true)
    echo "etr sanitize: $(basename "$1"): ${n:-0} x \"$pattern\""
    ((${n:-0} == 0)) || rc=1
  done
  return "$rc"
}

# run NAME DIR SANITIZERS CTEST_ARGS...: configure, build what the tests need, run them;
# fails if a test failed or a sanitizer reported. A selection that matches no test is
# skipped.
run() {
  local name="$1" dir="$2" sanitizers="$3" rc=0
  shift 3
  echo "etr sanitize: $name in $dir (-fsanitize=$sanitizers), ctest $*"
  configure "$dir" "$sanitizers"
  mapfile -t targets < <(needed_targets "$dir" "$@")
  if ((${#targets[@]} == 0)); then
    echo "etr sanitize: $name: no test matches ctest $*; skipped"
    return 0
  fi
  # ETR_SANITIZE_EXTRA_TARGETS: more to build in the same tree (scripts/test.sh adds the
  # programs, so that this CUDA-less tree also proves that etr builds without CUDA).
  # shellcheck disable=SC2206
  local extra=(${ETR_SANITIZE_EXTRA_TARGETS:-})
  nice -n 10 ninja -C "$dir" -j "$JOBS" --quiet "${targets[@]}" "${extra[@]}" || return 1
  (cd "$dir" && ctest --output-on-failure -j "${ETR_TEST_JOBS:-2}" "$@") || rc=1
  report "$dir" || rc=1
  return "$rc"
}

# ASan+UBSan: the unit tests (no MPI) with fast allocation stacks, then everything that
# runs MPI programs with full ones (MPI_ASAN_OPTIONS). The install test installs the
# whole build tree, so it goes with the second set, which builds every program.
asan_unit() {
  run asan-unit "$ETR_ROOT/build-asan" address,undefined -L unit -LE install "$@"
}
asan_mpi() {
  ASAN_OPTIONS="$MPI_ASAN_OPTIONS" \
    run asan-mpi "$ETR_ROOT/build-asan" address,undefined -L 'mpi|e2e|install' "$@"
}

# The TSan selection: the collectives (progress thread beside the caller), the
# checkpoint writer (async saves, the pruner thread), and the ones that drive them.
TSAN_TESTS='^(collectives_.*|checkpoint_(save|resume|corruption)_test_np.*|agreement_timeout_test_np.*|elastic_resize_test_np.*)$'

mode="${1:-all}"
[[ $# -gt 0 ]] && shift
status=0
sanitizer_env
case "$mode" in
  asan)
    asan_unit "$@" || status=1
    asan_mpi "$@" || status=1
    ;;
  asan-unit) asan_unit "$@" || status=1 ;;
  tsan) run tsan "$ETR_ROOT/build-tsan" thread -R "$TSAN_TESTS" "$@" || status=1 ;;
  all)
    asan_unit "$@" || status=1
    asan_mpi "$@" || status=1
    run tsan "$ETR_ROOT/build-tsan" thread -R "$TSAN_TESTS" "$@" || status=1
    ;;
  env)
    printf 'export %s=%q\n' ASAN_OPTIONS "$ASAN_OPTIONS" LSAN_OPTIONS "$LSAN_OPTIONS" \
      UBSAN_OPTIONS "$UBSAN_OPTIONS" TSAN_OPTIONS "$TSAN_OPTIONS"
    echo "# for tests that run MPI programs:"
    printf 'export %s=%q\n' ASAN_OPTIONS "$MPI_ASAN_OPTIONS"
    ;;
  *)
    echo "usage: scripts/sanitize.sh [asan|asan-unit|tsan|all|env] [ctest arguments]" >&2
    exit 2
    ;;
esac
exit "$status"
