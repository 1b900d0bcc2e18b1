#!/usr/bin/env bash
# The Python peer environment: a virtual environment at .venv/ in the repository root
# with torch (CPU use), transformers, safetensors, numpy, tensorboard, sentencepiece,
# protobuf and matplotlib, for the compatibility tests (tests/compat, label "compat"),
# comparisons against PyTorch and the plots (scripts/plot.py).
# Idempotent and quiet: when .venv/ already holds every package it prints nothing and
# does nothing. Usable on its own or sourced:
#   scripts/setup_python.sh            # create or complete .venv/
#   .venv/bin/python -c 'import torch'
#
# Interpreter: /usr/bin/python3 (Debian's, needs the python3-venv package), not a pyenv
# or other python3 that may come first on PATH: it is the same on every Debian 12
# machine, CI included, and does not change with a directory's .python-version.
# Python 3.11 caps numpy at the last release that supports it (numpy 2.5 needs 3.12);
# torch and transformers still install at their newest versions.
#
# torch: the CPU-only wheels live on download.pytorch.org (--index-url .../whl/cpu).
# When that host cannot be reached (as on the development machines), plain PyPI's torch
# is installed instead: the same CPU code (MKL on x86-64), plus several GB of CUDA
# libraries that stay unused on a machine without a GPU.
#
# Environment:
#   ETR_VENV         where the environment goes (default: <repo>/.venv)
#   ETR_PYTHON       the interpreter to build it from (default: /usr/bin/python3)
#   ETR_TORCH_INDEX  index for the CPU-only torch (default: download.pytorch.org/whl/cpu;
#                    empty: skip it and use PyPI's torch)
# pip honours its own variables as usual (PIP_FIND_LINKS, PIP_CACHE_DIR, PIP_INDEX_URL).
set -euo pipefail

ETR_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
ETR_VENV="${ETR_VENV:-$ETR_ROOT/.venv}"
ETR_PYTHON="${ETR_PYTHON:-/usr/bin/python3}"
ETR_TORCH_INDEX="${ETR_TORCH_INDEX-https://download.pytorch.org/whl/cpu}"

# Distribution names, unpinned: the newest that pip can install for this interpreter.
# .venv/etr-versions.txt records what was installed (pip freeze).
# tensorboard: its reader checks etr's event files; sentencepiece and protobuf: transformers
# loads an exported SentencePiece tokenizer; matplotlib: scripts/plot.py.
ETR_PY_PACKAGES=(torch transformers safetensors numpy tensorboard sentencepiece protobuf matplotlib)

etr_venv_complete() {
  [[ -x "$ETR_VENV/bin/python" ]] || return 1
  # Looks the distributions up without importing them (importing torch takes seconds).
  "$ETR_VENV/bin/python" - "${ETR_PY_PACKAGES[@]}" >/dev/null 2>&1 <<'EOF'
import importlib.metadata, sys
for name in sys.argv[1:]:
    importlib.metadata.version(name)
EOF
}

etr_setup_python() {
  etr_venv_complete && return 0

  if [[ ! -x "$ETR_VENV/bin/python" ]]; then
    if ! "$ETR_PYTHON" -c 'import venv, ensurepip' >/dev/null 2>&1; then
      echo "etr python: $ETR_PYTHON cannot create virtual environments; install python3-venv" \
           "(apt-get install python3-venv) or set ETR_PYTHON to another interpreter" >&2
      return 1
    fi
    echo "etr python: creating $ETR_VENV from $ETR_PYTHON ($("$ETR_PYTHON" --version 2>&1))"
    "$ETR_PYTHON" -m venv "$ETR_VENV"
    "$ETR_VENV/bin/python" -m pip install -q --upgrade pip
  fi
  local pip=("$ETR_VENV/bin/python" -m pip install -q --disable-pip-version-check)

  if ! "$ETR_VENV/bin/python" -c 'import importlib.metadata as m; m.version("torch")' \
       >/dev/null 2>&1; then
    echo "etr python: installing torch (a download of several hundred MB or more; minutes)"
    # --retries 0 --timeout 15: an unreachable CPU index fails in seconds, not minutes.
    if [[ -n "$ETR_TORCH_INDEX" ]] &&
       "${pip[@]}" --retries 0 --timeout 15 --index-url "$ETR_TORCH_INDEX" torch 2>/dev/null; then
      echo "etr python: torch from $ETR_TORCH_INDEX (CPU-only build)"
    else
      [[ -n "$ETR_TORCH_INDEX" ]] &&
        echo "etr python: $ETR_TORCH_INDEX cannot be reached; installing PyPI's torch" \
             "(with its CUDA libraries)"
      "${pip[@]}" torch
    fi
  fi
  echo "etr python: installing ${ETR_PY_PACKAGES[*]}"
  "${pip[@]}" "${ETR_PY_PACKAGES[@]}"
  "$ETR_VENV/bin/python" -m pip freeze --all >"$ETR_VENV/etr-versions.txt"
  echo "etr python: ready: $(grep -E '^(torch|transformers|safetensors|numpy)==' \
                             "$ETR_VENV/etr-versions.txt" | tr '\n' ' ')"
}

# Sourced: define the functions and leave it to the caller; run: set up now.
if [[ "${BASH_SOURCE[0]}" == "$0" ]]; then
  etr_setup_python
fi
