#!/usr/bin/env bash
# The test command: lint, then the CPU test suite (Triton interpreter). GPU tests skip without CUDA.
set -euo pipefail
cd "$(dirname "$0")/.."
.venv/bin/ruff check kernelsmith tests benchmarks
.venv/bin/python -m pytest -q "$@"
