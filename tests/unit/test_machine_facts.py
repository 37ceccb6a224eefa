"""benchmarks/machine.py's wake timing: a report's line must not hang, leak or lie."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from tests.conftest import load_benchmark


def _children() -> set[int]:
    """This process's children, zombies included (their /proc entries stay until reaped)."""
    me, found = os.getpid(), set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue  # gone meanwhile
            if int(stat.rpartition(")")[2].split()[1]) == me:
                found.add(int(entry.name))
    return found


machine = load_benchmark("machine")


@pytest.mark.skipif(not hasattr(os, "fork") or sys.platform != "linux", reason="needs fork")
def test_wake_round_trip_is_timed_and_leaves_no_child_or_descriptor() -> None:
    fds, children = set(os.listdir("/proc/self/fd")), _children()
    trip = machine.wake_round_trip_us(trips=50, rounds=2)
    # a round trip is two wakes: more than nothing, far less than a scheduler tick's worth
    assert trip is not None and 0.0 < trip < 20_000.0
    assert set(os.listdir("/proc/self/fd")) == fds
    assert _children() == children  # the echo process exited and was reaped


def test_summary_names_the_wake_only_when_timed() -> None:
    info = {
        "cpu": "X",
        "cores": 2,
        "flags": {"avx2": True},
        "torch": "t",
        "torch_kernels": "AVX2",
        "numpy": "n",
        "numpy_avx512": False,
        "precision_auto": "float32",
        "kernel_variables": {},
    }
    assert "wake" not in machine.summary(info)  # a report written before it was timed
    timed = machine.summary({**info, "wake_round_trip_us": 81.4, "cpuidle": "haltpoll"})
    assert timed.endswith("a process wake round trip 81 us (cpuidle haltpoll)")
