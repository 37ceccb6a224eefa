"""What machine a benchmark ran on: the line every report starts with.

Machines of one kind differ in CPU features (some have AVX-512 and native bf16, others AVX2
only), and the kernels torch, numpy, MKL and oneDNN pick follow them (or the variables that
cap them). A number means little without them, so each report names the CPU, its cores, the
flags that change which kernels run, the libraries' versions and kernel sets, and which
precision surge's `precision: auto` takes there.

It also times how fast one process wakes another: a pipe round trip between two processes
that each sleep in `select` until the other writes. Remote inference (actor -> policy
worker -> actor) pays it on every wait that sleeps, and on virtual machines it varies tenfold
with how the guest idles (a guest that halts at once makes the host wake it; one that polls
before halting, haltpoll's `guest_halt_poll_ns`, wakes in microseconds), so the rate of
`cartpole-ppo`-like runs moves with it.

    python benchmarks/machine.py          # print it
"""

from __future__ import annotations

import os
import platform
import select
import statistics
import time
from pathlib import Path
from typing import Any

FLAGS = ("avx2", "fma", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile")
"""CPU flags that decide which kernels run (AVX2 or AVX-512 paths, native bf16)."""

KERNEL_VARIABLES = (
    "ATEN_CPU_CAPABILITY",
    "NPY_DISABLE_CPU_FEATURES",
    "MKL_ENABLE_INSTRUCTIONS",
    "ONEDNN_MAX_CPU_ISA",
)
"""Environment variables that cap those kernels (tests/numerics.py sets them all)."""


def _cpuinfo() -> tuple[str, set[str]]:
    """(model name with family/model numbers, flags) of the first CPU in /proc/cpuinfo."""
    fields: dict[str, str] = {}
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if not key.strip():
                break  # the end of the first CPU's block
            fields.setdefault(key.strip(), value.strip())
    except OSError:
        return platform.processor() or platform.machine(), set()
    model = fields.get("model name", platform.machine())
    if "cpu family" in fields:
        model += f" (family {fields['cpu family']}, model {fields.get('model', '?')})"
    return model, set(fields.get("flags", "").split())


def wake_round_trip_us(trips: int = 400, rounds: int = 5) -> float | None:
    """Median over `rounds` of the mean pipe round trip, in microseconds, between this
    process and a forked one, both sleeping in `select` until the other writes; None where
    there is no fork."""
    if not hasattr(os, "fork"):
        return None
    ping_r, ping_w = os.pipe()
    pong_r, pong_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the echo: answer every byte until the parent closes its end
        try:
            os.close(ping_w)
            while select.select([ping_r], [], []) and os.read(ping_r, 1):
                os.write(pong_w, b"x")
        finally:
            os._exit(0)
    os.close(ping_r)
    os.close(pong_w)
    means = []
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(trips):
            os.write(ping_w, b"x")
            select.select([pong_r], [], [])
            os.read(pong_r, 1)
        means.append((time.perf_counter() - start) / trips * 1e6)
    os.close(ping_w)
    os.waitpid(pid, 0)
    os.close(pong_r)
    return statistics.median(means)


def _idle() -> str | None:
    """The cpuidle driver, with the guest's halt-polling limit where it is haltpoll."""
    driver = Path("/sys/devices/system/cpu/cpuidle/current_driver")
    poll_ns = Path("/sys/module/haltpoll/parameters/guest_halt_poll_ns")
    try:
        name = driver.read_text().strip()
    except OSError:
        return None
    if name == "haltpoll" and poll_ns.exists():
        name += f" (guest_halt_poll_ns={poll_ns.read_text().strip()})"
    return name


def describe() -> dict[str, Any]:
    """The machine and library facts a benchmark result depends on."""
    import numpy as np
    import torch

    from surge.devices import native_bf16

    model, flags = _cpuinfo()
    try:
        from numpy._core._multiarray_umath import __cpu_features__ as npy_features
    except ImportError:  # numpy < 2
        from numpy.core._multiarray_umath import __cpu_features__ as npy_features
    return {
        "cpu": model,
        "cores": os.cpu_count(),
        "usable_cores": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "flags": {flag: flag in flags for flag in FLAGS},
        "torch": torch.__version__,
        "torch_kernels": torch.backends.cpu.get_cpu_capability(),
        "numpy": np.__version__,
        # AVX512_SKX: a dispatch target of every numpy 2 (X86_V4's part from 2.4), so it reads
        # False when NPY_DISABLE_CPU_FEATURES turned AVX-512 off; AVX512F stays the CPU's flag
        "numpy_avx512": bool(npy_features.get("AVX512_SKX")),
        "precision_auto": "bfloat16" if native_bf16() else "float32",
        "kernel_variables": {k: os.environ[k] for k in KERNEL_VARIABLES if k in os.environ},
        "python": platform.python_version(),
        "kernel": platform.release(),
        "cpuidle": _idle(),
        "wake_round_trip_us": wake_round_trip_us(),
    }


def summary(info: dict[str, Any] | None = None) -> str:
    """One line for the top of a report."""
    info = describe() if info is None else info
    flags = ", ".join(f for f, on in info["flags"].items() if on) or "none of " + "/".join(FLAGS)
    caps = "; ".join(f"{k}={v}" for k, v in info["kernel_variables"].items())
    return (
        f"CPU: {info['cpu']}, {info['cores']} cores ({flags}); torch {info['torch']} "
        f"({info['torch_kernels']} kernels), numpy {info['numpy']} "
        f"(AVX-512 {'on' if info['numpy_avx512'] else 'off'}); `precision: auto` = "
        f"{info['precision_auto']}" + (f"; capped by {caps}" if caps else "") + _wake(info)
    )


def _wake(info: dict[str, Any]) -> str:
    """The wake round trip, for reports (absent from those written before it was timed)."""
    trip = info.get("wake_round_trip_us")
    if trip is None:
        return ""
    idle = info.get("cpuidle")
    return f"; a process wake round trip {trip:.0f} us" + (f" (cpuidle {idle})" if idle else "")


if __name__ == "__main__":
    print(summary())
