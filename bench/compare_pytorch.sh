#!/usr/bin/env bash
# etr beside PyTorch training the identical GPT-2 (same config, data, batch, threads):
#
#   bench/compare_pytorch.sh BUILD_DIR [--steps N]
#
# Needs the Python peer environment (scripts/setup_python.sh makes .venv/). Prints the
# figures of `etr-bench train` and of bench/pytorch_gpt_train.py (transformers' GPT-2
# and a lean nanoGPT-style module) side by side, with the ratio to the faster PyTorch,
# PyTorch's version and the BLAS it runs on.
#
# Like with like: at n threads both run on the same first n CPUs of this shell's
# affinity (`taskset -c`; etr-bench train also pins each row itself), PyTorch with
# torch.set_num_threads(n). Each side's premise is measured (CPU time / wall time of the
# timed steps): an etr row that etr-bench refused, or a PyTorch run that kept more than
# n x 1.15 cores busy or whose threads waited for a CPU more than 10 % of their time
# (/proc/self/task/*/schedstat), is left out of the best-of-rounds and listed; a cell with no run
# left shows "refused", and the script then exits 1.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${1:?usage: $0 BUILD_DIR [--steps N]}"
shift
steps=20
if [[ "${1:-}" == "--steps" ]]; then steps="$2"; fi
python="${ETR_VENV:-$root/.venv}/bin/python"
[[ -x "$python" ]] || { echo "no Python environment at $python; run scripts/setup_python.sh" >&2; exit 1; }
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

"$build/examples/data/etr-tokenize" --synthetic 2097152 --seed 1234 -o "$work/data.tok" >/dev/null
# Three rounds, etr and PyTorch alternating, best of the three for each: a noisy
# neighbour on a 2-core machine slows single runs by up to 3x, never speeds them up.
# Both sides run with the same OpenMP spin limit (runtime/omp_env.h; torch uses libgomp too).
export GOMP_SPINCOUNT="${GOMP_SPINCOUNT:-10000}"
rounds="${ETR_COMPARE_ROUNDS:-3}"
# The first n CPUs this shell may use, as a taskset list: "0", "0,1".
mapfile -t allowed < <("$python" -c 'import os; print(*sorted(os.sched_getaffinity(0)), sep="\n")')
(( ${#allowed[@]} >= 2 )) || { echo "$0 compares 1 and 2 threads but may run on ${#allowed[@]} CPU" >&2; exit 1; }
cpus_for() { local IFS=,; echo "${allowed[*]:0:$1}"; }
for round in $(seq 1 "$rounds"); do
  for t in 1 2; do
    # etr-bench exits 1 when it refused a row; its JSON says which, the summary shows it.
    taskset -c "$(cpus_for "$t")" "$build/bench/etr-bench" train --steps "$steps" --threads "$t" \
      --json "$work/etr-$t-$round.json" --set data.synthetic=false \
      --set "data.train_file=$work/data.tok" > "$work/etr-$t-$round.txt" ||
      [[ -s "$work/etr-$t-$round.json" ]] || { echo "$0: etr-bench train failed" >&2; exit 1; }
    for impl in hf lean; do
      taskset -c "$(cpus_for "$t")" "$python" "$root/bench/pytorch_gpt_train.py" \
        --tokens "$work/data.tok" --threads "$t" --steps "$steps" --impl "$impl" \
        > "$work/torch-$impl-$t-$round.json"
    done
  done
done
cat "$work/etr-1-1.txt" "$work/etr-2-1.txt"
"$python" - "$work" <<'PY'
import glob, json, sys
w = sys.argv[1]
refused = []
def accepted(run, who):
    # etr-bench's own verdict, or the same upper bound for PyTorch (bench/premise.h).
    why = run.get("premise_failed")
    if why is None and "cores_busy" in run and run["cores_busy"] > run["threads"] * 1.15:
        why = f"{run['cores_busy']:.2f} cores busy for {run['threads']} thread(s)"
    if why is None and run.get("waiting", 0) > 0.10:
        why = f"waited for a CPU {run['waiting'] * 100:.0f}% of the time (cores shared)"
    if why:
        refused.append(f"{who}, {run['threads']} thread(s): {why}")
    return why is None
def best(runs, who):
    ok = [r for r in runs if accepted(r, who)]
    return max(ok, key=lambda r: r["tokens_per_s"]) if ok else None
def cell(run, width):
    return f"{run['tokens_per_s']:{width}.0f}" if run else f"{'refused':>{width}}"
def busy(run):
    return f"{run['cores_busy']:.2f}" if run else "-"
print()
print("# best accepted run of the rounds; tokens/s; busy = cores kept busy (CPU / wall time)")
print("# threads  cpus         etr  busy   PyTorch (transformers)  busy   PyTorch (lean)  busy"
      "   etr / best PyTorch")
last, missing = None, 0
for t in (1, 2):
    etr = best([r for f in glob.glob(f"{w}/etr-{t}-*.json") for r in json.load(open(f))["rows"]],
               "etr")
    hf, lean = [best([json.load(open(f)) for f in glob.glob(f"{w}/torch-{i}-{t}-*.json")],
                     f"PyTorch {i}") for i in ("hf", "lean")]
    tops = [r["tokens_per_s"] for r in (hf, lean) if r]
    ratio = f"{etr['tokens_per_s'] / max(tops):19.2f}" if etr and tops else f"{'-':>19}"
    cpus = ",".join(map(str, (hf or lean or {"cpus": ["?"]})["cpus"]))
    print(f"  {t:7d}  {cpus:>4}  {cell(etr, 10)}  {busy(etr):>4}  {cell(hf, 23)}  {busy(hf):>4}  "
          f"{cell(lean, 15)}  {busy(lean):>4}  {ratio}")
    last = hf or lean or last
    missing += sum(r is None for r in (etr, hf, lean))
for r in refused:
    print(f"# refused run: {r}")
if last is None:
    sys.exit(1)
tr = last
print(f"# PyTorch {tr['torch']}, transformers {tr['transformers']}, {tr['parameters']} parameters")
print(f"# BLAS: {tr['blas']}")
sys.exit(1 if missing else 0)
PY
