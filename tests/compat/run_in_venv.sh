#!/bin/sh
# Runs a compat test's Python script with the peer environment's interpreter, or reports
# the test as skipped (exit 77, SKIP_RETURN_CODE in tests/compat/CMakeLists.txt) when
# the environment has not been created. Decided when the test runs, not at configure
# time, so creating .venv/ later needs no re-configure.
#
# Usage: run_in_venv.sh <venv dir> <script.py> [arguments...]
set -eu
venv=$1
shift
if [ ! -x "$venv/bin/python" ]; then
  echo "skipped: no Python peer environment at $venv; create it with scripts/setup_python.sh"
  exit 77
fi
exec "$venv/bin/python" "$@"
