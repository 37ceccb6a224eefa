"""The actor worker: steps a ring of env groups and assembles trajectory segments.

The ring (SRL's environment ring): while group k waits for its actions, the actor steps the
other groups, so env stepping overlaps inference. Groups are stepped in turn as their answers
arrive (a group still waiting never holds up one that is ready).

Per step of group k the actor copies the observation the policy saw and the policy's answer
(action, the algorithm's policy outputs such as log-prob and value, version) into the
segment, steps the envs (which write the next observations straight into the inference slot),
records rewards and episode ends, and posts the next request. After `rollout_len` steps the
segment is published to the trainer.

With remote inference the actor never imports torch; with `workers.inference: inline` it runs
the policy itself (workers/policy.py `InlineInference`) behind the same post/ready calls.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from surge.envs.group import make_group
from surge.streams.inference import InferenceClient, request_obs
from surge.streams.league import LeaguePool
from surge.streams.sample import SampleProducer, first_unfinished_segment
from surge.tracking.timing import COPY, ENV
from surge.workers.base import Binding, RunContext, derive_seed

# The fields of an inference answer that are not policy outputs, and the sample fields the
# actor writes itself: the rest of the sample schema is the algorithm's (POLICY_OUTPUTS).
_ANSWER = {"min_version", "request_id", "response_id", "action", "version"}


def build(ctx: RunContext, b: Binding) -> ActorWorker:
    return ActorWorker(ctx, b)


@dataclass
class _GroupState:
    segment: int  # index of the segment being filled (= the batch that will train on it)
    step: int  # position inside the segment
    episode_return: np.ndarray  # of the reported episode (raw score until game over)
    episode_length: np.ndarray
    columns: dict[str, np.ndarray]  # views of this segment's slot in the sample stream


class ActorWorker:
    def __init__(self, ctx: RunContext, b: Binding) -> None:
        cfg = ctx.cfg
        self.name = b.name
        self.life = b.life  # 0, then 1, 2, ... when the runtime restarts this actor in place
        self.finished = False
        self.timers = b.control.timers
        transport = b.transport
        inference, samples = b.port("inference"), b.port("samples")
        assert samples.flow is not None, "the sample stream has a version bound"
        self.flow = samples.flow
        self.ring = list(inference.slots)  # this actor's env groups (global ids)
        self.ring_size = len(self.ring)
        self.rollout_len = cfg.ppo.rollout_len
        arrays = transport.block(inference.block)
        self.client: Any
        self._remote = cfg.workers.inference == "remote"
        if not self._remote:
            from surge.workers.policy import InlineInference  # torch only in this mode

            self.client = InlineInference(ctx, b, arrays)
        else:
            splits = cfg.workers.inference_splits or self.ring_size
            self.client = InferenceClient(transport, inference, b.inbox, self.ring_size // splits)
        self.slot_obs = request_obs(arrays)  # [groups, G, ...] per field
        self.action, self.version = arrays["action"], arrays["version"]
        # The algorithm's per-step outputs (e.g. PPO's logp, value), copied as they come.
        self.outputs = {
            k: v for k, v in arrays.items() if k not in _ANSWER and not k.startswith("obs/")
        }
        G, rows = cfg.workers.envs_per_group, ctx.group_rows  # an env's agents are rows
        self.producer = SampleProducer(transport, samples, depth=self.flow.depth, group_size=rows)
        self._records_active = "active" in self.producer.arrays
        opponents = _league_pool(ctx, b)  # self-play games: past versions from the league
        self.groups: list[Any] = []
        self.state: list[_GroupState] = []
        for g in self.ring:
            seeds = [derive_seed(cfg.seed, "env", ctx.resumes, self.life, g, i) for i in range(G)]
            segment = first_unfinished_segment(transport, samples.block, g, ctx.start_version)
            slot = {n: o[g] for n, o in self.slot_obs.items()}
            self.groups.append(make_group(cfg.env, seeds, slot, opponents))
            self.state.append(
                _GroupState(
                    segment=segment,
                    step=0,
                    episode_return=np.zeros(rows, np.float32),
                    episode_length=np.zeros(rows, np.int64),
                    columns=self.producer.columns(g, segment),
                )
            )
        # (segment field, inference slot array) per observation field, for the per-step copy.
        self._obs_fields = [(f"obs/{n}", o) for n, o in self.slot_obs.items()]
        self.head = 0
        self._ready: set[int] = set()
        for k, group in enumerate(self.groups):
            group.reset()
            self._post(k)
        self.client.flush()

    def _post(self, k: int) -> None:
        self.client.post(self.ring[k], self.flow.min_version(self.state[k].segment))

    def poll(self, timeout: float) -> bool:
        if not self._ready:
            if self._remote:
                waited = time.perf_counter()
                self._ready.update(self.client.ready(timeout))
                self.timers.add_wait(waited)
            else:
                self._ready.update(self.client.ready(timeout))  # times itself
            if not self._ready:
                return False
        # The first ready group in ring order from the head. Normally that is the head
        # itself (groups answer in turn); after a restart groups can be a segment apart,
        # and a group that must wait for a new version must not block the others.
        for i in range(self.ring_size):
            k = (self.head + i) % self.ring_size
            if self.ring[k] in self._ready:
                self._ready.discard(self.ring[k])
                self._advance(k)
                self.head = (k + 1) % self.ring_size
                return True
        return False

    def _advance(self, k: int) -> None:
        g = self.ring[k]
        st, group, timers = self.state[k], self.groups[k], self.timers
        seg, t = st.columns, st.step
        clock = timers.now()
        for key, obs in self._obs_fields:
            seg[key][t] = obs[g]
        if self._records_active:  # whose agents were in their episode for this observation
            seg["active"][t] = group.active
        seg["action"][t] = self.action[g]
        for name, output in self.outputs.items():
            seg[name][t] = output[g]
        seg["version"][t] = self.version[g]
        seg["life"][t] = self.life
        clock = timers.add(COPY, clock)

        group.step(self.action[g])  # next observations land in the inference slot
        clock = timers.add(ENV, clock)

        seg["reward"][t] = group.rewards
        seg["terminated"][t] = group.terminated
        seg["truncated"][t] = group.truncated
        st.episode_return += group.score
        st.episode_length += 1
        over = group.game_over
        seg["episode_return"][t] = st.episode_return
        seg["episode_length"][t] = st.episode_length
        seg["game_over"][t] = over
        ended = group.terminated | group.truncated
        if ended.any():
            for name, final in group.final_obs.items():
                seg["final_obs/" + name][t][ended] = final[ended]
            st.episode_return[over] = 0.0
            st.episode_length[over] = 0

        st.step += 1
        if st.step == self.rollout_len:
            for key, obs in self._obs_fields:
                seg[key][self.rollout_len] = obs[g]  # bootstrap observation
            self.producer.publish(g)
            st.segment += 1
            st.step = 0
            st.columns = self.producer.columns(g, st.segment)
        timers.add(COPY, clock)
        self._post(k)

    def close(self) -> None:
        for group in self.groups:
            group.close()


def _league_pool(ctx: RunContext, b: Binding) -> LeaguePool | None:
    """The opponents of a self-play actor's games: snapshots from the league's stream, each
    played by a policy of its own (numpy for MLPs, as the actor's inline policy)."""
    snapshots = [p for p in b.ports.values() if p.kind == "snapshots"]
    if not snapshots:
        return None
    from surge.models.flat_policy import FlatPolicy

    env, cfg = ctx.env, ctx.cfg
    seeds = iter(range(1_000_000))

    def make_policy() -> FlatPolicy:
        seed = derive_seed(cfg.seed, "opponent", ctx.resumes, b.index, b.life, next(seeds))
        return FlatPolicy(env.observation_space, env.action_space, cfg.model, seed)

    return LeaguePool(b.transport, snapshots[0].block, make_policy, cfg.selfplay.latest_share)
