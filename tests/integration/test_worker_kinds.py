"""A worker kind defined here, in a test module, runs on every runtime without a runtime edit.

`watcher` subscribes to the policy's parameter stream and appends every version it loads to
`run_dir/watched.jsonl`, with a checksum of the weights. It is registered and added to the
PPO graph below (a recipe that wraps the built-in one); serial, local and Ray launch it from
its import path like any built-in kind.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from surge.streams.params import NONE, ParameterService
from surge.workers.base import Binding, RunContext
from surge.workers.graph import Edge, Graph, register_worker_kind, worker
from tests.conftest import workers_by_name

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
register_worker_kind("watcher", "tests.integration.test_worker_kinds:build_watcher")


class Watcher:
    """Logs each new parameter version it sees; never writes to any stream."""

    def __init__(self, ctx: RunContext, b: Binding) -> None:
        self.name = b.name
        self.finished = False
        self.params = ParameterService(b.transport, b.port_of_kind("versions").block)
        self.inbox = b.transport.channel(b.inbox)
        self.flat = np.zeros(ctx.n_params, np.float32)
        self.seen = NONE
        self.out = open(ctx.run_dir / "watched.jsonl", "a")  # noqa: SIM115 (closed in close)

    def poll(self, timeout: float) -> bool:
        if self.params.latest_version() <= self.seen:
            self.inbox.recv(timeout)  # the trainer's announcements wake us
            return False
        self.seen = self.params.read(self.flat)
        row = {"version": self.seen, "checksum": float(np.abs(self.flat).sum())}
        self.out.write(json.dumps(row) + "\n")
        self.out.flush()
        return True

    def close(self) -> None:
        self.out.close()


def build_watcher(ctx: RunContext, b: Binding) -> Watcher:
    return Watcher(ctx, b)


def with_watcher(ctx: RunContext) -> Graph:
    """The algorithm's own graph plus a watcher on the trainer's parameter stream."""
    from surge.recipes import build_graph

    graph = build_graph(ctx)
    params = next(s for s in graph.streams if s.kind == "versions")
    spec = worker("watcher", 0, pod=graph.leader.pod)
    return graph.with_worker(spec, {params.name: [Edge(graph.leader.name, spec.name)]})


def train_with_watcher(run_dir: str, runtime: str) -> None:
    from surge.config.load import load_config
    from surge.runtime.controller import train

    overrides = [f"runtime={runtime}", f"run_dir={run_dir}", "total_env_steps=4096"]
    cfg, _ = load_config("cartpole-ppo", [*overrides, "ppo.rollout_len=32", "log.progress=false"])
    result = train(cfg, recipe=with_watcher)
    assert result.reason == "budget", result


def _check(run_dir: Path, runtime: str) -> None:
    rows = [json.loads(line) for line in (run_dir / "watched.jsonl").read_text().splitlines()]
    versions = [r["version"] for r in rows]
    assert versions == sorted(set(versions)), versions  # each version once, in order
    assert len(versions) >= 3, versions  # the run has 4096 / 128 = 32 versions
    assert len({r["checksum"] for r in rows}) == len(rows)  # every version's weights differ
    timing = json.loads((run_dir / "timing.json").read_text())
    assert "watcher-0" in timing["processes"]
    if runtime != "serial":  # the process runtimes' supervisor lists it with the others
        watcher = workers_by_name(run_dir)["watcher-0"]
        assert watcher["state"] == "stopped" and watcher["pid"], watcher


@pytest.mark.parametrize("runtime", ["serial", "local"])
def test_a_new_worker_kind_runs_in_process_and_local(runtime: str, run_dir: Path) -> None:
    train_with_watcher(str(run_dir), runtime)
    _check(run_dir, runtime)


def test_a_new_worker_kind_runs_on_ray(run_dir: Path) -> None:
    """Ray workers import the test module by its path, as spawned processes do."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
        "OMP_NUM_THREADS": "1",
        "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
        "RAY_AUTH_MODE": "disabled",
    }
    script = (
        "from tests.integration.test_worker_kinds import train_with_watcher; "
        f"train_with_watcher({str(run_dir)!r}, 'ray')"
    )
    out = subprocess.run(
        [sys.executable, "-c", script], cwd=REPO, env=env, capture_output=True, text=True,
        timeout=300,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    _check(run_dir, "ray")
