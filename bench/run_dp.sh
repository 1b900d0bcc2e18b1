#!/bin/sh
# Runs etr's data-parallel benchmark (etr-bench dp) on two ranks from a build dir:
#
#   bench/run_dp.sh BUILD_DIR [etr-bench dp options]
#   bench/run_dp.sh build --rounds 5 --json out/dp.json
#
# One thread per rank, each rank bound to its own core (--bind-to core): the "single"
# row is one rank on one core, so the efficiency column compares like with like. The
# progress thread of a rank shares that rank's core with its compute thread.
set -eu
if [ $# -lt 1 ] || [ ! -x "$1/etr-mpirun" ] || [ ! -x "$1/bench/etr-bench" ]; then
  echo "usage: $0 BUILD_DIR [etr-bench dp options]" >&2
  echo "  (BUILD_DIR must hold etr-mpirun and bench/etr-bench: build the etr-bench target)" >&2
  exit 2
fi
build=$1
shift
exec "$build/etr-mpirun" -np 2 --bind-to core "$build/bench/etr-bench" dp "$@"
