#!/usr/bin/env bash
# Set up a fresh machine: a virtual environment in .venv with kernelsmith and what its main job needs.
#   bash scripts/setup.sh [EXTRA ...]   EXTRA: test (pytest, ruff), service (FastAPI, Ray), coach (TRL...),
#   kernelbench (einops, for KernelBench tasks that import it), dev (all)
# The extras may also come from $KERNELSMITH_EXTRAS (comma-separated). Without any, only the core package is
# installed: the evolution and the referee need none of the extras' gigabytes.
# torch 2.13.0 (CPU build) comes from the local wheel cache where one exists; any torch>=2.4 works.
set -euo pipefail
EXTRAS=$(IFS=,; echo "${*:-${KERNELSMITH_EXTRAS:-}}" | tr ' ' ',')
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
# The referee's sandbox: bubblewrap (Debian/Ubuntu package `bubblewrap`). Without it every verdict says
# `isolation: none` and the strict policy certifies nothing.
if ! command -v bwrap >/dev/null; then
  SUDO=""; if [ "$(id -u)" != 0 ] && command -v sudo >/dev/null; then SUDO="sudo"; fi
  if command -v apt-get >/dev/null && { [ "$(id -u)" = 0 ] || [ -n "$SUDO" ]; }; then
    ($SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq bubblewrap) >/dev/null \
      || echo "warning: could not install bubblewrap; candidates will run without OS isolation" >&2
  else
    echo "warning: bubblewrap (bwrap) is not installed; candidates will run without OS isolation" >&2
  fi
fi
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip
# Pin the torch build first so nothing pulls a multi-GB CUDA wheel on a CPU machine.
.venv/bin/python -m pip install -q "torch==2.13.0" || .venv/bin/python -m pip install -q torch
# (setuptools' boxed notice that an editable install follows the checkout is what it is for: not shown)
export PYTHONWARNINGS="ignore:Editable installation"
if [ -n "$EXTRAS" ]; then
  .venv/bin/python -m pip install -q -e ".[$EXTRAS]"
else
  .venv/bin/python -m pip install -q -e .
fi
.venv/bin/python -c "import kernelsmith, torch, triton; print('kernelsmith', kernelsmith.__version__, '| torch', torch.__version__, '| triton', triton.__version__)"
