#!/bin/sh
# Runs etr's allreduce benchmark on two ranks, beside MPI_Allreduce, from a build dir:
#
#   bench/run_allreduce.sh BUILD_DIR [etr-bench allreduce options]
#   bench/run_allreduce.sh build --max-bytes 64MiB --json out/allreduce.json
#
# BUILD_DIR/etr-mpirun carries the mpirun flags these machines need (docs/machine_notes.md).
#
# Binding: --bind-to core (Open MPI's default at np 2, written out so that it stays so).
# Measured with etr-bench allreduce, f32 sum, np 2, alternating runs on an otherwise idle
# machine; median busbw GB/s over 13-14 runs each, etr / MPI:
#              4 KiB      64 KiB     1 MiB      4 MiB      16 MiB     64 MiB     256 MiB
#   core    0.94/0.88  1.22/1.16  2.82/1.57  3.37/2.12  4.95/3.32  4.83/1.42  4.95/1.53
#   none    0.89/0.81  1.17/1.14  2.61/1.56  2.93/1.84  4.85/3.15  4.61/1.40  4.96/1.49
# Core is as good or up to ~10% better at every size, for etr and for MPI alike; the
# run-to-run spread (this VM has a fast and a slow phase: 4 KiB takes 2 us or 4.6 us, for
# both) is larger than the difference. etr's progress thread does not suffer from sharing
# its rank's core: the caller sleeps in wait() while it runs.
set -eu
if [ $# -lt 1 ] || [ ! -x "$1/etr-mpirun" ] || [ ! -x "$1/bench/etr-bench" ]; then
  echo "usage: $0 BUILD_DIR [etr-bench allreduce options]" >&2
  echo "  (BUILD_DIR must hold etr-mpirun and bench/etr-bench: build the etr-bench target)" >&2
  exit 2
fi
build=$1
shift
exec "$build/etr-mpirun" -np 2 --bind-to core "$build/bench/etr-bench" allreduce "$@"
