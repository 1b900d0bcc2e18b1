#!/usr/bin/env bash
# Runs a compat test's Python script with the peer environment's interpreter, or reports
# the test as skipped (exit 77, SKIP_RETURN_CODE in tests/compat/CMakeLists.txt) when
# the environment has not been created, or its setup did not finish (a download that
# failed leaves .venv/ without some of the packages: scripts/setup_python.sh's
# etr_venv_complete decides). Decided when the test runs, not at configure time, so
# creating .venv/ later needs no re-configure.
#
# Usage: run_in_venv.sh <venv dir> <script.py> [arguments...]
set -eu
venv=$1
shift
if [ ! -x "$venv/bin/python" ]; then
  echo "skipped: no Python peer environment at $venv; create it with scripts/setup_python.sh"
  exit 77
fi
export ETR_VENV=$venv
source "$(dirname "$0")/../../scripts/setup_python.sh"
if ! etr_venv_complete; then
  echo "skipped: the Python peer environment at $venv lacks some of ${ETR_PY_PACKAGES[*]}" \
       "(its setup did not finish); complete it with scripts/setup_python.sh"
  exit 77
fi
exec "$venv/bin/python" "$@"
