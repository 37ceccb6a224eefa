"""Activity timing: wall-clock activities converted to CPU seconds per flush window."""

from __future__ import annotations

import time

import numpy as np
import pytest

from surge.tracking import timing
from surge.tracking.timing import COPY, CPU_TOTAL, ENV, LEARN, WAIT_WALL, Timers, cpu_shares


def test_cpu_shares_single_thread_keeps_wall_times() -> None:
    # 1 s window, 0.2 s waiting, 0.8 s CPU: the busy wall is all CPU
    assert cpu_shares([0.5, 0.0, 0.0, 0.3], 1.0, 0.2, 0.8) == pytest.approx([0.5, 0, 0, 0.3])


def test_cpu_shares_scales_by_cpu_per_busy_wall() -> None:
    # two threads busy through a learn phase: 1.8 CPU s over 1 busy wall s
    assert cpu_shares([0.9, 0.0, 0.0, 0.1], 1.0, 0.0, 1.8) == pytest.approx([1.62, 0, 0, 0.18])
    # a shared core: half the busy wall was CPU
    assert cpu_shares([0.6, 0.2, 0.0, 0.0], 1.0, 0.2, 0.4) == pytest.approx([0.3, 0.1, 0, 0])
    # activities never get more than the window's CPU, even if the clocks disagree
    assert sum(cpu_shares([0.7, 0.7], 1.0, 0.0, 1.0)) == pytest.approx(1.0)
    assert cpu_shares([0.0, 0.0], 0.0, 0.0, 0.0) == [0.0, 0.0]


def _spin(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def test_timers_attribute_busy_cpu_and_wall_waits(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(timing, "FLUSH_EVERY_S", 10.0)  # one window, converted by hand
    row = np.zeros(len(timing.FIELDS))
    timers = Timers(row)
    timers.flush(force=True)
    t = timers.now()
    _spin(0.06)
    t = timers.add(ENV, t)
    _spin(0.02)
    timers.add(COPY, t)
    waited = time.perf_counter()
    time.sleep(0.05)
    timers.add_wait(waited)
    assert row[ENV] == 0.0  # within FLUSH_EVERY_S of the last conversion: still pending
    timers.flush(force=True)
    cpu = row[CPU_TOTAL]
    assert row[WAIT_WALL] == pytest.approx(0.05, abs=0.02)
    # spinning is CPU: env about 3x copy, the two together at most the CPU spent
    assert row[ENV] > 0.0 and row[COPY] > 0.0
    assert row[ENV] / row[COPY] == pytest.approx(3.0, rel=0.35)
    assert row[ENV] + row[COPY] <= cpu + 1e-9
    assert row[LEARN] == 0.0


def test_rows_are_converted_once_per_window(monkeypatch: pytest.MonkeyPatch) -> None:
    # a window long enough that a busy machine's stall cannot end it early
    monkeypatch.setattr(timing, "FLUSH_EVERY_S", 0.5)
    timers = Timers()
    timers.flush()  # the first converts at once
    t = timers.now()
    _spin(0.01)
    timers.add(ENV, t)
    timers.flush()  # within FLUSH_EVERY_S: kept pending
    assert timers.row[ENV] == 0.0
    t = timers.now()
    _spin(timing.FLUSH_EVERY_S)
    timers.add(ENV, t)  # an add past the window converts without a flush
    assert timers.row[ENV] > 0.0
