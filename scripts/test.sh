#!/usr/bin/env bash
# Set everything up, then run the checks CI runs: lint, format, types, and the test suite
# (unit, integration and the short learning tier; `-m slow` tests belong to benchmarks).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export OMP_NUM_THREADS=1
.venv/bin/ruff check surge tests benchmarks examples
.venv/bin/ruff format --check surge tests benchmarks examples
.venv/bin/mypy surge
# pytest exits 5 when it collected no test: that must fail, and with `set -e` it does.
.venv/bin/python -m pytest -q "$@"
