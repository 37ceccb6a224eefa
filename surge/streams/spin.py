"""Polling shared memory briefly before sleeping on a channel.

An actor waiting for its policy worker's answer, or a policy worker waiting for the next
request, sleeps in `select` on its channel, and the peer's write wakes it. A sleep costs
more than a cheap answer takes: the writer's syscall must wake the sleeper, and the
scheduler must run it again, each of these tens of microseconds on a virtual machine. So
a waiter first polls the answer where it lands (the inference slots' ids) for up to a
budget (`workers.inference_spin_us`), and sleeps only when that runs out.

It polls only while waits are short. A wait that outlasts the budget (the peer is slow,
shares this core, or itself waits for the trainer) makes the next wait sleep at once, and
a sleep that ends within the budget turns polling back on. So a run whose waits are long
(a CNN policy, more busy processes than cores) loses at most one budget per long wait,
and one whose waits are short (an MLP policy and a cheap env) hardly sleeps at all.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


class Spin:
    def __init__(self, budget_s: float) -> None:
        if budget_s < 0:
            raise ValueError(f"a spin budget cannot be negative, got {budget_s}")
        self.budget_s = budget_s
        self._short = budget_s > 0  # the last wait ended within the budget
        self.polls = 0  # waits answered while polling (for tests and profiling)
        self.sleeps = 0  # waits that slept

    def poll(self, check: Callable[[], T]) -> T | None:
        """`check`'s first truthy result within the budget; None when the budget ran out or
        polling is off (the caller then sleeps and reports how long with `slept`)."""
        if not self._short:
            return None
        now = time.perf_counter
        deadline = now() + self.budget_s
        while True:
            found = check()
            if found:
                self.polls += 1
                return found
            if now() >= deadline:
                self._short = False
                return None

    def slept(self, seconds: float) -> None:
        """The caller slept `seconds` for what `poll` did not find: poll again next time
        only if that was within the budget."""
        self.sleeps += 1
        self._short = self.budget_s > 0 and seconds < self.budget_s


def polling(budget_s: float, concurrent: bool) -> Spin:
    """A `Spin` of `budget_s`, or one that never polls where nothing can change while it
    would: the peers run in this thread (`Channel.concurrent` false: the serial runtime), or
    this process may use one CPU only, so a peer runs only once it sleeps."""
    affinity = getattr(os, "sched_getaffinity", None)  # absent on macOS
    cpus = len(affinity(0)) if affinity else (os.cpu_count() or 1)
    return Spin(budget_s if concurrent and cpus > 1 else 0.0)
