#!/usr/bin/env bash
# Quick start, command 1: set everything up and run the main job.
# Until the GPT trainer lands, the main job is etr's allreduce benchmark on 2 ranks,
# beside MPI's own MPI_Allreduce, with the machine's memory-bandwidth ceiling.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
exec "$ETR_ROOT/bench/run_allreduce.sh" "$ETR_BUILD_DIR" "$@"
