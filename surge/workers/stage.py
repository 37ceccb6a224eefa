"""The stage worker: rows of a block come in one hand-over state and leave in the next.

Stages between the writers of rows and their reader (LLM RL's reward and reference workers,
the replay worker) share one loop: find the rows in the state the stage takes, do its work
on them, mark each in the state it gives (after the work's last write, so the next stage
never reads half a row), and wake the next stage's reader. The states live in shared memory
beside the rows, written only by each row's current owner, so a stage keeps no state of its
own: a new life after a crash finds the rows it had not finished in the state it takes, and
carries on. Channel records only wake; the states are the truth.
"""

from __future__ import annotations

import time
from typing import Protocol

from surge.streams.transport import Channel
from surge.tracking.timing import ENV
from surge.workers.base import Binding


class RowStates(Protocol):
    """A block's rows and their hand-over states (streams/rollouts.py `RolloutRows`)."""

    def in_state(self, state: int) -> list[int]: ...

    def set_state(self, r: int, state: int) -> None: ...


class StageWorker:
    """Takes rows in state `takes`, works on them (`work`), gives them in state `gives` and
    wakes `downstream` with each row's number."""

    activity = ENV
    """The timing activity its work counts as (tracking/timing.py)."""

    def __init__(
        self, b: Binding, rows: RowStates, takes: int, gives: int, downstream: str
    ) -> None:
        self.name = b.name
        self.finished = False
        self.timers = b.control.timers
        self.rows = rows
        self.takes, self.gives = takes, gives
        self.downstream: Channel = b.transport.channel(downstream)
        self.inbox = b.transport.channel(b.inbox)

    def poll(self, timeout: float) -> bool:
        todo = self.rows.in_state(self.takes)
        if not todo:
            waited = time.perf_counter()
            self.inbox.recv(timeout)
            self.timers.add_wait(waited)
            todo = self.rows.in_state(self.takes)
            if not todo:
                return False
        clock = self.timers.now()
        self.work(todo)
        for r in todo:
            self.rows.set_state(r, self.gives)  # after every write of the row
            self.downstream.send(r)
        self.timers.add(self.activity, clock)
        return True

    def work(self, rows: list[int]) -> None:
        """Do the stage's work on `rows` (their states are set after it returns)."""
        raise NotImplementedError

    def close(self) -> None:
        pass
