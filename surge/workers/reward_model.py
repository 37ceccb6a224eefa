"""The reward-model worker: scores the actors' frames in batches and hands the scored segments
to the replay (VLM-RL's model-as-reward stage, outside the agent loop).

    actor-a --(samples: segments with frames and state terms)--> reward-model-0  [acknowledged]
    reward-model-0 --(scored: the same segments, rewards written)--> replay-s    [acknowledged]

Once a batch of frames waits (or a group's slots are all waiting, so that its actor would be
held), it takes every env group's next unscored segment whose place downstream is free,
scores all their frames in batches of `reward_model.batch_size` (one model call each),
turns the scores and the recorded state terms into rewards (surge/rewards/models.py
`step_rewards`), copies each segment into the replay's stream with those rewards, publishes
it, and only then acknowledges the actor's segment. So the replay never holds an unscored
transition, and its n-step returns are computed from scored rewards at insert.

Nothing waits on the model until a group has `reward_model.max_pending` segments unscored
(the depth of the actors' stream): then the actor's next segment waits for its slot, and no
frame is dropped. A new life after a crash finds the unscored segments still in the actors'
stream and scores them; a segment its previous life had already handed on (published
downstream, not yet acknowledged upstream) is acknowledged without being handed on again,
so every transition reaches the replay once.

Logged (a `stats` block the trainer reads): `reward_model/frames` scored, `/batches`,
`/seconds` spent in the model, `/lag_batches_p95` (frames waiting when a batch was taken,
in batches, over the last 200 batches), `/score_mean` (of the last poll's frames).
"""

from __future__ import annotations

import time
from collections import deque

import numpy as np

from surge.rewards.models import make_scorer, step_rewards
from surge.streams.sample import CONSUMED, COUNTERS, PROGRESS, SegmentReader
from surge.streams.stats import StatsWriter, reset_stats
from surge.tracking.timing import INFERENCE
from surge.workers.base import Binding, RunContext

SAMPLES, SCORED, STATS = "samples", "scored", "reward_model.stats"
STAT_NAMES = (
    "reward_model/frames",
    "reward_model/batches",
    "reward_model/seconds",
    "reward_model/lag_batches_p95",
    "reward_model/score_mean",
)


def build(ctx: RunContext, b: Binding) -> RewardModelWorker:
    return RewardModelWorker(ctx, b)


class RewardModelWorker:
    def __init__(self, ctx: RunContext, b: Binding) -> None:
        cfg = ctx.cfg.reward_model
        self.cfg = cfg
        self.name, self.finished = b.name, False
        self.timers = b.control.timers
        self.inbox = b.transport.channel(b.inbox)
        self.reader = SegmentReader(b.transport, b.ports[SAMPLES], ctx.start_version)
        scored = b.ports[SCORED]
        assert scored.flow is not None, "the scored stream has a flow policy"
        out = b.transport.block(scored.block)
        self.out_published, self.out_consumed = out[PROGRESS], out[CONSUMED]
        self.out = {k: v for k, v in out.items() if k not in COUNTERS}
        self.out_depth = scored.flow.depth
        self.first = ctx.start_version
        self.replay_of = {g: b.transport.channel(r) for r, gs in scored.peer_slots for g in gs}
        self.G = self.reader.group_size
        self.scorer = make_scorer(cfg)
        self.frame_field = f"info/{cfg.frame_key}"
        self.stats = StatsWriter(b.transport, STATS)
        if b.life == 0:
            reset_stats(b.transport, STATS)
        counts = self.stats.arrays
        self.frames = int(np.nan_to_num(counts["reward_model/frames"][0]))
        self.batches = int(np.nan_to_num(counts["reward_model/batches"][0]))
        self.seconds = float(np.nan_to_num(counts["reward_model/seconds"][0]))
        self.lags: deque[float] = deque(maxlen=200)

    def poll(self, timeout: float) -> bool:
        clock = self.timers.now()
        todo: list[tuple[int, int]] = []  # (group, segments ahead of its next one)
        for g in self.reader.pending():
            done = int(self.out_published[g])
            if done > self.reader.consumed(g):
                self.reader.ack(g)  # handed on by a previous life before its acknowledgement
                continue
            free = int(self.out_consumed[g]) + self.out_depth - done  # places downstream
            todo += [(g, k) for k in range(min(self.reader.waiting(g), free))]
        if not todo:
            waited = time.perf_counter()
            self.inbox.recv(timeout)
            self.timers.add_wait(waited)
            return False
        segments = [self.reader.segment(g, k) for g, k in todo]  # views, before any ack
        scores = self._score(segments)
        for (g, _), seg, score in zip(todo, segments, scores, strict=True):
            info = {k[5:]: v.reshape(-1) for k, v in seg.items() if k.startswith("info/")}
            rewards = step_rewards(self.cfg, score, info, seg["terminated"].reshape(-1))
            self._hand_on(g, seg, rewards.reshape(seg["reward"].shape))
            self.reader.ack(g)  # after the hand-on: the actor may overwrite the slot now
        self.timers.add(INFERENCE, clock)
        return True

    def _score(self, segments: list[dict[str, np.ndarray]]) -> list[np.ndarray | None]:
        """Each segment's frames' scores, [T * G] in step-major order (None without a model),
        in batches of `reward_model.batch_size` over all of them."""
        if self.scorer is None:
            return [None] * len(segments)
        frames = [seg[self.frame_field] for seg in segments]
        flat = np.concatenate([f.reshape(-1, *f.shape[2:]) for f in frames])
        B, clock = self.cfg.batch_size, time.perf_counter()
        out = np.empty(len(flat), np.float32)
        for start in range(0, len(flat), B):
            self.lags.append((len(flat) - start) / B)  # frames waiting as this batch starts
            out[start : start + B] = self.scorer(flat[start : start + B])
            self.batches += 1
        self.seconds += time.perf_counter() - clock
        self.frames += len(flat)
        self.stats.set(
            {
                "reward_model/frames": self.frames,
                "reward_model/batches": self.batches,
                "reward_model/seconds": self.seconds,
                "reward_model/lag_batches_p95": float(np.percentile(self.lags, 95)),
                "reward_model/score_mean": float(out.mean()),
            }
        )
        return list(np.split(out, len(segments)))

    def _hand_on(self, g: int, seg: dict[str, np.ndarray], rewards: np.ndarray) -> None:
        """Copy the segment into its slot of the replay's stream with the scored rewards,
        then publish it there (after its last write) and wake the replay."""
        slot = (self.first + int(self.out_published[g])) % self.out_depth
        cols = slice(g * self.G, (g + 1) * self.G)
        for k, dest in self.out.items():
            dest[slot, :, cols] = rewards if k == "reward" else seg[k]
        self.out_published[g] += 1
        self.replay_of[g].send(g)

    def close(self) -> None:
        pass
