"""What the learners of replay-based algorithms share (learners/dqn.py, learners/sac.py):
their side of the batches block."""

from __future__ import annotations

import numpy as np

from surge.streams.replay_blocks import TRAINED, BatchRows
from surge.workers.base import Binding, RunContext
from surge.workers.trainer import Update


class ReplayBatches:
    """The learner's side of the batches block: rows in batch order, and the counters and
    episodes they carry (shared by the replay-based learners)."""

    def __init__(self, ctx: RunContext, b: Binding) -> None:
        r = ctx.cfg.replay
        port = b.port_of_kind("batches")
        self.rows = BatchRows(b.transport, port.block, r.shards, r.prefetch)
        self.shards = {s: b.transport.channel(s) for s in port.hears_from}
        self.names = sorted(port.hears_from, key=lambda n: int(n.rpartition("-")[2]))
        self.wait = b.transport.channel(b.inbox).recv
        self.min_size = r.min_size
        self.last: dict[int, dict[str, float]] = {}  # per shard: its counters at its last row
        self.checkpoint = r.checkpoint
        self.rows.request_save(-1)

    def ready(self, version: int) -> bool:
        return self.rows.ready(version)

    def take(self, version: int) -> tuple[int, dict[str, np.ndarray]]:
        row = self.rows.row_of(version)
        return row, self.rows.fields(row)

    def give_back(self, version: int, row: int) -> Update:
        """The row is trained (its priorities written): hand it back to its shard, and
        report the env steps and episodes it brought."""
        a, shard = self.rows.a, self.rows.shard_of(version)
        now = {name: float(a[name][row]) for name in ("steps", "inserted", "sampled", "size")}
        now.update(insert_wait_s=float(a["insert_wait_s"][row]))
        now.update(sample_wait_s=float(a["sample_wait_s"][row]))
        before = self.last.get(shard, {"steps": 0.0})
        self.last[shard] = now
        n = int(a["episodes"][row])
        update = Update(
            env_steps=int(now["steps"] - before["steps"]),
            returns=a["episode_return"][row, :n].tolist(),
            lengths=a["episode_length"][row, :n].tolist(),
        )
        self.rows.set_state(row, TRAINED)  # after every read and write of the row
        self.shards[self.names[shard]].send(row)
        return update

    def export(self, version: int) -> bool:
        """With `replay.checkpoint`: ask the shards to save their replay for the checkpoint
        of `version`; True once all have."""
        if not self.checkpoint:
            return True
        a = self.rows.a
        if a["save_request"][0] < version:
            self.rows.request_save(version)
        return self.rows.all_saved(version)

    def metrics(self, seconds: float, waited: dict[str, float]) -> dict[str, float]:
        """The replay's fields of a metrics row: its size, the samples per insert so far,
        and the share of time the rate limiter held inserts and samples (since `waited`,
        which it updates)."""
        if not self.last:
            return {}
        total = {k: sum(c[k] for c in self.last.values()) for k in next(iter(self.last.values()))}
        record = {
            "replay/size": total["size"],
            "replay/ratio": total["sampled"] / max(total["inserted"] - self.min_size, 1.0),
        }
        for side in ("insert", "sample"):
            key = f"{side}_wait_s"
            share = (total[key] - waited.get(key, 0.0)) / (seconds * len(self.shards))
            record[f"replay/{side}_wait"] = max(0.0, share)
            waited[key] = total[key]
        if self.checkpoint and (self.rows.a["saved"] >= 0).all():  # the newest replay saves
            record["replay/checkpoint_s"] = float(self.rows.a["save_seconds"].sum())
            record["replay/checkpoint_mb"] = float(self.rows.a["save_bytes"].sum()) / 2**20
        return record
