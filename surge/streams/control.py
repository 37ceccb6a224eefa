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
        return int(self._stop[0])

    def request_stop(self, kind: int) -> None:
        self._stop[0] = max(int(self._stop[0]), kind)

    def beat(self) -> None:
        self._heartbeat[self._slot] = time.monotonic()
        self.timers.flush()

    def note_controller_cpu(self) -> None:
        """The controller's own CPU time, so a run's total counts every process."""
        self.timing[-1, timing.CPU_TOTAL] = time.process_time()

    def reset_worker(self, slot: int) -> None:
        """A new process takes over `slot`: it is starting (no heartbeat yet)."""
        self._heartbeat[slot] = 0.0

    def last_beat(self, slot: int) -> float:
        return float(self._heartbeat[slot])

    def set_progress(self, **values: float) -> None:
        for name, value in values.items():
            self._progress[PROGRESS_FIELDS.index(name)] = value

    def progress(self) -> dict[str, float]:
        return {name: float(self._progress[i]) for i, name in enumerate(PROGRESS_FIELDS)}

    def reset(self) -> None:
        self._stop[0] = RUN
        self._heartbeat[:] = 0.0  # 0: not started yet
        self._progress[:] = 0.0
        self.timing[:] = 0.0
        self._progress[PROGRESS_FIELDS.index("episode_return_mean")] = np.nan
        self._progress[PROGRESS_FIELDS.index("eval_return_mean")] = np.nan
