#!/usr/bin/env bash
# Quick start, command 1: set everything up and run the main job, the example GPT-2
# trainer on the synthetic corpus (configs/demo.pbtxt): progress lines, held-out loss,
# a generated sample and a summary. Extra arguments go to etr-train, e.g.
#   scripts/quickstart.sh --set schedule.max_steps=400
# The collectives benchmark of the foundation is bench/run_allreduce.sh build.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
exec "$ETR_BUILD_DIR/examples/train/etr-train" --config "$ETR_ROOT/configs/demo.pbtxt" \
  --set "log.metrics_file=$ETR_BUILD_DIR/demo_metrics.jsonl" "$@"
