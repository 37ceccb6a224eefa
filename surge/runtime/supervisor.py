"""The run's life cycle, once for every runtime: start the workers, watch them, restart what
may be restarted, end the run.

A runtime (serial: objects in this process; local: processes; Ray: actors on a cluster) is
an adapter that starts, kills and observes workers (`Runtime`). The supervisor decides what
happens:

- a leader (a trainer: `ends_run`) finishes: once all have, the run ends with the first
  one's reason; until then the others are asked to save a checkpoint and finish too;
- any other worker ends (raised, died, or stopped early), or falls silent past
  `workers.heartbeat_timeout_s` (`STARTUP_TIMEOUT_S` while it starts): it is restarted in
  place if its spec allows (`restartable`, within `workers.max_restarts`, an exception only
  with `workers.restart_on_error`); else the run stops with its failure, after the leaders
  saved a checkpoint if they can (`surge resume` continues from it);
- a worker fails on a user error (a text env's bad output, say): never restarted, since the
  same input fails again; the run stops with the error's problem and fix, after the same
  checkpoint;
- Ctrl+C: the leaders are asked for a checkpoint and the run ends when they finish; a
  second Ctrl+C, or `INTERRUPT_GRACE_S` without the checkpoint, stops at once.

It keeps each worker's state, restarts and runtime columns (pid, host, node) in
`workers.json`. Nothing here names a worker kind.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from surge.config.schema import ExperimentConfig
from surge.errors import WorkerFailure, WorkerUserError, user_error_in
from surge.streams.control import Control
from surge.tracking.run_dir import WORKERS_FILE, WorkersFile
from surge.workers.graph import Graph

INTERRUPT_GRACE_S = 30.0
"""After Ctrl+C, how long the run waits for the trainer's checkpoint."""
STARTUP_TIMEOUT_S = 300.0
"""How long a worker may take to start (imports, envs, networks) before it counts as hung."""
CHECKPOINT_TIMEOUT_S = 30.0
"""How long the leaders may take to save a checkpoint when another worker failed."""
TICK_S = 0.25
"""The watch loop's period: exits are waited for this long between heartbeat checks."""


def cause_line(text: str) -> str:
    """The last non-empty line of a failure's text: for a traceback, the exception itself."""
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1].strip() if lines else "unknown cause"


@dataclass(frozen=True)
class Exit:
    """A worker's life ended."""

    name: str
    outcome: str
    """`finished` (it ran to its end: a leader's `detail` is the run's reason), `raised` (an
    exception: `detail` is its traceback) or `died` (killed, or it exited without saying
    why: `detail` says what the runtime knows)."""
    detail: str


class Runtime(Protocol):
    """What a runtime does for the supervisor."""

    def start(self, names: list[str]) -> None:
        """Start a life of each worker (its `life` is its restart count so far); record each
        with `Supervisor.started_life` (and `record`, for columns learnt later)."""
        ...

    def exits(self, timeout: float) -> list[Exit]:
        """The workers whose life ended, waiting up to `timeout` for one (the serial runtime
        runs one round of polls instead)."""
        ...

    def silences(self) -> dict[str, float | None]:
        """Seconds since each worker's last heartbeat, on its node's clock; None while it
        starts. (A runtime without heartbeats returns none.)"""
        ...

    def retire(self, name: str) -> None:
        """End a failed or hung life (kill it if it still runs) before a new one starts in
        its slot."""
        ...

    def where(self, name: str) -> str:
        """Where a worker runs, for a message (" on node 1a2b3c4d"; "" on one machine)."""
        ...

    def reset(self, name: str, restarts: int) -> None:
        """The slot of `name` is taken over by a new life (no heartbeat yet), and the run has
        had `restarts` restarts so far (the trainer logs it)."""
        ...

    def ask_to_checkpoint(self, names: list[str]) -> None:
        """Ask these leaders to save a checkpoint and finish."""
        ...

    def await_finish(self, names: list[str], timeout: float) -> bool:
        """Wait up to `timeout` for these leaders to finish; True if all did, cleanly."""
        ...

    def tick(self, final: bool = False) -> None:
        """Feed the progress display (once per watch round; `final`: the run has ended)."""
        ...


class OneMachine:
    """What the serial and local runtimes share: every worker on this machine (`where` has
    nothing to add), and one control block whose slot a worker's new life takes."""

    control: Control
    supervisor: Supervisor

    def where(self, name: str) -> str:
        return ""

    def reset(self, name: str, restarts: int) -> None:
        self.control.reset_worker(self.supervisor.slot[name])
        self.control.set_progress(restarts=restarts)


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
        self.run_dir = run_dir
        self.workers_file = WorkersFile(run_dir / WORKERS_FILE)
        self.leaders = [spec.name for spec in graph.leaders]
        self.finished: dict[str, str] = {}  # leader -> its finish reason, in finishing order

    @property
    def total_restarts(self) -> int:
        return sum(self.restarts.values())

    # ------------------------------------------------------------------ the run

    def run(self, runtime: Runtime) -> str:
        """Start every worker, watch them until the leaders have finished; the reason of the
        first leader to finish ("solved", "budget", "time", "interrupted")."""
        runtime.start([spec.name for spec in self.graph.workers])
        try:
            return self._watch(runtime)
        except WorkerFailure as failure:
            if failure.worker not in self.leaders and self._checkpoint_now(runtime):
                failure.detail += "\n(the trainer saved a checkpoint: `surge resume` continues)"
            raise
        except WorkerUserError as error:
            if error.worker not in self.leaders and self._checkpoint_now(runtime):
                kept = f"the trainer saved a checkpoint: `surge resume {self.run_dir}` continues"
                error.fix = f"{error.fix}; {kept}" if error.fix else kept
            raise

    def _watch(self, runtime: Runtime) -> str:
        while True:
            try:
                for ended in runtime.exits(TICK_S):
                    if self._ended(runtime, ended):
                        runtime.tick(final=True)
                        return next(iter(self.finished.values()))  # the first to finish
                now = time.monotonic()
                for name, silent in runtime.silences().items():
                    cause = self.silence(name, silent, now)
                    if cause is not None:
                        self._fail_or_restart(runtime, name, "hung", cause, raised=False)
                self.check_interrupt(now)
                runtime.tick()
            except KeyboardInterrupt:
                if not self.interrupt():
                    raise  # a second Ctrl+C: stop now, without waiting for the checkpoint
                runtime.ask_to_checkpoint(self._leaders_left())

    def _ended(self, runtime: Runtime, ended: Exit) -> bool:
        """Handle one ended life; True once every leader has finished."""
        name = ended.name
        if name in self.leaders and ended.outcome == "finished":
            self.record(name, "finished")
            self.finished[name] = ended.detail
            if len(self.finished) == len(self.leaders):
                return True
            runtime.ask_to_checkpoint(self._leaders_left())  # one is done: the others too
            return False
        detail = ended.detail
        if ended.outcome == "finished":  # only leaders may end before the run does
            detail = f"stopped before the run ended ({detail or 'no reason given'})"
        self._fail_or_restart(runtime, name, "failed", detail, raised=ended.outcome == "raised")
        return False

    def _fail_or_restart(
        self, runtime: Runtime, name: str, state: str, cause: str, raised: bool
    ) -> None:
        """Restart the worker in place if allowed, else stop the run with its failure."""
        self.record(name, state)
        user_error = user_error_in(name, cause)
        if user_error is not None:
            raise user_error
        if not self.may_restart(name, raised):
            raise WorkerFailure(name, cause)
        runtime.retire(name)  # the old life is gone before the new one takes the slot
        self.restarting(name, cause, runtime.where(name))
        runtime.reset(name, self.total_restarts)
        runtime.start([name])

    def _leaders_left(self) -> list[str]:
        return [name for name in self.leaders if name not in self.finished]

    def _checkpoint_now(self, runtime: Runtime) -> bool:
        """After another worker's failure: ask the leaders to save a checkpoint and finish;
        True once all have (none may have failed)."""
        left = self._leaders_left()
        if not left or not all(self.running(name) for name in left):
            return False
        runtime.ask_to_checkpoint(left)
        if not runtime.await_finish(left, CHECKPOINT_TIMEOUT_S):
            return False
        for name in left:
            self.record(name, "stopped")
        return True

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
        """Ctrl+C: True the first time (ask the leaders for a checkpoint), False after."""
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
