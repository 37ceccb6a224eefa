"""Shared helpers: running the real `surge` command, and checking nothing is left behind."""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

import psutil
import pytest

from surge.streams.transport import shm_root

if TYPE_CHECKING:
    from surge.config.schema import ExperimentConfig
    from surge.streams.transport import InlineTransport
    from surge.workers.base import RunContext
    from surge.workers.graph import Graph


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """`cuda` tests are skipped, saying why, where this machine shows no CUDA GPU."""
    from surge.devices import visible_gpus

    if any(item.get_closest_marker("cuda") for item in items) and visible_gpus() == 0:
        skip = pytest.mark.skip(reason="needs a CUDA GPU: none is visible here")
        for item in items:
            if item.get_closest_marker("cuda"):
                item.add_marker(skip)


SURGE = [sys.executable, "-m", "surge"]
# Short runs: small segments, frequent logs, no live display.
QUICK = ["ppo.rollout_len=32", "log.interval_s=0", "log.progress=false"]


def run_surge(
    *args: str, timeout: float = 120, **kwargs: object
) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.run(
        [*SURGE, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        **kwargs,  # type: ignore[call-overload]
    )


def worker_processes(run_dir: Path) -> list[psutil.Process]:
    """Live processes whose title names this run (worker titles are `surge NAME [RUN]`)."""
    tag = f"[{run_dir.name}]"
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        try:
            if tag in " ".join(proc.info["cmdline"] or []):
                found.append(proc)
        except psutil.Error:
            continue
    return found


def shm_dirs_of(pid: int) -> list[Path]:
    return list(shm_root().glob(f"surge-{pid}-*"))


def interrupt(proc: subprocess.Popen[str]) -> None:
    """Ctrl+C a running `surge` (it saves a checkpoint and exits 130); killed if it has not
    exited within a minute."""
    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def load_benchmark(name: str) -> ModuleType:
    """Import benchmarks/NAME.py by its path. Putting benchmarks/ on sys.path would let its
    scripts shadow installed packages for every later test in the session."""
    path = Path(__file__).resolve().parents[1] / "benchmarks" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"benchmark_{name}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while being built
    spec.loader.exec_module(module)
    return module


def wait_for(predicate: object, timeout: float, interval: float = 0.1) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():  # type: ignore[operator]
            return True
        time.sleep(interval)
    return False


def sketch_graph(cfg: ExperimentConfig) -> Graph:
    """The graph `surge graph` draws for `cfg` (its algorithm's, nothing prepared on disk)."""
    from surge.recipes import algorithm_of

    algorithm = algorithm_of(cfg)
    return algorithm.graph(algorithm.prepare(cfg, run_dir=None, checkpoint=None))


def in_process_streams(
    cfg: ExperimentConfig, run_dir: Path
) -> tuple[Graph, RunContext, InlineTransport]:
    """(graph, run context, transport) of `cfg` as the serial runtime builds them, the
    control block reset: for tests that start (`start_worker`) and poll workers themselves."""
    from surge.recipes import algorithm_of
    from surge.streams.control import Control
    from surge.streams.transport import InlineTransport

    algorithm = algorithm_of(cfg)
    ctx = algorithm.prepare(cfg, run_dir, checkpoint=None)
    graph = algorithm.graph(ctx)
    transport = InlineTransport(graph.all_layouts(), graph.channels)
    Control(transport).reset()
    return graph, ctx, transport


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    # Worker process titles carry the run directory's name (`surge actor-0 [NAME]`), and the
    # tests find a run's processes by it: a name no other run on the machine has.
    return tmp_path / f"run-{uuid.uuid4().hex[:8]}"


def workers_by_name(run_dir: Path) -> dict[str, dict[str, Any]]:
    """The run's worker table (workers.json: state, pid, node, restarts), by worker name."""
    rows = json.loads((run_dir / "workers.json").read_text())["workers"]
    return {w["name"]: w for w in rows}


def metrics_so_far(run_dir: Path) -> list[dict[str, object]]:
    """metrics.jsonl records written so far (none before the first log)."""
    from surge.tracking.metrics import read_metrics

    return read_metrics(run_dir) if (run_dir / "metrics.jsonl").exists() else []
