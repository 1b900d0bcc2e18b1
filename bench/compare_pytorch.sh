#!/usr/bin/env bash
# etr beside PyTorch training the identical GPT-2 (same config, data, batch, threads):
#
#   bench/compare_pytorch.sh BUILD_DIR [--steps N]
#
# Needs the Python peer environment (scripts/setup_python.sh makes .venv/). Prints the
# figures of `etr-bench train` and of bench/pytorch_gpt_train.py (transformers' GPT-2
# and a lean nanoGPT-style module) side by side, with the ratio to the faster PyTorch,
# PyTorch's version and the BLAS it runs on.
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
for round in $(seq 1 "$rounds"); do
  "$build/bench/etr-bench" train --steps "$steps" --threads 1 2 --json "$work/etr-$round.json" \
    --set data.synthetic=false --set "data.train_file=$work/data.tok" > "$work/etr-$round.txt"
  for t in 1 2; do
    for impl in hf lean; do
      "$python" "$root/bench/pytorch_gpt_train.py" --tokens "$work/data.tok" --threads "$t" \
        --steps "$steps" --impl "$impl" > "$work/torch-$impl-$t-$round.json"
    done
  done
done
cat "$work/etr-1.txt"
"$python" - "$work" <<'PY'
import glob, json, sys
w = sys.argv[1]
def best(pattern):
    runs = [json.loads(open(f).read()) for f in glob.glob(f"{w}/{pattern}")]
    return max(runs, key=lambda r: r["tokens_per_s"])
etr = {}
for f in glob.glob(f"{w}/etr-*.json"):
    for r in json.load(open(f))["rows"]:
        if r["threads"] not in etr or r["tokens_per_s"] > etr[r["threads"]]["tokens_per_s"]:
            etr[r["threads"]] = r
print()
print("# best of the rounds; tokens/s")
print("# threads         etr   PyTorch (transformers)   PyTorch (lean)   etr / best PyTorch")
for t in (1, 2):
    hf, lean = best(f"torch-hf-{t}-*.json"), best(f"torch-lean-{t}-*.json")
    top = max(hf["tokens_per_s"], lean["tokens_per_s"])
    print(f"  {t:7d}  {etr[t]['tokens_per_s']:10.0f}  {hf['tokens_per_s']:23.0f}  "
          f"{lean['tokens_per_s']:15.0f}  {etr[t]['tokens_per_s'] / top:19.2f}")
tr = hf
print(f"# PyTorch {tr['torch']}, transformers {tr['transformers']}, {tr['parameters']} parameters")
print(f"# BLAS: {tr['blas']}")
PY
