"""Where the time goes: per-worker CPU seconds by activity, kept in the shared control block.

Every worker adds CPU time (`time.process_time`, so a learner's torch threads and ALE's C++
threads count) to the activity it was doing: stepping envs, running inference, learning, or
copying data between buffers; blocked waits are added as wall seconds. The row lives in
shared memory, so the controller reads every worker's totals without asking, and a run's
overhead is a number: CPU time spent outside env stepping, inference and learning.
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

clock = time.process_time


class Timers:
    """Accumulates into `row` (a [len(FIELDS)] float64 view, shared or private).

    Use: `t = timers.now()`, do work, `t = timers.add(ENV, t)` ... `timers.flush()` now and
    then to refresh `cpu_total`.
    """

    def __init__(self, row: np.ndarray | None = None) -> None:
        self.row = row if row is not None else np.zeros(len(FIELDS))
        self._cpu_start = clock()
        self._base = float(self.row[CPU_TOTAL])

    @staticmethod
    def now() -> float:
        return clock()

    def add(self, field: int, since: float) -> float:
        """Add the CPU time since `since` to `field`; returns the current clock."""
        t = clock()
        self.row[field] += t - since
        return t

    def add_wait(self, since_wall: float) -> float:
        t = time.perf_counter()
        self.row[WAIT_WALL] += t - since_wall
        return t

    def flush(self) -> None:
        self.row[CPU_TOTAL] = self._base + clock() - self._cpu_start


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
