"""Benchmark scripts run as `python benchmarks/X.py`, which puts benchmarks/ first on
sys.path: a script named like an installed package (it was once `mujoco.py`) would then be
imported in that package's place, by the script's own imports or by Gymnasium's."""

from __future__ import annotations

import importlib.machinery
import sys
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def test_no_benchmark_script_shadows_an_installed_module() -> None:
    scripts = sorted(p.stem for d in (BENCHMARKS, BENCHMARKS / "peers") for p in d.glob("*.py"))
    assert scripts, f"no scripts found under {BENCHMARKS}"
    # Searched on sys.path itself, not in sys.modules: a test may have loaded a benchmark
    # script as a module by its path (test_llm_pipeline_sim does).
    path = [
        p for p in sys.path if Path(p or ".").resolve() not in (BENCHMARKS, BENCHMARKS / "peers")
    ]
    shadowing = [
        name
        for name in scripts
        if name in sys.stdlib_module_names
        or name in sys.builtin_module_names
        or importlib.machinery.PathFinder.find_spec(name, path) is not None
    ]
    assert not shadowing, f"rename these benchmark scripts: {shadowing}"
