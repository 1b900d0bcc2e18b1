#!/usr/bin/env bash
# etr beside PyTorch training the identical GPT-2 (same config, data, batch, threads):
#
#   bench/compare_pytorch.sh BUILD_DIR [--steps N]
#
# Needs the Python peer environment (scripts/setup_python.sh makes .venv/). Prints the
# figures of `etr-bench train` and of bench/pytorch_gpt_train.py side by side, with the
# ratio, PyTorch's version and the BLAS it runs on.
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
"$build/bench/etr-bench" train --steps "$steps" --threads 1 2 --json "$work/etr.json" \
  --set data.synthetic=false --set "data.train_file=$work/data.tok"
for t in 1 2; do
  "$python" "$root/bench/pytorch_gpt_train.py" --tokens "$work/data.tok" --threads "$t" \
    --steps "$steps" > "$work/torch$t.json"
done
"$python" - "$work" <<'PY'
import json, sys
w = sys.argv[1]
etr = {r["threads"]: r for r in json.load(open(f"{w}/etr.json"))["rows"]}
print()
print("# threads   etr tok/s   PyTorch tok/s   etr / PyTorch")
for t in (1, 2):
    tr = json.loads(open(f"{w}/torch{t}.json").read())
    print(f"  {t:7d}  {etr[t]['tokens_per_s']:10.0f}  {tr['tokens_per_s']:14.0f}  {etr[t]['tokens_per_s'] / tr['tokens_per_s']:13.2f}")
print(f"# PyTorch {tr['torch']}, transformers {tr['transformers']}, {tr['parameters']} parameters")
print(f"# BLAS: {tr['blas']}")
PY
