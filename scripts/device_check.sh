#!/usr/bin/env bash
# The GPU machine's one command (docs/gpu.md, "The device check"): unpacks the bundle that
# scripts/device_bundle.sh made, and runs everything GPU that exists, each step under a
# time limit, then writes the full log and a short table.
#
#   scripts/device_check.sh [--bundle FILE] [--out DIR] [--require-gpu]
#
#   --bundle FILE   the archive (default .device/bundle.tar.xz of this checkout)
#   --out DIR       where device_check.log and summary.md go (default $OUT, else
#                   .device/out)
#   --require-gpu   no visible GPU is a failure (the device run passes it); without it a
#                   machine with no GPU says "no GPU", runs the same steps (the gpu tests
#                   report themselves skipped) and passes if they do
#
# Steps: the machine (card, driver, OS, glibc); the bundle unpacked in a temporary
# folder; the environment (OPAL_PREFIX, PMIX_LIBDIR and PMIX_PKGDATADIR for the relocated
# Open MPI and PMIx, MPI singletons without a daemon, LD_LIBRARY_PATH with the bundle's
# libraries and the machine's NVIDIA libraries from pip); every bundled object's
# libraries resolved; every gpu test (ranks 1 as a singleton, a suite at a time; else
# under the bundle's mpirun); on a GPU, compute-sanitizer's memcheck over them; etr-train
# as a singleton on the GPU and on the CPU, on 2 ranks, and the GPU run's checkpoint
# resumed on the CPU; etr-tokenize; on a GPU, the benchmarks
# (gpu-alloc, gpu-cast, and gpu-kernels and gpu-train in fp32 and in bf16 beside PyTorch's
# runs of the same work, bench/pytorch_gpu_*.py, when the machine's python3 has a CUDA
# torch), the memory tier's checkpoint stall at np 2 on the node's cores, and two ranks
# on one GPU with one and with distinct NCCL_HOSTIDs (an experiment: reported, never a
# failure); last, every library any step loaded is checked to come from the bundle,
# glibc/libstdc++, CUDA or the RDMA libraries NCCL opens. Exit status 1 when a step
# failed, 2 on a usage error.
# Environment: ETR_CHECK_TEST_LIMIT (seconds a test binary, or one suite of it, may take
# at most; default 180), ETR_CHECK_MEMCHECK=0 (no compute-sanitizer runs),
# ETR_CHECK_COMPILE=0 (no torch.compile reference: it may take 4 minutes),
# ETR_CHECK_CKPT_LIMIT (seconds for the checkpoint stall benchmark, default 240),
# ETR_CHECK_EXTRA=FILE (a diagnostic script run in the check's environment before the
# tests, ETR_CHECK_EXTRA_LIMIT seconds, default 120), TMPDIR.
set -uo pipefail
ETR_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$ETR_ROOT/scripts/device_libs.sh"  # the libraries the machine may supply; is_elf
bundle="$ETR_ROOT/.device/bundle.tar.xz"
out="${OUT:-$ETR_ROOT/.device/out}"
require_gpu=0
while (($#)); do
  case $1 in
    --bundle) bundle=$(realpath -m "$2"); shift 2 ;;
    --out) out=$(realpath -m "$2"); shift 2 ;;
    --require-gpu) require_gpu=1; shift ;;
    -h | --help) sed -n '2,35p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "device_check: error: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
mkdir -p "$out" || exit 2
log="$out/device_check.log"
summary="$out/summary.md"
exec > >(tee "$log") 2>&1
tee_pid=$!
test_limit="${ETR_CHECK_TEST_LIMIT:-180}"
started=$SECONDS
failures=0
rows=()

# row STEP RESULT DETAIL SECONDS: one line of the table; RESULT fail counts.
row() {
  rows+=("| $1 | $2 | $3 | $4 |")
  [[ $2 == fail ]] && failures=$((failures + 1))
  echo "device_check: [$2] $1: $3 (${4} s)"
}
finish() {
  {
    echo "| step | result | detail | s |"
    echo "| --- | --- | --- | --- |"
    printf '%s\n' "${rows[@]}"
  } >"$summary"
  echo
  echo "== summary ($((SECONDS - started)) s) =="
  cat "$summary"
  local status=0
  if ((failures)); then
    echo "device_check: $failures step(s) failed; the log is $log"
    status=1
  else
    echo "device_check: every step passed"
  fi
  exec >&- 2>&-        # tee sees the end of its input,
  wait "$tee_pid"      # and the log is complete before $OUT is collected
  exit "$status"
}

# --- The machine -------------------------------------------------------------------------
echo "== machine =="
echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
echo "os: $(. /etc/os-release 2>/dev/null && echo "$PRETTY_NAME"); kernel $(uname -r); $(ldd --version 2>&1 | head -1)"
echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores"
gpu=""
if command -v nvidia-smi >/dev/null 2>&1; then
  gpu=$(nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv,noheader 2>/dev/null | head -1)
fi
if [[ -n $gpu ]]; then
  echo "gpu: $gpu"
  row machine pass "$gpu; $(. /etc/os-release && echo "$PRETTY_NAME"), $(ldd --version 2>&1 | head -1 | awk '{print "glibc " $NF}')" 0
else
  echo "gpu: none (no nvidia-smi, or it lists no device)"
  if ((require_gpu)); then
    row machine fail "no GPU visible, and --require-gpu was given" 0
    finish
  fi
  row machine pass "no GPU: the gpu tests report themselves skipped; not a GPU result" 0
fi

# --- The bundle --------------------------------------------------------------------------
echo "== bundle =="
[[ -f $bundle ]] || { row bundle fail "$bundle not found: run scripts/device_bundle.sh first" 0; finish; }
B=$(mktemp -d "${TMPDIR:-/tmp}/etr-device.XXXXXX")
if [[ $B =~ [[:space:]] ]]; then
  rm -rf "$B"
  row bundle fail "the temporary folder '$B' has white space in its path: set TMPDIR to one without" 0
  finish
fi
trap 'rm -rf "$B"' EXIT
t0=$SECONDS
if ! tar -C "$B" -xJf "$bundle" 2>"$B/untar.err"; then
  # No xz program: Python's tarfile reads it too.
  python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' "$bundle" "$B" ||
    { cat "$B/untar.err"; row bundle fail "could not unpack $bundle" $((SECONDS - t0)); finish; }
fi
cat "$B/BUNDLE"
row bundle pass "$(sed -n 's/^commit: //p' "$B/BUNDLE"), $(($(stat -c %s "$bundle") >> 20)) MiB" $((SECONDS - t0))

# --- The environment ---------------------------------------------------------------------
echo "== environment =="
# The machine's NVIDIA libraries: pip's (site-packages/nvidia/*/lib) where a python3 has
# them, else the CUDA toolkit's.
nvidia_dirs=$(python3 - 2>/dev/null <<'EOF'
import glob, os
try:
    import nvidia
except ImportError:
    raise SystemExit
dirs = set()
for root in nvidia.__path__:
    for lib in glob.glob(os.path.join(root, "**", "lib*.so*"), recursive=True):
        dirs.add(os.path.dirname(lib))
print(":".join(sorted(dirs)))
EOF
)
nvidia_from="pip"
if [[ -z $nvidia_dirs ]]; then
  nvidia_from="the CUDA toolkit"
  for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do
    [[ -d $d ]] && nvidia_dirs="${nvidia_dirs:+$nvidia_dirs:}$d"
  done
fi
orig_ld_library_path="${LD_LIBRARY_PATH:-}"  # for Python (the reference), not the bundle's
export LD_LIBRARY_PATH="$B/lib${nvidia_dirs:+:$nvidia_dirs}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export PATH="$B/ompi/bin:$B/bin:$PATH"
export OPAL_PREFIX="$B/ompi"  # Open MPI's every directory follows its prefix
# PMIx's plugin folder follows PMIX_LIBDIR (not PMIX_PREFIX or its component path:
# tried, its system plugins were still loaded), its help files PMIX_PKGDATADIR.
export PMIX_PREFIX="$B/pmix" PMIX_LIBDIR="$B/pmix/lib" PMIX_PKGDATADIR="$B/pmix/share/pmix"
[[ -f $B/ompi/etc/openmpi-mca-params.conf ]] &&
  export OMPI_MCA_mca_base_param_files="$B/ompi/etc/openmpi-mca-params.conf"
export HWLOC_PLUGINS_PATH="$B/lib/hwloc"  # none: the topology needs no plugin
export OMPI_MCA_ess_singleton_isolated=1  # a singleton starts no orted
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_pml=ob1 OMPI_MCA_btl=self,vader OMPI_MCA_rmaps_base_oversubscribe=1
export OMPI_MCA_oob_tcp_if_include=lo OMPI_MCA_btl_tcp_if_include=lo
export GOMP_SPINCOUNT=10000
# Every library that etr's programs, tests and Open MPI load is logged (LD_DEBUG=libs, a
# file per process) and checked at the end: `traced CMD` runs CMD so.
trace="$B/ld-trace"
mkdir -p "$trace" "$B/steps"
steps="$B/steps"  # each step's output (also in the log; $OUT keeps only the log, the
                  # table and the benchmarks' JSON: at most 8 files come back from it)
traced=(env LD_DEBUG=libs LD_DEBUG_OUTPUT="$trace/ld")
echo "NVIDIA libraries from $nvidia_from: ${nvidia_dirs:-none found}"
echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
echo "OPAL_PREFIX=$OPAL_PREFIX PMIX_PREFIX=$PMIX_PREFIX"

t0=$SECONDS
unresolved=""
while read -r f; do
  is_elf "$f" || continue
  miss=$(ldd "$f" 2>/dev/null | awk '/not found/ {print $1}' | tr '\n' ' ')
  [[ -n $miss ]] && unresolved+="${f#"$B"/}: $miss; "
done < <(find "$B" -type f)
if [[ -n $unresolved ]]; then
  row libraries fail "unresolved: $unresolved" $((SECONDS - t0))
else
  cudart=$(ldd "$B/tests/$(head -1 "$B/tests/tests.tsv" | cut -f4)" | awk '$1 ~ /^libcudart/ {print $3}')
  row libraries pass "every bundled object resolves; libcudart from ${cudart:-nowhere}" $((SECONDS - t0))
fi
mpirun_flags=(--bind-to none)

# --- A developer's diagnostic (ETR_CHECK_EXTRA) ------------------------------------------
# ETR_CHECK_EXTRA=FILE: a bash script run here, in the check's environment (the unpacked
# bundle at $ETR_BUNDLE, mpirun on the PATH), before the tests: e.g. an instrumented test
# binary carried beside the bundle. Its output is in the log; its row is info only.
if [[ -n ${ETR_CHECK_EXTRA:-} ]]; then
  t0=$SECONDS
  echo "== extra: $ETR_CHECK_EXTRA"
  ETR_BUNDLE="$B" timeout -k 10 "${ETR_CHECK_EXTRA_LIMIT:-120}" bash "$ETR_CHECK_EXTRA" </dev/null 2>&1
  row extra info "$(basename "$ETR_CHECK_EXTRA"): exit $?" $((SECONDS - t0))
fi

# --- GPU tests ---------------------------------------------------------------------------
# run_gtest NAME RANKS LIMIT EXE [FILTER]: one GoogleTest binary (the tests FILTER
# selects); its counts into the table.
run_gtest() {
  local name=$1 ranks=$2 limit=$3 exe=$4 filter=${5:-*} t0=$SECONDS rc
  local cmd=("$exe" --gtest_color=no "--gtest_filter=$filter")
  ((ranks > 1)) && cmd=(mpirun -np "$ranks" "${mpirun_flags[@]}" "${cmd[@]}")
  echo "== test $name (ranks $ranks, limit ${limit} s): ${cmd[*]#"$B"/}"
  timeout -k 10 "$limit" "${traced[@]}" "${cmd[@]}" </dev/null >"$steps/$name.out" 2>&1
  rc=$?
  cat "$steps/$name.out"
  local passed skipped failed
  passed=$(sed -n 's/^\[  PASSED  \] \([0-9]*\) test.*/\1/p' "$steps/$name.out" | tail -1)
  skipped=$(sed -n 's/^\[  SKIPPED \] \([0-9]*\) test.*/\1/p' "$steps/$name.out" | tail -1)
  failed=$(sed -n 's/^\[  FAILED  \] \([0-9]*\) test.*/\1/p' "$steps/$name.out" | tail -1)
  local detail="${passed:-0} passed, ${skipped:-0} skipped, ${failed:-0} failed"
  if ((rc == 124 || rc == 137)); then
    row "$name" fail "timed out after ${limit} s; $detail" $((SECONDS - t0))
  elif ((rc != 0)); then
    row "$name" fail "exit $rc; $detail" $((SECONDS - t0))
  elif [[ -n $gpu && ${skipped:-0} -gt 0 ]]; then
    row "$name" fail "$detail: a test skipped on a GPU machine" $((SECONDS - t0))
  elif [[ -z $passed && -z $skipped ]]; then
    row "$name" fail "exit 0 but no GoogleTest summary" $((SECONDS - t0))
  else
    row "$name" pass "$detail" $((SECONDS - t0))
  fi
}
# suites_of EXE: its GoogleTest suites ("CudaAdamW", "Counts/CudaElementwise"), a line each.
suites_of() {
  timeout -k 5 30 "$1" --gtest_list_tests </dev/null 2>/dev/null | sed -n 's/^\([^ #][^ ]*\)\.\( .*\)\{0,1\}$/\1/p'
}
# A single-rank binary of several suites runs one suite at a time (a row each), so that a
# crash in one suite does not hide the others' results.
while IFS=$'\t' read -r name ranks timeout exe; do
  ((timeout > test_limit)) && timeout=$test_limit
  suites=()
  ((ranks == 1)) && mapfile -t suites < <(suites_of "$B/tests/$exe")
  if ((${#suites[@]} > 1)); then
    for suite in "${suites[@]}"; do
      run_gtest "$name:${suite//\//_}" 1 "$timeout" "$B/tests/$exe" "$suite.*"
    done
  else
    run_gtest "$name" "$ranks" "$timeout" "$B/tests/$exe"
  fi
done <"$B/tests/tests.tsv"

# --- compute-sanitizer (GPU only) --------------------------------------------------------
# memcheck over etr's own single-rank gpu tests: an out-of-bounds or misaligned access, or
# a failed CUDA call, is a failure even when the results happened to match. Not traced
# (the sanitizer injects its own libraries); NCCL's test is left out (NCCL's kernels, and
# a watchdog test that stalls on purpose). ETR_CHECK_MEMCHECK=0 skips it.
# nccl_probe_reports FILE: the sanitizer's reports in FILE whose first host frame is in
# libnccl.
nccl_probe_reports() {
  awk '/^========= $/ {in_block = 0; next}
       /^========= [^ ]/ && !in_block {in_block = 1; first = ""; next}
       in_block && first == "" && /Host Frame:/ {first = $0; if (first ~ /libnccl/) n++}
       END {print n + 0}' "$1"
}
sanitizer=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null)
if [[ -n $gpu && -n $sanitizer && ${ETR_CHECK_MEMCHECK:-1} != 0 ]]; then
  while IFS=$'\t' read -r name ranks _ exe; do
    [[ $ranks == 1 && $name != nccl* ]] || continue
    t0=$SECONDS
    echo "== memcheck $name"
    mapfile -t suites < <(suites_of "$B/tests/$exe")
    bad=""
    errors=0 nccl_errors=0
    for suite in "${suites[@]:-*}"; do  # a suite at a time: a crash hides nothing else
      out_file="$steps/memcheck_${name}_${suite//\//_}.out"
      timeout -k 10 120 "$sanitizer" --tool memcheck --error-exitcode 99 --leak-check no </dev/null \
        "$B/tests/$exe" --gtest_color=no "--gtest_filter=$suite.*" >"$out_file" 2>&1
      rc=$?
      n=$(grep -o 'ERROR SUMMARY: [0-9]*' "$out_file" | tail -1 | grep -o '[0-9]*$')
      errors=$((errors + ${n:-0}))
      # NCCL probes for kernel images of other architectures at its init (failed
      # cudaFuncGetAttributes calls it handles itself): reports whose first host frame is
      # in libnccl are NCCL's, not etr's; any other report, or a failed test, still fails.
      nccl_own=$(nccl_probe_reports "$out_file")
      if ((rc == 99 && ${n:-0} > 0 && nccl_own == n)) && grep -q '^\[  PASSED  \]' "$out_file" &&
         ! grep -q '^\[  FAILED  \]' "$out_file"; then
        nccl_errors=$((nccl_errors + nccl_own))
        rc=0
      fi
      if ((rc != 0)); then
        grep -v '^\[ *\(RUN\|OK\) ' "$out_file" | head -60
        bad+="$suite (exit $rc, ${n:-no} errors) "
      fi
    done
    if [[ -z $bad ]]; then
      row "memcheck $name" pass "${#suites[@]} suites, $((errors - nccl_errors)) errors$( ((nccl_errors)) && echo " ($nccl_errors more in NCCL's kernel probing at its init)")" $((SECONDS - t0))
    else
      row "memcheck $name" fail "$errors errors; failed: $bad" $((SECONDS - t0))
    fi
  done <"$B/tests/tests.tsv"
elif [[ -n $gpu ]]; then
  echo "== memcheck: skipped (${sanitizer:+ETR_CHECK_MEMCHECK=0}${sanitizer:-no compute-sanitizer})"
fi

# --- The programs ----------------------------------------------------------------------
# etr-train on the GPU (runtime.device = cuda; on a machine without one, the sentence and
# exit 1 that say so are what passes) as a singleton and on 2 ranks sharing it (data
# parallel through the staged reducer), and on the host at np 1 and 2: Open MPI,
# OpenBLAS, protobuf and xxHash from the bundle (a checkpoint is written, so the
# checksums run). Then the GPU run's checkpoint resumes on the host: a checkpoint is
# device-free.
# smoke NAME DEVICE CMD...: 6 steps of configs/tiny.pbtxt on DEVICE (cpu, cuda or auto).
smoke() {
  local name=$1 device=$2 t0=$SECONDS rc
  shift 2
  local ckpt="$B/ckpt-$name"
  rm -rf "$ckpt"  # (a check run again: a fresh start refuses an earlier run's checkpoints)
  echo "== $name (runtime.device=$device): $*"
  timeout -k 10 120 "${traced[@]}" "$@" </dev/null --config "$B/configs/tiny.pbtxt" --set schedule.max_steps=6 \
    --set checkpoint.dir="$ckpt" --set checkpoint.every=3 --set runtime.device="$device" >"$steps/$name.out" 2>&1
  rc=$?
  cat "$steps/$name.out"
  local loss
  loss=$(grep -o 'loss [0-9.]*' "$steps/$name.out" | tail -1)
  if [[ $device == cuda && -z $gpu ]]; then
    if ((rc == 1)) && grep -q 'sees no GPU' "$steps/$name.out"; then
      row "$name" pass "no GPU: one sentence and exit 1" $((SECONDS - t0))
    else
      row "$name" fail "no GPU, but exit $rc without the sentence" $((SECONDS - t0))
    fi
  elif ((rc != 0)); then
    row "$name" fail "exit $rc" $((SECONDS - t0))
  elif [[ ! -d $ckpt ]] || [[ -z $(ls "$ckpt") ]]; then
    row "$name" fail "no checkpoint written in $ckpt" $((SECONDS - t0))
  elif [[ $device == cuda ]] && ! grep -q 'device cuda:' "$steps/$name.out"; then
    row "$name" fail "no start-up line naming the GPU" $((SECONDS - t0))
  else
    row "$name" pass "6 steps, ${loss:-no loss line}, checkpoint $(ls "$ckpt" | tail -1)" $((SECONDS - t0))
  fi
}
smoke train_gpu cuda "$B/bin/etr-train"
smoke train_gpu_np2 cuda mpirun -np 2 "${mpirun_flags[@]}" "$B/bin/etr-train"
smoke train_gpu_zero3_np2 cuda mpirun -np 2 "${mpirun_flags[@]}" "$B/bin/etr-train" --set parallel.zero_stage=3
smoke train_gpu_pp2 cuda mpirun -np 2 "${mpirun_flags[@]}" "$B/bin/etr-train" --set parallel.pp=2
smoke train_np1 cpu "$B/bin/etr-train"
smoke train_np2 cpu mpirun -np 2 "${mpirun_flags[@]}" "$B/bin/etr-train"
# On the GPU: --plan (the memory model of the device), and an out-of-memory error inside
# step 3 (ETR_TEST_BUDGET_CUT: the device's budget cut to 32 MiB for cuBLAS plus 3.25 MiB,
# where micro-batches of 2 need 3.72 MiB and of 1 2.8 MiB) survived by halving the
# micro-batch.
if [[ -n $gpu ]]; then
  t0=$SECONDS
  echo "== train_gpu_plan: etr-train --plan on the GPU"
  timeout -k 10 60 "${traced[@]}" "$B/bin/etr-train" </dev/null --config "$B/configs/tiny.pbtxt" \
    --set runtime.device=cuda --plan >"$steps/train_gpu_plan.out" 2>&1
  rc=$?
  cat "$steps/train_gpu_plan.out"
  if ((rc == 0)) && grep -q '^on cuda:0 ' "$steps/train_gpu_plan.out" &&
     grep -q 'the largest micro-batch that fits' "$steps/train_gpu_plan.out"; then
    row train_gpu_plan pass "$(grep -o 'the largest micro-batch that fits: [0-9]* ([^)]*)' "$steps/train_gpu_plan.out")" $((SECONDS - t0))
  else
    row train_gpu_plan fail "exit $rc, or no device plan" $((SECONDS - t0))
  fi
  t0=$SECONDS
  # The cut is the device's budget, of which cuBLAS's and cuBLASLt's workspaces (32 MiB
  # each under bf16) are not the allocator's: 68403 KiB leaves it 2.8 MiB, under the plan
  # at micro-batch 2 (3.01 MiB) and over the one at 1 (2.55 MiB).
  echo "== train_gpu_oom: ETR_TEST_BUDGET_CUT=3:68403KiB etr-train on the GPU (bf16)"
  ETR_TEST_BUDGET_CUT=3:68403KiB timeout -k 10 120 "${traced[@]}" "$B/bin/etr-train" </dev/null \
    --config "$B/configs/tiny.pbtxt" --set schedule.max_steps=6 --set runtime.device=cuda \
    --set runtime.precision=bf16 \
    >"$steps/train_gpu_oom.out" 2>&1
  rc=$?
  cat "$steps/train_gpu_oom.out"
  if ((rc == 0)) && grep -q 'out of memory inside the step' "$steps/train_gpu_oom.out" &&
     grep -q '1 out-of-memory step(s) redone' "$steps/train_gpu_oom.out"; then
    row train_gpu_oom pass "step 3 redone at micro-batch 1 x 4, $(grep -o 'loss [0-9.]* -> [0-9.]*' "$steps/train_gpu_oom.out" | tail -1)" $((SECONDS - t0))
  else
    row train_gpu_oom fail "exit $rc, or no out-of-memory recovery" $((SECONDS - t0))
  fi
fi
# On the GPU: GPT-2 124M on 2 ranks sharing it (data parallel through the staged
# reducer, 4 x 1024 tokens a rank, 8 steps): the gradient communication per step and its
# hidden fraction from the run's last line (one GPU: the ranks' kernels share it, so the
# step time is no speed claim).
if [[ -n $gpu ]]; then
  t0=$SECONDS
  printf 'model { preset: "gpt2-124m" }\nschedule { warmup_steps: 2 max_steps: 8 }\noptimizer { lr: 0.0002 }\nbatch { global_batch: 8 micro_batch: 4 }\ndata { synthetic: true synthetic_size: "256KiB" val_fraction: 0.1 }\nlog { log_every: 1 eval_every: 0 }\nruntime { device: "cuda" }\n' \
    >"$B/gpt2_dp.pbtxt"
  echo "== train_gpu_dp_124m: GPT-2 124M, 2 ranks on the GPU, staged"
  timeout -k 10 150 "${traced[@]}" mpirun -np 2 "${mpirun_flags[@]}" "$B/bin/etr-train" </dev/null \
    --config "$B/gpt2_dp.pbtxt" --set model.vocab_size=50257 >"$steps/train_gpu_dp_124m.out" 2>&1
  rc=$?
  grep -v '^  \|^[a-z_]* {\|^}' "$steps/train_gpu_dp_124m.out"
  done_line=$(grep -o 'gradient comm [0-9.]* ms/step, [0-9]*% hidden' "$steps/train_gpu_dp_124m.out" | tail -1)
  # The loss must come down (10.8837 -> 6.4269 on the host, np 2, the same config).
  losses=$(grep -o 'done: .* | loss [0-9.]* -> [0-9.]*' "$steps/train_gpu_dp_124m.out" | grep -o '[0-9.]* -> [0-9.]*$')
  if ((rc == 0)) && [[ -n $done_line ]] && awk -v l="$losses" 'BEGIN { split(l, v, " -> "); exit !(v[2] < v[1] - 1) }'; then
    row train_gpu_dp_124m pass "$done_line; loss $losses; $(grep -o '[0-9]* tok/s | peak memory' "$steps/train_gpu_dp_124m.out" | tail -1 | cut -d' ' -f1-2)" $((SECONDS - t0))
  else
    row train_gpu_dp_124m fail "exit $rc, no gradient communication line, or the loss did not come down (${losses:-none})" $((SECONDS - t0))
  fi
fi
# Elasticity across devices: the GPU run's checkpoint resumed on the host, the 2-rank GPU
# run's on 1 GPU and the 1-rank run's on 2 ranks sharing it (resharded by the reader), each
# for 3 more steps.
resume_on() {  # NAME CKPT DEVICE DESCRIPTION launcher...
  local name=$1 ckpt=$2 device=$3 what=$4
  shift 4
  t0=$SECONDS
  echo "== $name: $what"
  timeout -k 10 120 "${traced[@]}" "$@" </dev/null --config "$B/configs/tiny.pbtxt" \
    --set schedule.max_steps=9 --set runtime.device="$device" --resume "$ckpt" >"$steps/$name.out" 2>&1
  rc=$?
  cat "$steps/$name.out"
  if ((rc == 0)) && grep -q 'resumed from' "$steps/$name.out"; then
    row "$name" pass "$what: $(grep -o 'loss [0-9.]*' "$steps/$name.out" | tail -1)" $((SECONDS - t0))
  else
    row "$name" fail "exit $rc, or no 'resumed from' line" $((SECONDS - t0))
  fi
}
if [[ -n $gpu && -d $B/ckpt-train_gpu ]]; then
  resume_on train_gpu_to_cpu "$B/ckpt-train_gpu" cpu "the GPU run's checkpoint on the host" "$B/bin/etr-train"
  resume_on train_gpu_reshard_1to2 "$B/ckpt-train_gpu" cuda "1 GPU rank's checkpoint on 2 sharing it" \
    mpirun -np 2 "${mpirun_flags[@]}" "$B/bin/etr-train"
fi
if [[ -n $gpu && -d $B/ckpt-train_gpu_np2 ]]; then
  resume_on train_gpu_reshard_2to1 "$B/ckpt-train_gpu_np2" cuda "2 GPU ranks' checkpoint on 1" "$B/bin/etr-train"
fi
# An out-of-memory error inside backward of step 3 on rank 1 of 2 sharing the GPU (the
# staged communicator): rank 1 makes the rest of the step's bucket sums without compute,
# every rank redoes the step at half the micro-batch.
if [[ -n $gpu ]]; then
  t0=$SECONDS
  echo "== train_gpu_oom_backward: ETR_OOM_IN_BACKWARD_AT_STEP=3:1, 2 ranks on the GPU"
  ETR_OOM_IN_BACKWARD_AT_STEP=3:1 timeout -k 10 120 "${traced[@]}" mpirun -np 2 "${mpirun_flags[@]}" \
    -x ETR_OOM_IN_BACKWARD_AT_STEP "$B/bin/etr-train" </dev/null --config "$B/configs/tiny.pbtxt" \
    --set schedule.max_steps=6 --set runtime.device=cuda >"$steps/train_gpu_oom_backward.out" 2>&1
  rc=$?
  cat "$steps/train_gpu_oom_backward.out"
  if ((rc == 0)) && grep -q '1 out-of-memory step(s) redone' "$steps/train_gpu_oom_backward.out"; then
    row train_gpu_oom_backward pass "step 3 redone, $(grep -o 'loss [0-9.]* -> [0-9.]*' "$steps/train_gpu_oom_backward.out" | tail -1)" $((SECONDS - t0))
  else
    row train_gpu_oom_backward fail "exit $rc, or no out-of-memory recovery" $((SECONDS - t0))
  fi
fi
# etr-tokenize trains a small BPE tokenizer: the SentencePiece shim the programs dlopen
# from the bundle's lib/.
t0=$SECONDS
for i in $(seq 200); do echo "the small cat $i sat on the mat and counted $((i * 7)) apples"; done >"$B/text.txt"
echo "== tokenizer: etr-tokenize text.txt --train-tokenizer bpe --vocab-size 300"
if timeout -k 10 60 "${traced[@]}" "$B/bin/etr-tokenize" "$B/text.txt" --train-tokenizer bpe \
     --vocab-size 300 -o "$B/tok.model" >"$steps/tokenizer.out" 2>&1 && [[ -s $B/tok.model ]]; then
  cat "$steps/tokenizer.out"
  row tokenizer pass "a 300-piece BPE model, $(stat -c %s "$B/tok.model") bytes" $((SECONDS - t0))
else
  cat "$steps/tokenizer.out"
  row tokenizer fail "etr-tokenize could not train a tokenizer" $((SECONDS - t0))
fi

# --- Benchmarks and experiments (scripts/device_check_bench.sh) -------------------------
source "$ETR_ROOT/scripts/device_check_bench.sh"

# --- Where every loaded library came from ------------------------------------------------
t0=$SECONDS
loaded=$(cat "$trace"/ld.* 2>/dev/null | sed -n 's/.*calling init: \(.*\)$/\1/p' | sort -u)
foreign=""
cuda_loaded=""
rdma_loaded=""
while read -r lib; do
  [[ -n $lib ]] || continue
  base=$(basename "$lib")
  case $lib in "$B"/*) continue ;; esac
  if [[ $base =~ $DEVICE_SYSTEM_LIBS ]]; then
    continue
  elif [[ $base =~ $DEVICE_CUDA_LIBS ]]; then
    cuda_loaded+="$lib "
  elif [[ $base =~ $DEVICE_RDMA_LIBS ]]; then
    rdma_loaded+="$base "  # NCCL's InfiniBand transport opens the machine's verbs
  else
    foreign+="$lib "
  fi
done <<<"$loaded"
echo "== loaded libraries: $(echo "$loaded" | wc -w) distinct, from $(ls "$trace" | wc -l) processes"
echo "$loaded"
if [[ -z $loaded ]]; then
  row self-contained fail "no loader trace was written in $trace" $((SECONDS - t0))
elif [[ -n $foreign ]]; then
  row self-contained fail "loaded from outside the bundle: $foreign" $((SECONDS - t0))
else
  row self-contained pass "$(ls "$trace" | wc -l) processes loaded only bundled, glibc/libstdc++ and CUDA libraries (CUDA: ${cuda_loaded:-none}${rdma_loaded:+; RDMA libraries of the machine opened by NCCL: $rdma_loaded})" $((SECONDS - t0))
fi
finish
