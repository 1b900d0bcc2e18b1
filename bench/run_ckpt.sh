#!/bin/sh
# Runs etr's checkpoint benchmark (etr-bench ckpt) at np 1 and then np 2 from a build dir:
#
#   bench/run_ckpt.sh BUILD_DIR [etr-bench ckpt options]
#   bench/run_ckpt.sh build --dir /mnt/ckpt --rounds 7
#
# --dir names a directory on the disk the checkpoints go to (default: the current
# directory); each run works in a new subdirectory of it and removes it at the end. One
# thread per rank, each rank bound to its own core (--bind-to core), so a rank's
# background checkpoint writer shares that rank's core with its training thread. Run
# nothing else on the machine meanwhile: the disk and the cores are what is measured.
set -eu
if [ $# -lt 1 ] || [ ! -x "$1/etr-mpirun" ] || [ ! -x "$1/bench/etr-bench" ]; then
  echo "usage: $0 BUILD_DIR [etr-bench ckpt options]" >&2
  echo "  (BUILD_DIR must hold etr-mpirun and bench/etr-bench: build the etr-bench target)" >&2
  exit 2
fi
build=$1
shift
for np in 1 2; do
  [ "$np" = 1 ] || echo
  "$build/etr-mpirun" -np "$np" --bind-to core "$build/bench/etr-bench" ckpt "$@"
done
