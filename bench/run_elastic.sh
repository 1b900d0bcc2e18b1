#!/bin/sh
# Runs etr's elastic recovery benchmark (etr-bench elastic) from a build dir:
#
#   bench/run_elastic.sh BUILD_DIR [etr-bench elastic options]
#   bench/run_elastic.sh build --rounds 5 --dir /mnt/ckpt
#
# etr-bench runs as one process (an MPI singleton, no mpirun) and drives etr-run, which
# trains configs/demo.pbtxt at np 2 on this machine: per round a cold start, the steady
# step, a kill -9 of one rank, a join to np 3 and a leave back to np 2. --dir names a
# directory for the checkpoints and run files (default: the current directory); each run
# works in a new subdirectory of it and removes it at the end. Run nothing else on the
# machine meanwhile: recovery times are wall-clock times of processes sharing its cores.
set -eu
if [ $# -lt 1 ] || [ ! -x "$1/bench/etr-bench" ] || [ ! -x "$1/launcher/etr-run" ] ||
   [ ! -x "$1/examples/train/etr-train" ]; then
  echo "usage: $0 BUILD_DIR [etr-bench elastic options]" >&2
  echo "  (BUILD_DIR must hold bench/etr-bench, launcher/etr-run and" >&2
  echo "  examples/train/etr-train: build the etr-bench, etr-run and etr-train targets)" >&2
  exit 2
fi
build=$1
shift
exec "$build/bench/etr-bench" elastic "$@"
