#!/bin/sh
# Runs etr's ZeRO benchmark (etr-bench zero) on 2 and on 4 ranks from a build dir:
#
#   bench/run_zero.sh BUILD_DIR [etr-bench zero options]
#
# np 2: one thread per rank, each rank on a core of its own (the tokens/s figures).
# np 4: ranks time-share the cores (--oversubscribe), so its tokens/s are not a speed;
# its memory and volume columns are exact.
set -eu
if [ $# -lt 1 ] || [ ! -x "$1/etr-mpirun" ] || [ ! -x "$1/bench/etr-bench" ]; then
  echo "usage: $0 BUILD_DIR [etr-bench zero options]" >&2
  exit 2
fi
build=$1
shift
"$build/etr-mpirun" -np 2 --bind-to core "$build/bench/etr-bench" zero "$@"
"$build/etr-mpirun" -np 4 --oversubscribe --bind-to none "$build/bench/etr-bench" zero "$@"
