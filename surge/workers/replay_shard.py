"""The replay worker: one shard of the replay between the actors and the trainer (SRL's buffer
worker, Ape-X's replay, a Reverb table with a `SampleToInsertRatio` rate limiter).

A stage worker (surge/workers/stage.py) with three kinds of work, each poll:

- intake: every segment its actors published is added to the shard's storage
  (algos/transition_store.py: n-step transitions computed at insert, first priorities from the
  actors' Q-values, the episodes that finished in it queued for the trainer's logs, all in
  one commit), then acknowledged, which frees the actor's slot and wakes it; a segment a
  previous life committed but did not acknowledge is not added twice;
- trained rows of the batches block come back with the trainer's |TD errors|: they become
  the transitions' new priorities (prioritised replay) and the row is free again;
- free rows, in the order of the batches they hold, are sampled into while the rate limiter
  allows (`replay.min_size` transitions stored, and samples within `replay.ratio` per
  insert plus `replay.error_buffer`), then handed to the trainer.

The insert half of the limiter is the sample stream's flow policy (streams/flow.py
`RatioBound`): actors wait for the trainer's versions. Everything the shard keeps is in
shared memory (streams/replay_blocks.py), so a new life after a crash carries on where the old one
committed; its sampler (sum tree) is rebuilt from the stored priorities.
"""

from __future__ import annotations

import time

import numpy as np

from surge.algos.priorities import annealed_beta
from surge.algos.replay_stores import make_store
from surge.algos.transition_store import replay_of
from surge.config.schema import ExperimentConfig
from surge.seeds import derive_seed
from surge.streams.flow import SampleToInsertRatio
from surge.streams.replay_blocks import (
    EPISODES,
    FILLED,
    FREE,
    TRAINED,
    BatchRows,
    load_storage,
    save_storage,
    saved_replay,
)
from surge.streams.sample import SegmentReader
from surge.workers.base import Binding, RunContext
from surge.workers.stage import HandOver, StageWorker, every_row


def build(ctx: RunContext, b: Binding) -> ReplayWorker:
    return ReplayWorker(ctx, b)


class _ShardRows:
    """The rows of the batches block that are this shard's (the stage's `RowStates`)."""

    def __init__(self, rows: BatchRows, shard: int) -> None:
        self.rows, self.shard = rows, shard

    def in_state(self, state: int) -> list[int]:
        return self.rows.in_state(self.shard, state)

    def set_state(self, r: int, state: int) -> None:
        self.rows.set_state(r, state)


class ReplayWorker(StageWorker):
    def __init__(self, ctx: RunContext, b: Binding) -> None:
        cfg, r, setup = ctx.cfg, ctx.cfg.replay, replay_of(ctx)
        self.cfg, self.shard, self.shards = cfg, b.index, r.shards
        self.samples = SegmentReader(b.transport, b.port_of_kind("segments"), ctx.start_version)
        storage = b.port_of_kind("storage")
        arrays = b.transport.block(storage.block)
        batches = b.port_of_kind("batches")
        self.batches = BatchRows(b.transport, batches.block, r.shards, r.prefetch)
        if b.life == 0:  # a new run: the rows get their first batches (a new life keeps them)
            self.batches.first_batches(b.index, ctx.start_version)
            self.batches.a["saved"][b.index] = -1
            if setup.restored:  # the files fit: recipes/replay_graph.py checked them
                load_storage(arrays, saved_replay(ctx.run_dir, b.index))
            # this run's env steps count from here (a restored replay's are the last run's),
            # and its segments from zero (the sample stream's count)
            self.batches.a["base_steps"][b.index] = int(arrays["written"].sum())
            arrays["segments"][:] = 0
            arrays["episode_counts"][1] = arrays["episode_counts"][0]  # the last run's
        self.run_dir, self.save = ctx.run_dir, r.checkpoint
        spec = setup.shards[b.index]
        seed = derive_seed(cfg.seed, "replay", ctx.resumes, b.index, b.life)
        settings = {"gamma": setup.gamma, "nstep": setup.nstep}
        settings.update(prioritized=r.prioritized, alpha=r.alpha, priority_eps=r.priority_eps)
        self.store = make_store(spec, arrays, seed, weight_norm=r.weight_norm, **settings)
        # each shard holds its share of the run's limits
        buffer = error_buffer(
            cfg,
            setup.nstep,
            spec.trained,
            setup.batch_items,
            ctx.env.rows_per_env,
        )
        self.limiter = SampleToInsertRatio(
            r.ratio, max(1, r.min_size // r.shards), buffer / r.shards
        )
        (trainer,) = batches.sends_to
        self.batch_size = setup.batch_items
        # which shard-local columns each of its groups' envs are
        G = self.samples.group_size
        self.columns = {g: np.arange(k * G, (k + 1) * G) for k, g in enumerate(self.samples.groups)}
        self.held_since: list[float | None] = [None, None]  # insert, sample
        self.waited = [0.0, 0.0]  # seconds the limiter held inserts, samples
        self.row_views: dict[int, dict[str, np.ndarray]] = {}  # `_row`
        shard = _ShardRows(self.batches, b.index)
        super().__init__(
            b,
            shard,
            [
                HandOver(TRAINED, FREE, every_row(self._reprioritise)),
                HandOver(FREE, FILLED, self._fill, b.transport.channel(trainer)),
            ],
        )

    # ------------------------------------------------------------------ inserts

    def intake(self) -> bool:
        saved = self._save()
        pending = self.samples.pending()
        for g in pending:
            # a previous life may have committed this segment and died before its ack
            if self.store.segments_added(self.columns[g]) <= self.samples.consumed(g):
                segment = self.samples.segment(g)
                steps = {k: v for k, v in segment.items() if k != "version"}
                for name in self.store.spec.outputs:  # the policy's outputs, as stored
                    steps[f"out/{name}"] = steps.pop(name)
                over = segment["game_over"]
                episodes = np.stack(
                    [segment["episode_return"][over], segment["episode_length"][over]], axis=1
                )
                self.store.add(self.columns[g], steps, episodes)
            self.samples.ack(g)  # after every read of the segment: its slot is free
        return bool(pending) or saved

    def _save(self) -> bool:
        """Save the replay when the trainer asks (`replay.checkpoint`): between two of this
        worker's own writes, so the file is consistent."""
        a, s = self.batches.a, self.shard
        version = int(a["save_request"][0])
        if not self.save or version <= a["saved"][s]:
            return False
        clock = time.perf_counter()
        size = save_storage(self.store.a, saved_replay(self.run_dir, s))
        a["save_seconds"][s], a["save_bytes"][s] = time.perf_counter() - clock, size
        a["saved"][s] = version  # last: the trainer may finish once every shard has
        return True

    # ------------------------------------------------------------------ samples

    def _fill(self, rows: list[int]) -> list[int]:
        """Sample into free rows, in batch order, while the limiter allows."""
        filled = []
        store, B = self.store, self.batch_size
        for row in rows:
            allowed = self.limiter.samples_allowed(store.inserted)
            cost = B * store.per_item  # transitions the batch trains
            if (
                not store.can_sample(B)
                or store.inserted < self.limiter.min_size
                or store.sampled + cost > allowed
            ):
                self._held(1, True)
                break
            self._held(1, False)
            progress = self.shards * store.steps / max(self.cfg.total_env_steps, 1)
            store.sample(B, annealed_beta(self.cfg.replay.beta0, progress), self._row(row))
            self._counters(row)
            filled.append(row)
        # the insert half: are the actors at their bound? (for the logs)
        inserts_left = self.limiter.inserts_allowed(store.sampled) - store.inserted
        round_ = self.samples.steps * self.samples.group_size * len(self.samples.groups)
        self._held(0, inserts_left < round_)
        return filled

    def _row(self, row: int) -> dict[str, np.ndarray]:
        """Views of a row of the batches block, per field a sample writes: it samples
        straight into them."""
        if row not in self.row_views:
            fields = self.store.batch_fields()
            self.row_views[row] = {k: self.batches.a[k][row] for k in fields}
        return self.row_views[row]

    def _held(self, side: int, held: bool) -> None:
        """Account the wall time the limiter holds one side (0: inserts, 1: samples)."""
        now = time.monotonic()
        since = self.held_since[side]
        if since is not None:
            self.waited[side] += now - since
        self.held_since[side] = now if held else None

    def _counters(self, row: int) -> None:
        a, store = self.batches.a, self.store
        a["steps"][row] = store.steps - int(a["base_steps"][self.shard])
        a["inserted"][row] = store.inserted
        a["sampled"][row] = store.sampled
        a["size"][row] = store.size
        a["insert_wait_s"][row] = self.waited[0]
        a["sample_wait_s"][row] = self.waited[1]
        # the episodes since the previous row (taken before the row is marked filled: a
        # crash in between loses those few from the logs, never steps or transitions)
        episodes = store.take_episodes(EPISODES)
        n = len(episodes)
        a["episode_return"][row, :n] = episodes[:, 0]
        a["episode_length"][row, :n] = episodes[:, 1]
        a["episodes"][row] = n

    # ------------------------------------------------------------------ priorities

    def _reprioritise(self, rows: list[int]) -> None:
        a = self.batches.a
        for row in rows:
            self.store.update_priorities(a["index"][row], a["generation"][row], a["priority"][row])
            a["batch"][row] += self.shards * self.batches.prefetch  # the row's next batch


TOLERANCE = 0.1
"""The default error buffer's share of `min_size` inserts' samples (Acme's
`samples_per_insert_tolerance_rate`)."""


def error_buffer(
    cfg: ExperimentConfig, nstep: int, per_item: int = 1, batch: int = 0, rows: int = 1
) -> float:
    """`replay.error_buffer`, or its default: the samples of TOLERANCE x `min_size` inserts, as
    Acme sizes Reverb's limiter, and at least `min_error_buffer` twice over, ten inserts'
    worth of samples and two batches.

    Why that large: with only a few batches of slack the actors and the learner run in
    lockstep, each waiting for the other's next step; cartpole-dqn (1 env) ran at 9.4-10.1k
    steps/s with 256 samples of slack, 12.0-12.4k with 12,800, at the same measured ratio."""
    r = cfg.replay
    batch = batch or r.batch_size
    floor = 2 * min_error_buffer(cfg, nstep, per_item, batch, rows)
    tolerance = TOLERANCE * r.min_size * r.ratio
    return r.error_buffer or max(tolerance, 10 * r.ratio, 2 * batch * per_item, floor)


def min_error_buffer(
    cfg: ExperimentConfig, nstep: int, per_item: int = 1, batch: int = 0, rows: int = 1
) -> float:
    """The smallest error buffer with which neither side can wait for the other forever.
    Inserts come a segment of every env column at a time (`round` transitions), the last
    n - 1 steps of each column not yet complete (`tail`), and samples a batch at a time in
    each shard: the actors, allowed up to (inserts * ratio - samples) <= buffer, and the
    shards, allowed down to >= -buffer, must leave each other room for one step of each:
    2 * buffer >= (round + tail) * ratio + shards * batch. A batch of sequences counts
    `per_item` transitions per sequence (algos/sequence_replay.py). `batch`: items per batch
    (default `replay.batch_size`); `rows`: columns per env (a multi-agent env's agents)."""
    r = cfg.replay
    columns = cfg.total_envs * rows
    round_, tail = r.segment_len * columns, (nstep - 1) * columns
    return ((round_ + tail) * r.ratio + r.shards * (batch or r.batch_size) * per_item) / 2
