#!/bin/sh
# Runs etr's batch-policy benchmark (etr-bench batch) from a build dir:
#
#   bench/run_batch.sh BUILD_DIR [etr-bench batch options]
#
# np 2, one thread per rank, each rank on a core of its own: the shares table slows rank 1
# down (ETR_SLOW_RANK) and needs the other rank's speed to be its own.
set -eu
if [ $# -lt 1 ] || [ ! -x "$1/etr-mpirun" ] || [ ! -x "$1/bench/etr-bench" ]; then
  echo "usage: $0 BUILD_DIR [etr-bench batch options]" >&2
  exit 2
fi
build=$1
shift
"$build/etr-mpirun" -np 2 --bind-to core "$build/bench/etr-bench" batch "$@"
