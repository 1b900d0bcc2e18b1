# Sourced by scripts/device_check.sh after its tests and programs, in its shell: the GPU
# benchmarks beside PyTorch's, the memory tier's stall on the node's cores, and two ranks
# on one GPU. Uses the check's variables and functions (gpu, B, out, steps, traced,
# mpirun_flags, orig_ld_library_path, row).
# shellcheck shell=bash

# --- GPU benchmarks ----------------------------------------------------------------------
# One line each: NAME|RANKS|LIMIT|etr-bench arguments. Later GPU issues add theirs.
BENCHMARKS=(
  "gpu_alloc|1|90|gpu-alloc --max-bytes 1GiB"
  "gpu_cast|1|90|gpu-cast --bytes 256MiB"
)
# PyTorch on this card, just before etr, as the references of gpu-kernels (each kernel)
# and gpu-train: in fp32 (TF32 products) GPT-2 124M with eager attention, as etr's, and
# with SDPA, PyTorch's fastest; in bf16 (autocast, fp32 master parameters, fused AdamW)
# with SDPA, eager and through torch.compile (which falls back to eager, and says so in
# its row and its JSON, when compiling plus the warm-up takes more than 90 s or fails).
# Where the machine's python3 has a CUDA torch, run with the machine's own library path,
# not the bundle's. [ref_limit=S] reference NAME SCRIPT ARGS...: one row, under a limit
# of S seconds (default 150); the JSON in $steps/NAME.json; true when it was written.
reference() {
  local name=$1 script=$2 limit=${ref_limit:-150} t0=$SECONDS
  shift 2
  echo "== reference $name (limit ${limit} s): bench/$script $*"
  if LD_LIBRARY_PATH="$orig_ld_library_path" timeout -k 10 "$limit" python3 "$ETR_ROOT/bench/$script" \
       --device cuda "$@" --json "$steps/$name.json" </dev/null 2>&1; then
    local fallback
    fallback=$(python3 -c 'import json, sys
r = json.load(open(sys.argv[1]))
if r.get("compile") and not r.get("compiled"):
    print("; torch.compile " + str(r.get("compile_fallback")) + ": the row is eager")' "$steps/$name.json" 2>/dev/null)
    row "reference $name" pass "PyTorch's run, printed beside etr's$fallback" $((SECONDS - t0))
  else
    row "reference $name" fail "bench/$script failed" $((SECONDS - t0))
    return 1
  fi
}
kernels_refs="" train_refs="" train_bf16_refs=""
if [[ -n $gpu ]] && LD_LIBRARY_PATH="$orig_ld_library_path" python3 -c \
     'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
  reference torch_kernels pytorch_gpu_kernels.py && kernels_refs=" --reference $steps/torch_kernels.json"
  for attention in eager sdpa; do
    reference "torch_train_$attention" pytorch_gpu_train.py --precision fp32 --attention "$attention" &&
      train_refs+=" --reference $steps/torch_train_$attention.json"
  done
  reference torch_train_bf16_sdpa pytorch_gpu_train.py --precision bf16 --attention sdpa &&
    train_bf16_refs+=" --reference $steps/torch_train_bf16_sdpa.json"
  if [[ ${ETR_CHECK_COMPILE:-1} != 0 ]]; then
    ref_limit=240 reference torch_train_bf16_sdpa_compile pytorch_gpu_train.py --precision bf16 \
      --attention sdpa --compile --compile-timeout 90 &&
      train_bf16_refs+=" --reference $steps/torch_train_bf16_sdpa_compile.json"
  else
    echo "== reference torch_train_bf16_sdpa_compile: skipped (ETR_CHECK_COMPILE=0)"
  fi
elif [[ -n $gpu ]]; then
  echo "== reference: no python3 with a CUDA torch; gpu-kernels and gpu-train run without PyTorch's"
fi
BENCHMARKS+=("gpu_kernels|1|150|gpu-kernels$kernels_refs"
             "gpu_train|1|240|train --device cuda --precision fp32 --steps 10 --warmup 3$train_refs"
             "gpu_train_bf16|1|240|train --device cuda --precision bf16 --steps 10 --warmup 3$train_bf16_refs")
[[ -n $gpu ]] || { BENCHMARKS=(); echo "== benchmarks: skipped, no GPU"; }
for spec in "${BENCHMARKS[@]}"; do
  IFS='|' read -r name ranks limit args <<<"$spec"
  t0=$SECONDS
  echo "== benchmark $name: etr-bench $args"
  cmd=("$B/bin/etr-bench")
  ((ranks > 1)) && cmd=(mpirun -np "$ranks" "${mpirun_flags[@]}" "${cmd[@]}")
  # shellcheck disable=SC2086  # the arguments are words
  if timeout -k 10 "$limit" "${traced[@]}" "${cmd[@]}" $args --json "$out/$name.json" </dev/null 2>&1 | tee "$steps/$name.out"; then
    row "bench $name" pass "table above in the log; $name.json" $((SECONDS - t0))
  else
    row "bench $name" fail "exit status ${PIPESTATUS[0]}" $((SECONDS - t0))
  fi
done

# --- The memory tier's stall on a GPU node's cores ----------------------------------------
# etr-bench ckpt at np 2 on the host (the medium-cpu model, one thread per rank, each rank
# bound to a core): the memory tier saving every step and bounded, beside no saving, with
# the writers on the node's idle cores, as on a GPU node whose CPUs wait while its GPUs
# train. Into a tmpfs: /dev/shm where it has 1 GiB free, else one mounted in the temporary
# folder. Only on a GPU machine with at least 4 CPUs (2 ranks and their writers).
ckpt_stall() {
  local t0=$SECONDS shm=/dev/shm rc
  if (($(df -k --output=avail /dev/shm 2>/dev/null | tail -1) < 1048576)); then
    shm="$B/shm"
    mkdir -p "$shm" && mount -t tmpfs -o size=2g tmpfs "$shm" 2>/dev/null ||
      { row ckpt_stall_np2 info "/dev/shm has under 1 GiB free and no tmpfs could be mounted" 0; return; }
  fi
  echo "== benchmark ckpt_stall_np2 (tmpfs $shm: $(df -h --output=size "$shm" | tail -1 | tr -d ' ')):" \
    "mpirun -np 2 --bind-to core etr-bench ckpt --modes memory,bounded"
  timeout -k 10 "${ETR_CHECK_CKPT_LIMIT:-240}" "${traced[@]}" mpirun -np 2 --bind-to core \
    "$B/bin/etr-bench" ckpt --dir "$B" --memory-dir "$shm" --rounds 1 --modes memory,bounded \
    --train-rounds 5 --steps 16 --json "$steps/ckpt_stall_np2.json" </dev/null 2>&1 |
    tee "$steps/ckpt_stall_np2.out"
  rc=${PIPESTATUS[0]}
  [[ $shm == "$B/shm" ]] && umount "$shm"
  if ((rc == 0)); then
    row ckpt_stall_np2 pass "$(grep -o 'memory tier every 1 .*' "$steps/ckpt_stall_np2.out" | awk '{print $NF " a step saving every step"}')" $((SECONDS - t0))
  else
    row ckpt_stall_np2 fail "etr-bench ckpt: exit $rc" $((SECONDS - t0))
  fi
}
if [[ -n $gpu ]] && (($(nproc) >= 4)); then ckpt_stall; fi

# --- Two ranks on one GPU (an experiment) ------------------------------------------------
# NCCL refuses two ranks on one device ("Duplicate GPU detected") when they share a host
# hash; NCCL_HOSTID sets that hash. Reported as it happens; never a failure of the check.
nccl_exe=$(awk -F'\t' '$1 == "nccl_communicator_test" {print $4}' "$B/tests/tests.tsv")
if [[ -n $gpu && -n $nccl_exe ]]; then
  for variant in same_hostid distinct_hostid; do
    t0=$SECONDS
    hostid='NCCL_HOSTID=etr-one-host'
    [[ $variant == distinct_hostid ]] && hostid='NCCL_HOSTID=etr-host-$OMPI_COMM_WORLD_RANK'
    echo "== experiment nccl_np2_$variant: 2 ranks on GPU 0, $hostid"
    timeout -k 10 90 "${traced[@]}" mpirun -np 2 "${mpirun_flags[@]}" -x NCCL_DEBUG=INFO </dev/null \
      -x NCCL_DEBUG_SUBSYS=INIT,NET -x NCCL_SOCKET_IFNAME=lo \
      sh -c "export $hostid; exec $(printf %q "$B/tests/$nccl_exe") --gtest_color=no" >"$steps/nccl_np2_$variant.out" 2>&1
    rc=$?
    grep -v 'NCCL INFO' "$steps/nccl_np2_$variant.out"
    grep -E 'NCCL INFO (Channel 00|Using network|NET/|comm .* rank .* nRanks)' "$steps/nccl_np2_$variant.out" | head -12
    passed=$(sed -n 's/^\[  PASSED  \] \([0-9]*\) test.*/\1/p' "$steps/nccl_np2_$variant.out" | tail -1)
    failed=$(sed -n 's/^\[  FAILED  \] \([0-9]*\) test.*/\1/p' "$steps/nccl_np2_$variant.out" | tail -1)
    dup=$(grep -c 'Duplicate GPU' "$steps/nccl_np2_$variant.out")
    via=$(grep -o 'via [A-Za-z0-9/_]*' "$steps/nccl_np2_$variant.out" | sort | uniq -c | sort -rn | head -1 | awk '{print $2, $3}')
    row "nccl_np2_$variant" "info" "exit $rc; ${passed:-0} passed, ${failed:-0} failed; 'Duplicate GPU' $dup times; ranks connected ${via:-by nothing}" $((SECONDS - t0))
  done
fi
