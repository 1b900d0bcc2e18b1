#!/bin/sh
# Runs etr's pipeline benchmark (etr-bench pipeline) from a build dir:
#
#   bench/run_pipeline.sh BUILD_DIR [etr-bench pipeline options]
#
# np 2: pp 2, one thread per rank, each stage on a core of its own. (pp 4 would
# time-share this machine's two cores: its bubble would not be a pipeline's.)
set -eu
if [ $# -lt 1 ] || [ ! -x "$1/etr-mpirun" ] || [ ! -x "$1/bench/etr-bench" ]; then
  echo "usage: $0 BUILD_DIR [etr-bench pipeline options]" >&2
  exit 2
fi
build=$1
shift
"$build/etr-mpirun" -np 2 --bind-to core "$build/bench/etr-bench" pipeline "$@"
