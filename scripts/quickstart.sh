#!/usr/bin/env bash
# Quick start, command 1: set everything up and run the main job, the elastic demo:
# etr-run trains the example GPT-2 (configs/demo.pbtxt) on 2 ranks; mid-run one worker is
# killed and the job goes on with 1 rank from its newest checkpoint, later the slot comes
# back and the job grows to 2 ranks again; it ends with the recoveries, a generated sample
# and the final loss (scripts/elastic_demo.sh). Extra arguments go to etr-train, e.g.
#   scripts/quickstart.sh --set schedule.max_steps=400
# Plain training without etr-run: build/examples/train/etr-train --config configs/demo.pbtxt
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
exec "$ETR_ROOT/scripts/elastic_demo.sh" "$ETR_BUILD_DIR" "$@"
