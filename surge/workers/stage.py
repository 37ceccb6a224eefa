"""The stage worker: rows of a block come in one hand-over state and leave in the next.

Stages between the writers of rows and their reader (LLM RL's reward and reference workers,
the replay worker) share one loop: find the rows in a state the stage takes, do its work on
them, mark each in the state it gives (after the work's last write, so the next stage never
reads half a row), and wake the next stage's reader. The states live in shared memory
beside the rows, written only by each row's current owner, so a stage keeps no state of its
own: a new life after a crash finds the rows it had not finished in the state it takes, and
carries on. Channel records only wake; the states are the truth.

A stage may have several hand-overs (the replay: trained rows back to free, free rows to
filled) and work that arrives another way than rows (`intake`: the replay's segments).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from surge.streams.transport import Channel
from surge.tracking.timing import ENV
from surge.workers.base import Binding


class RowStates(Protocol):
    """A block's rows and their hand-over states (streams/rollouts.py `RolloutRows`)."""

    def in_state(self, state: int) -> list[int]: ...

    def set_state(self, r: int, state: int) -> None: ...


@dataclass
class HandOver:
    """Rows in state `takes` are worked on and given in state `gives`."""

    takes: int
    gives: int
    work: Callable[[list[int]], list[int]]
    """Does the work on the rows it is given; returns those it finished (all, or fewer when
    it must wait, as a rate limiter may)."""
    downstream: Channel | None = None
    """Woken with each finished row's number (None: nobody waits on these)."""


class StageWorker:
    """The loop of a stage: its `intake`, then each hand-over in turn; it waits on its inbox
    when there was nothing to do."""

    activity = ENV
    """The timing activity its work counts as (tracking/timing.py)."""

    def __init__(self, b: Binding, rows: RowStates, hand_overs: list[HandOver]) -> None:
        self.name = b.name
        self.finished = False
        self.timers = b.control.timers
        self.rows = rows
        self.hand_overs = hand_overs
        self.inbox = b.transport.channel(b.inbox)

    def poll(self, timeout: float) -> bool:
        clock = self.timers.now()
        done = self.intake()
        for h in self.hand_overs:
            todo = self.rows.in_state(h.takes)
            if not todo:
                continue
            for r in h.work(todo):
                self.rows.set_state(r, h.gives)  # after every write of the row
                done = True
                if h.downstream is not None:
                    h.downstream.send(r)
        if done:
            self.timers.add(self.activity, clock)
            return True
        waited = time.perf_counter()
        self.inbox.recv(timeout)
        self.timers.add_wait(waited)
        return False

    def intake(self) -> bool:
        """Work that arrives another way than rows; True if there was some."""
        return False

    def close(self) -> None:
        pass


def every_row(work: Callable[[list[int]], object]) -> Callable[[list[int]], list[int]]:
    """A hand-over's work that always finishes every row it is given."""

    def finish_all(rows: list[int]) -> list[int]:
        work(rows)
        return rows

    return finish_all
