"""Where the time goes: per-worker CPU seconds by activity, kept in the shared control block.

Every worker adds the time of the activity it was doing (stepping envs, running inference,
learning, or copying data between buffers) and the wall seconds it blocked in waits. The row
lives in shared memory, so the controller reads every worker's totals without asking, and a
run's overhead is a number: CPU time spent outside env stepping, inference and learning.

Activities are timed by the wall clock (`time.perf_counter`, tens of nanoseconds) and turned
into CPU seconds at each flush: the process's CPU time over the window (`time.process_time`,
so a learner's torch threads and ALE's C++ threads count) is shared among the activities in
proportion to their wall time, out of the window's wall time less its waits. Reading the
process CPU clock is a system call (about 2 us on these VMs); an actor stepping one CartPole
took seven per step when every activity read it.
"""

from __future__ import annotations

import time

import numpy as np

FIELDS = ("env", "inference", "learn", "copy", "wait_wall", "cpu_total")
ENV, INFERENCE, LEARN, COPY, WAIT_WALL, CPU_TOTAL = range(len(FIELDS))
WORK = (ENV, INFERENCE, LEARN)
"""The activities a run exists for; everything else is overhead."""
SHARES = [(ENV, "env"), (INFERENCE, "inference"), (LEARN, "learn"), (COPY, "copy")]
"""Activities logged as shares of the CPU time (metrics `time_env`, ...)."""

FLUSH_EVERY_S = 0.05
"""The shortest window between two conversions to CPU seconds (`Timers.flush`)."""


def cpu_shares(
    activity_wall: list[float], window_wall: float, window_wait: float, window_cpu: float
) -> list[float]:
    """CPU seconds per activity over a window: the window's CPU time shared in proportion to
    each activity's wall time, out of the wall time it was not blocked in waits.

    A single-threaded process that was never descheduled gets its wall times back; one whose
    threads ran in parallel (CPU > busy wall) gets them scaled up, one that shared its core
    (CPU < busy wall) scaled down. Nothing is attributed beyond the window's CPU time.
    """
    busy = max(window_wall - window_wait, sum(activity_wall))
    if busy <= 0.0:
        return [0.0] * len(activity_wall)
    scale = window_cpu / busy
    return [w * scale for w in activity_wall]


class Timers:
    """Accumulates into `row` (a [len(FIELDS)] float64 view, shared or private).

    Use: `t = timers.now()`, do work, `t = timers.add(ENV, t)` ... The activities move into
    `row` as CPU seconds, and `cpu_total` is refreshed, by the first `add` or `flush` (the
    worker loop's heartbeat) at least FLUSH_EVERY_S after the previous conversion: a row
    lags its worker by about that much.
    """

    def __init__(self, row: np.ndarray | None = None) -> None:
        self.row = row if row is not None else np.zeros(len(FIELDS))
        self._base = float(self.row[CPU_TOTAL])
        self._cpu_start = time.process_time()
        self._window_cpu = self._cpu_start
        self._window_start = time.perf_counter()
        self._next_flush = self._window_start  # the first flush converts at once
        self._wall = [0.0] * len(FIELDS)  # this window's wall seconds per field

    now = staticmethod(time.perf_counter)

    def add(self, field: int, since: float) -> float:
        """Add the time since `since` (a `now()`) to `field`; returns the current clock."""
        t = time.perf_counter()
        self._wall[field] += t - since
        if t >= self._next_flush:
            self.flush()
        return t

    def add_wait(self, since_wall: float) -> float:
        """Add the wall time since `since_wall` (a `now()`) to waiting; returns the current
        clock."""
        t = time.perf_counter()
        self._wall[WAIT_WALL] += t - since_wall
        if t >= self._next_flush:
            self.flush()
        return t

    def flush(self, force: bool = False) -> None:
        """Convert the window's activities to CPU seconds in `row` (at most every
        FLUSH_EVERY_S unless `force`)."""
        wall = time.perf_counter()
        if wall < self._next_flush and not force:
            return
        cpu = time.process_time()
        pending, waited = self._wall, self._wall[WAIT_WALL]
        activities = [pending[i] for i in range(WAIT_WALL)]
        shares = cpu_shares(activities, wall - self._window_start, waited, cpu - self._window_cpu)
        for i, seconds in enumerate(shares):
            self.row[i] += seconds
        self.row[WAIT_WALL] += waited
        self.row[CPU_TOTAL] = self._base + cpu - self._cpu_start
        self._wall = [0.0] * len(FIELDS)
        self._window_cpu, self._window_start = cpu, wall
        self._next_flush = wall + FLUSH_EVERY_S


def summarize(rows: np.ndarray) -> dict[str, float]:
    """Totals over processes (rows) and the overhead share of the CPU time."""
    totals = rows.sum(axis=0)
    cpu = float(totals[CPU_TOTAL])
    work = float(sum(totals[i] for i in WORK))
    out = {f"{name}_s": float(totals[i]) for i, name in enumerate(FIELDS)}
    out["cpu_total_s"] = cpu
    out["overhead_s"] = max(0.0, cpu - work)
    out["overhead_frac"] = out["overhead_s"] / cpu if cpu > 0 else float("nan")
    return out


def shares_since(rows: np.ndarray, last_totals: np.ndarray) -> dict[str, float]:
    """Where the CPU time of every process (`rows`: the control block's timing rows) went
    since the totals `last_totals`: `time_<activity>` and `time_overhead` shares."""
    window = rows.sum(axis=0) - last_totals
    cpu = float(window[CPU_TOTAL])
    if cpu <= 0:
        return {}
    shares = {f"time_{name}": float(window[i]) / cpu for i, name in SHARES}
    work = sum(float(window[i]) for i in WORK)
    shares["time_overhead"] = max(0.0, cpu - work) / cpu
    return shares
