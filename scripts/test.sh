#!/usr/bin/env bash
# Set everything up, then run the checks CI runs: lint, format, types, and the test suite
# (unit, integration and the short learning tier; `-m slow` tests belong to benchmarks).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export OMP_NUM_THREADS=1
# The whole tree, docs' Python code blocks included.
.venv/bin/ruff check .
.venv/bin/ruff format --check .
.venv/bin/mypy surge
# The documentation site, strictly: a broken link or anchor, or a docstring mkdocstrings cannot
# render, fails the build. Offline: nothing is fetched. tests/unit/test_docs_site.py reads
# its search index.
NO_MKDOCS_2_WARNING=1 .venv/bin/mkdocs build --strict --quiet --site-dir site
# pytest exits 5 when it collected no test: that must fail, and with `set -e` it does.
# The slowest tests are listed at the end: the suite's budget is about 15 minutes on 2 cores.
.venv/bin/python -m pytest -q --durations=20 "$@"
# The numeric tests once more with AVX-512 off in torch, numpy, MKL and oneDNN: a tolerance
# that holds only with the widest kernels fails here on any CPU (tests/numerics.py).
.venv/bin/python -m tests.numerics
