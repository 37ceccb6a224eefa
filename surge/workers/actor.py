"""The actor worker: steps a ring of env groups and assembles trajectory segments.

The ring (SRL's environment ring): while group k waits for its actions, the actor steps the
other groups, so env stepping overlaps inference. Groups are stepped strictly in turn.

Per step of group k the actor copies the observation the policy saw and the policy's answer
(action, log-prob, value, version) into the segment, steps the envs (which write the next
observations straight into the inference slot), records rewards and episode ends, and posts
the next request. After `rollout_len` steps the segment is published to the trainer.

Actors do not import torch: they never run a network.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from surge.envs.group import EnvGroup
from surge.streams.inference import InferenceClient, Routing
from surge.streams.sample import SampleProducer
from surge.streams.transport import Transport
from surge.workers.base import RunContext, derive_seed


@dataclass
class _GroupState:
    segment: int  # index of the segment being filled (= the batch that will train on it)
    step: int  # position inside the segment
    episode_return: np.ndarray
    episode_length: np.ndarray
    columns: dict[str, np.ndarray]  # views of this segment's slot in the sample stream


class ActorWorker:
    def __init__(self, ctx: RunContext, index: int, transport: Transport) -> None:
        cfg = ctx.cfg
        self.name = f"actor-{index}"
        self.finished = False
        self.ring_size = cfg.workers.ring_size
        self.rollout_len = cfg.ppo.rollout_len
        self.max_lag = cfg.max_policy_lag
        self.first_group = index * self.ring_size
        routing = Routing(cfg.workers.ring_size, cfg.workers.policy_workers)
        self.client = InferenceClient(transport, index, routing)
        self.producer = SampleProducer(
            transport,
            depth=cfg.max_policy_lag + 1,
            group_size=cfg.workers.envs_per_group,
        )
        G = cfg.workers.envs_per_group
        self.groups: list[EnvGroup] = []
        self.state: list[_GroupState] = []
        for k in range(self.ring_size):
            g = self.first_group + k
            seeds = [derive_seed(cfg.seed, "env", ctx.resumes, g, i) for i in range(G)]
            self.groups.append(
                EnvGroup(cfg.env, seeds, {n: o[g] for n, o in self.client.obs.items()})
            )
            self.state.append(
                _GroupState(
                    segment=ctx.start_version,
                    step=0,
                    episode_return=np.zeros(G, np.float32),
                    episode_length=np.zeros(G, np.int64),
                    columns=self.producer.columns(g, ctx.start_version),
                )
            )
        # (segment field, inference slot array) per observation field, for the per-step copy.
        self._obs_fields = [(f"obs/{n}", o) for n, o in self.client.obs.items()]
        self.head = 0
        self._ready: set[int] = set()
        for k, group in enumerate(self.groups):
            group.reset()
            self._post(k)

    def _post(self, k: int) -> None:
        self.client.post(self.first_group + k, max(0, self.state[k].segment - self.max_lag))

    def poll(self, timeout: float) -> bool:
        g = self.first_group + self.head
        if g not in self._ready:
            self._ready.update(self.client.ready(timeout))
            if g not in self._ready:
                return False
        self._ready.discard(g)
        self._advance(self.head)
        self.head = (self.head + 1) % self.ring_size
        return True

    def _advance(self, k: int) -> None:
        g = self.first_group + k
        st, group, client = self.state[k], self.groups[k], self.client
        seg, t = st.columns, st.step
        for key, obs in self._obs_fields:
            seg[key][t] = obs[g]
        seg["action"][t] = client.action[g]
        seg["logp"][t] = client.logp[g]
        seg["value"][t] = client.value[g]
        seg["version"][t] = client.version[g]

        group.step(client.action[g])  # next observations land in the inference slot

        seg["reward"][t] = group.rewards
        seg["terminated"][t] = group.terminated
        seg["truncated"][t] = group.truncated
        st.episode_return += group.rewards
        st.episode_length += 1
        seg["episode_return"][t] = st.episode_return
        seg["episode_length"][t] = st.episode_length
        done = group.terminated | group.truncated
        if done.any():
            for name, final in group.final_obs.items():
                seg["final_obs/" + name][t][done] = final[done]
            st.episode_return[done] = 0.0
            st.episode_length[done] = 0

        st.step += 1
        if st.step == self.rollout_len:
            for key, obs in self._obs_fields:
                seg[key][self.rollout_len] = obs[g]  # bootstrap observation
            self.producer.publish(g)
            st.segment += 1
            st.step = 0
            st.columns = self.producer.columns(g, st.segment)
        self._post(k)

    def close(self) -> None:
        for group in self.groups:
            group.close()
