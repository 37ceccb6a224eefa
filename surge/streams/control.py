"""The control block: what the controller and the workers tell each other outside the data path.

Heartbeats (one timestamp per worker), the stop request, and the trainer's progress numbers
for the live display. Small, shared, written in place like every other block.
"""

from __future__ import annotations

import time

import numpy as np

from surge.streams.transport import BlockLayout, Field, Transport
from surge.tracking import timing

BLOCK = "control"

RUN, CHECKPOINT_AND_STOP, STOP = 0, 1, 2

# Indices into the progress array (written by the trainer).
PROGRESS_FIELDS = (
    "env_steps",
    "steps_per_s",
    "episode_return_mean",
    "policy_lag_mean",
    "policy_version",
    "episodes",
    "restarts",  # written by the controller: worker restarts so far in this run
    "eval_return_mean",  # the newest evaluation's mean return (NaN: none yet)
)


def control_layout(workers: int) -> BlockLayout:
    """The control block of a run of `workers` workers: the stop request, one heartbeat per worker,
    the trainer's progress numbers and every process's CPU timings."""
    return BlockLayout(
        {
            "stop": Field((1,), "<i8"),
            "heartbeat": Field((workers,), "<f8"),
            "progress": Field((len(PROGRESS_FIELDS),), "<f8"),
            # One row per worker, then one for the controller process.
            "timing": Field((workers + 1, len(timing.FIELDS)), "<f8"),
        }
    )


class Control:
    """A worker's (or the controller's) view of the control block; `worker_slot` is the worker's row
    (-1: the controller)."""

    def __init__(self, transport: Transport, worker_slot: int = -1) -> None:
        a = transport.block(BLOCK)
        self._stop = a["stop"]
        self._heartbeat = a["heartbeat"]
        self._progress = a["progress"]
        self.timing = a["timing"]
        """[workers + controller, timing.FIELDS]: CPU seconds by activity (tracking/timing.py)."""
        self._slot = worker_slot
        self.timers = timing.Timers(self.timing[worker_slot] if worker_slot >= 0 else None)

    @property
    def stop_request(self) -> int:
        """The stop requested so far: `RUN`, `CHECKPOINT_AND_STOP` or `STOP`."""
        return int(self._stop[0])

    def request_stop(self, kind: int) -> None:
        """Ask every worker to stop (`kind`: `CHECKPOINT_AND_STOP` or `STOP`); a stronger request is
        never weakened."""
        self._stop[0] = max(int(self._stop[0]), kind)

    def beat(self) -> None:
        """Stamp this worker's heartbeat with the time now, and flush its CPU timings."""
        self._heartbeat[self._slot] = time.monotonic()
        self.timers.flush()

    def note_controller_cpu(self) -> None:
        """The controller's own CPU time, so a run's total counts every process."""
        self.timing[-1, timing.CPU_TOTAL] = time.process_time()

    def reset_worker(self, slot: int) -> None:
        """A new process takes over `slot`: it is starting (no heartbeat yet)."""
        self._heartbeat[slot] = 0.0

    def last_beat(self, slot: int) -> float:
        """The monotonic time of worker `slot`'s last heartbeat (0.0: not started)."""
        return float(self._heartbeat[slot])

    def set_progress(self, **values: float) -> None:
        """Set progress numbers by name (`PROGRESS_FIELDS`), for the live display."""
        for name, value in values.items():
            self._progress[PROGRESS_FIELDS.index(name)] = value

    def progress(self) -> dict[str, float]:
        """Every progress number, by name."""
        return {name: float(self._progress[i]) for i, name in enumerate(PROGRESS_FIELDS)}

    def reset(self) -> None:
        """Start a run afresh: no stop request, no heartbeats, no progress or timings."""
        self._stop[0] = RUN
        self._heartbeat[:] = 0.0  # 0: not started yet
        self._progress[:] = 0.0
        self.timing[:] = 0.0
        self._progress[PROGRESS_FIELDS.index("episode_return_mean")] = np.nan
        self._progress[PROGRESS_FIELDS.index("eval_return_mean")] = np.nan
