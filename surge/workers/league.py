"""The league worker: keeps a pool of the learner's past versions for self-play opponents.

It subscribes to the learner's parameter stream and, every `selfplay.snapshot_every`
versions (version 0 included), copies the newest parameters into the league block
(surge/streams/league.py), which the actors' self-play envs draw their opponents from. Like
an evaluation worker it is not woken by each publish: it looks twice a second (the poll
clock), so the trainer pays nothing for it, and a snapshot may be a version or two later
than its multiple of `snapshot_every`. It writes no samples; nobody waits for it.
"""

from __future__ import annotations

import numpy as np

from surge.streams.league import LeagueWriter
from surge.streams.params import NONE, ParameterService
from surge.workers.base import Binding, RunContext


def build(ctx: RunContext, b: Binding) -> LeagueWorker:
    return LeagueWorker(ctx, b)


class LeagueWorker:
    def __init__(self, ctx: RunContext, b: Binding) -> None:
        self.name = b.name
        self.finished = False
        self.every = ctx.cfg.selfplay.snapshot_every
        self.params = ParameterService(b.transport, b.port_of_kind("versions").block)
        self.pool = LeagueWriter(b.transport, b.port_of_kind("snapshots").block)
        self.inbox = b.transport.channel(b.inbox)
        self.buffer = np.zeros(ctx.n_params, np.float32)

    def _due(self, latest: int) -> bool:
        """A snapshot is due once the newest version reaches the next multiple of `every`
        after the newest snapshot (a restarted worker finds the pool's state in the block)."""
        newest = self.pool.newest_version()
        if newest == NONE:
            return latest != NONE
        return latest >= (newest // self.every + 1) * self.every

    def poll(self, timeout: float) -> bool:
        if not self._due(self.params.latest_version()):
            self.inbox.recv(timeout)
            return False
        version = self.params.read(self.buffer)
        self.pool.add(version, self.buffer)
        return True

    def close(self) -> None:
        pass
