"""The watch policy every runtime shares: which failures are restarted, when a silent worker
counts as hung, what `workers.json` says, how long Ctrl+C waits for the checkpoint.

The local runtime (processes) and the Ray runtime (actors on a cluster) differ only in how
they start, kill and observe a worker; they ask the supervisor what to do about it. Nothing
here names a worker kind: a worker spec says whether it may be restarted in place
(`restartable`) and whether its finishing ends the run (`ends_run`, the trainer).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

from surge.config.schema import ExperimentConfig
from surge.errors import WorkerFailure
from surge.tracking.run_dir import WorkersFile
from surge.workers.graph import Graph

INTERRUPT_GRACE_S = 30.0
"""After Ctrl+C, how long the run waits for the trainer's checkpoint."""
STARTUP_TIMEOUT_S = 300.0
"""How long a worker may take to start (imports, envs, networks) before it counts as hung."""


def cause_line(text: str) -> str:
    """The last non-empty line of a failure's text: for a traceback, the exception itself."""
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1].strip() if lines else "unknown cause"


class Supervisor:
    """Restart counts, states and start times of a graph's workers, and the rules on them."""

    def __init__(self, cfg: ExperimentConfig, graph: Graph, run_dir: Path) -> None:
        self.cfg = cfg
        self.graph = graph
        self.specs = {spec.name: spec for spec in graph.workers}
        self.slot = {spec.name: slot for slot, spec in enumerate(graph.workers)}
        self.restarts = {spec.name: 0 for spec in graph.workers}
        self.states: dict[str, str] = {}
        self.started: dict[str, float] = {}  # when each worker's current life started
        self.columns: dict[str, dict[str, Any]] = {}  # pid, host, node: what the runtime knows
        self.interrupted_at: float | None = None
        self.workers_file = WorkersFile(run_dir / "workers.json")

    @property
    def total_restarts(self) -> int:
        return sum(self.restarts.values())

    # ------------------------------------------------------------------ the worker table

    def started_life(self, name: str, state: str = "running", **columns: Any) -> None:
        """A new life of `name` has started (its pid, host... in `columns`)."""
        self.started[name] = time.monotonic()
        self.record(name, state, **columns)

    def record(self, name: str, state: str, **columns: Any) -> None:
        """Set a worker's state (and runtime columns) and rewrite workers.json."""
        self.states[name] = state
        self.columns.setdefault(name, {}).update(columns)
        self.workers_file.write(
            [
                {
                    "name": spec.name,
                    **{"pid": None, "host": None, **self.columns.get(spec.name, {})},
                    "state": self.states.get(spec.name, "pending"),
                    "restarts": self.restarts[spec.name],
                }
                for spec in self.graph.workers
            ]
        )

    def running(self, name: str) -> bool:
        return self.states.get(name) == "running"

    # ------------------------------------------------------------------ the rules

    def may_restart(self, name: str, raised: bool) -> bool:
        """Whether a failed worker gets a new life: restartable kinds, within
        `workers.max_restarts`, an exception only with `workers.restart_on_error`, and never
        while the run is stopping after Ctrl+C."""
        w = self.cfg.workers
        return (
            self.specs[name].restartable
            and self.restarts[name] < w.max_restarts
            and (not raised or w.restart_on_error)
            and self.interrupted_at is None
        )

    def restarting(self, name: str, cause: str, where: str = "") -> None:
        """Count a restart and say so on the terminal."""
        self.restarts[name] += 1
        print(
            f"surge: {name} failed ({cause_line(cause)}); restarting it{where} "
            f"({self.restarts[name]}/{self.cfg.workers.max_restarts})",
            file=sys.stderr,
        )

    def silence(self, name: str, silent_s: float | None, now: float) -> str | None:
        """Why a running worker counts as hung, or None: `silent_s` is the time since its
        last heartbeat (None: it has not finished starting yet)."""
        if not self.running(name):
            return None
        if silent_s is None:
            if now - self.started[name] > STARTUP_TIMEOUT_S:
                return f"did not finish starting in {STARTUP_TIMEOUT_S:g} s"
            return None
        timeout = self.cfg.workers.heartbeat_timeout_s
        if silent_s > timeout:
            return (
                f"no heartbeat for {silent_s:.0f} s (workers.heartbeat_timeout_s={timeout:g}): "
                "the worker is hung, e.g. inside env.step()"
            )
        return None

    def interrupt(self) -> bool:
        """Ctrl+C: True the first time (ask the leader for a checkpoint), False after."""
        if self.interrupted_at is not None:
            return False
        self.interrupted_at = time.monotonic()
        return True

    def check_interrupt(self, now: float) -> None:
        """After Ctrl+C, give up on the checkpoint once the grace time is over."""
        if self.interrupted_at is not None and now - self.interrupted_at > INTERRUPT_GRACE_S:
            raise WorkerFailure(
                self.graph.leader.name, "did not save a checkpoint after Ctrl+C in time"
            )
