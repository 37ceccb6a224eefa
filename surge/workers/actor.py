"""The actor worker: steps a ring of env groups and assembles trajectory segments.

The ring (SRL's environment ring): while group k waits for its actions, the actor steps the
other groups, so env stepping overlaps inference. Groups are stepped in turn as their answers
arrive (a group still waiting never holds up one that is ready).

Per step of group k the actor copies the observation the policy saw and the policy's answer
(action, the algorithm's policy outputs such as log-prob and value, version) into the
segment, steps the envs (which write the next observations straight into the inference slot),
records rewards and episode ends, and posts the next request. After the segment's T steps (the
sample stream's layout says how many) it is published to its reader.

A multi-agent run with several policies gives the actor one lane per policy (its inference
and sample streams, surge/envs/multiagent.py routes the agents): a group is ready once every
lane has answered it, and one env step feeds every lane's segment. A restarted actor resumes
each group at the first segment some lane has not published; a lane that already published
it (its previous life died between two lanes' publishes) writes that segment aside, unread.

With remote inference the actor never imports torch; with `workers.inference: inline` it runs
the policy itself (workers/policy.py `InlineInference`) behind the same post/ready calls.

An algorithm may explore in the actors (`RunContext.explore`, algos/exploration.py: DQN's
epsilon-greedy): the actor changes the policy's actions before it steps the envs, and
records the actions taken. A sample stream whose reader acknowledges what it consumed (the
replay, streams/sample.py) holds a group at a segment's start until its slot is free.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from surge.algos.exploration import Explorer
from surge.envs.group import make_group
from surge.envs.multiagent import MultiAgentGroup
from surge.models.recurrent_state import CORE_IN, CORE_OUT, StateCarry
from surge.seeds import derive_seed
from surge.streams.inference import InferenceClient, request_obs
from surge.streams.league import LeaguePool
from surge.streams.ports import Port
from surge.streams.sample import PROGRESS, SampleProducer
from surge.streams.spin import polling
from surge.streams.transport import Channel
from surge.tracking.timing import COPY, ENV
from surge.workers.base import Binding, RunContext

# The fields of an inference answer that are not policy outputs, and the sample fields the
# actor writes itself: the rest of the sample schema is the algorithm's (its acting policy's
# OUTPUTS, models/acting.py).
# A recurrent policy's state travels apart from them (models/recurrent_state.py).
_ANSWER = {"min_version", "request_id", "response_id", "action", "version", CORE_IN, CORE_OUT}


def build(ctx: RunContext, b: Binding) -> ActorWorker:
    return ActorWorker(ctx, b)


@dataclass
class _GroupState:
    """One group's segment in one lane."""

    segment: int  # index of the segment being filled (= the batch that will train on it)
    min_version: int  # the oldest policy version its flow admits (kept: asked at every post)
    episode_return: np.ndarray  # of the reported episode (raw score until game over)
    episode_length: np.ndarray
    columns: dict[str, np.ndarray]  # views of this segment's slot in the sample stream
    aside: bool = False  # a segment this lane published in a previous life: not published


class _Lane:
    """One policy's side of the actor: its inference slots and its sample stream."""

    def __init__(
        self,
        ctx: RunContext,
        b: Binding,
        inference: Port,
        samples: Port,
        params: Port | None,
        policy: str,
    ) -> None:
        cfg = ctx.cfg
        transport = b.transport
        assert samples.flow is not None, "the sample stream has a version bound"
        self.flow = samples.flow
        self.start = ctx.start_version
        arrays = transport.block(inference.block)
        self.client: Any
        if cfg.workers.inference == "inline":
            from surge.workers.policy import InlineInference  # torch only in this mode

            self.client = InlineInference(ctx, b, arrays, params, policy)
        else:
            ring = len(inference.slots)
            splits = cfg.workers.inference_splits or ring
            spin_s = cfg.workers.inference_spin_us * 1e-6
            self.client = InferenceClient(
                transport, inference, b.inbox, b.control.timers, ring // splits, spin_s
            )
        self.slot_obs = request_obs(arrays)  # [groups, rows, ...] per field
        self.action, self.version = arrays["action"], arrays["version"]
        # The algorithm's per-step outputs (e.g. PPO's logp, value), copied as they come.
        self.outputs = {
            k: v for k, v in arrays.items() if k not in _ANSWER and not k.startswith("obs/")
        }
        # A recurrent policy's state per row: None for a feed-forward policy.
        self.core = StateCarry.of(arrays)
        self.rows = ctx.group_rows  # an env's agents of this policy are rows
        self.producer = SampleProducer(transport, samples, self.flow.depth, self.rows)
        self.published = transport.block(samples.block)[PROGRESS]
        self.records_active = "active" in self.producer.arrays
        # the env's recorded info entries (env.info_keys): segment field, group array key
        self.info_fields = [
            (k, k.removeprefix("info/")) for k in self.producer.arrays if k.startswith("info/")
        ]
        # (segment field, inference slot array) per observation field: also the bootstrap copy.
        self.obs_fields = [(f"obs/{n}", o) for n, o in self.slot_obs.items()]
        # Everything copied from the slots per step, in one list walked once: the observation
        # the policy saw, and its answer (action, the algorithm's outputs, version).
        self.step_sources = [
            *self.obs_fields,
            ("action", self.action),
            *self.outputs.items(),
            ("version", self.version),
        ]
        self.states: list[_GroupState] = []
        self.policy = policy
        self.ring = list(inference.slots)

    def begin(self, g: int, done_in_run: int) -> None:
        """Group g's state at the actor's start: segment `done_in_run` of this run (counted
        from the lane's start version), written aside if the lane already published it."""
        segment = self.start + done_in_run
        aside = done_in_run < int(self.published[g])
        self.states.append(
            _GroupState(
                segment=segment,
                min_version=self.flow.min_version(segment),
                episode_return=np.zeros(self.rows, np.float32),
                episode_length=np.zeros(self.rows, np.int64),
                columns=self._columns(g, segment, aside),
                aside=aside,
            )
        )

    def _columns(self, g: int, segment: int, aside: bool) -> dict[str, np.ndarray]:
        columns = self.producer.columns(g, segment)
        return {k: v.copy() for k, v in columns.items()} if aside else columns

    def slot_free(self, k: int) -> bool:
        """Whether group k's current segment may be written (streams/sample.py)."""
        st = self.states[k]
        return self.producer.slot_free(self.ring[k], st.segment - self.start)

    def next_segment(self, k: int, g: int) -> None:
        st = self.states[k]
        if not st.aside:
            self.producer.publish(g)
        st.segment += 1
        st.min_version = self.flow.min_version(st.segment)
        st.aside = False
        st.columns = self.producer.columns(g, st.segment)


class ActorWorker:
    def __init__(self, ctx: RunContext, b: Binding) -> None:
        cfg = ctx.cfg
        self.name = b.name
        self.life = b.life  # 0, then 1, 2, ... when the runtime restarts this actor in place
        self.finished = False
        self.timers = b.control.timers
        self.lanes = _lanes(ctx, b)
        first = self.lanes[0]
        self.rollout_len = first.producer.steps  # the sample stream's segment length
        self.ring = first.ring  # this actor's env groups (global ids), the same in every lane
        self.ring_size = len(self.ring)
        self.head = 0
        self._remote = cfg.workers.inference == "remote"
        self._inbox: Channel = b.transport.channel(b.inbox)
        # With several lanes the actor polls their slots itself (one lane: its client does).
        polls = self._remote and self._inbox.concurrent
        self._spin = polling(cfg.workers.inference_spin_us * 1e-6, polls)
        G = cfg.workers.envs_per_group
        opponents = _league_pool(ctx, b)  # self-play games: past versions from the league
        policies = [lane.policy for lane in self.lanes]
        self.groups: list[Any] = []
        self.views: list[list[Any]] = []  # per group, per lane: the lane's env arrays
        self.step = [0] * self.ring_size  # position inside the current segments
        for g in self.ring:
            seeds = [derive_seed(cfg.seed, "env", ctx.resumes, self.life, g, i) for i in range(G)]
            # Every lane resumes at the first segment one of them has not published.
            done = min(int(lane.published[g]) for lane in self.lanes)
            for lane in self.lanes:
                lane.begin(g, done)
            if len(self.lanes) == 1:
                slot = {n: o[g] for n, o in first.slot_obs.items()}
                group = make_group(cfg.env, seeds, slot, opponents)
                self.views.append([group])
            else:  # the agents routed to each policy write into its lane's slots
                slots = {
                    lane.policy: {n: o[g] for n, o in lane.slot_obs.items()} for lane in self.lanes
                }
                group = MultiAgentGroup(cfg.env, seeds, slots, policies, cfg.policy_mapping)
                self.views.append([group.lanes[p] for p in policies])
            self.groups.append(group)
        # Per group, (lane, the lane's view of the group): paired once, walked every step.
        self.lane_views = [list(zip(self.lanes, views, strict=True)) for views in self.views]
        self._ready: set[int] = set()
        self._one_lane = self.lanes[0] if len(self.lanes) == 1 else None
        """The lane of a run with one policy (the common case, spared the lanes' loops)."""
        self._acked = any(lane.producer.consumed is not None for lane in self.lanes)
        self._held: set[int] = set()  # groups waiting for their next segment's slot
        self.explore = _explorer(ctx, b) if ctx.explore else None
        # the run's env steps, estimated from this actor's: every group steps alike
        self._group_steps = 0
        self._start_steps = ctx.start_env_steps
        self._steps_per_group_step = G * cfg.total_groups / self.ring_size
        for k, group in enumerate(self.groups):
            group.reset()
            for lane in self.lanes:
                if lane.core is not None:
                    lane.core.start(self.ring[k])  # fresh episodes start from zero state
            self._post(k)
        for lane in self.lanes:
            lane.client.flush()

    def _post(self, k: int) -> None:
        if self._acked and self.step[k] == 0 and not all(lane.slot_free(k) for lane in self.lanes):
            self._held.add(k)  # its reader has not consumed the slot's previous segment yet
            return
        g = self.ring[k]
        for lane in self.lanes:
            lane.client.post(g, lane.states[k].min_version)

    def _release(self) -> None:
        """Post the held groups whose slots are free now."""
        free = [k for k in self._held if all(lane.slot_free(k) for lane in self.lanes)]
        for k in free:
            self._held.discard(k)
            self._post(k)
        if free:
            for lane in self.lanes:
                lane.client.flush()

    def poll(self, timeout: float) -> bool:
        if self._held:
            self._release()
        if not self._ready:
            one = self._one_lane
            if one is None:
                self._ready.update(self._answered(timeout))
            else:  # either client times its own waits
                self._ready.update(one.client.ready(timeout))
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

    def _answered(self, timeout: float) -> list[int]:
        """Groups every lane of several has answered (waits up to `timeout` for one).
        They share the actor's one inbox: records only wake it, the slots say which groups
        every lane has answered."""
        if self._remote:
            for lane in self.lanes:
                lane.client.flush()
            self._inbox.recv(0.0)  # wake-ups of answers the slots already show
        else:
            for lane in self.lanes:
                lane.client.answer_servable()
        ready = self._all_lanes_answered()
        if ready or timeout <= 0:
            return ready
        if self._remote and (ready := self._spin.poll(self._all_lanes_answered) or []):
            return ready
        waited = time.perf_counter()
        self._inbox.recv(timeout)  # answers (remote) or new versions (inline)
        self._spin.slept(self.timers.add_wait(waited) - waited)
        if not self._remote:
            for lane in self.lanes:
                lane.client.answer_servable()
        return self._all_lanes_answered()

    def _all_lanes_answered(self) -> list[int]:
        return [g for g in self.ring if all(lane.client.answered(g) for lane in self.lanes)]

    def _advance(self, k: int) -> None:
        g = self.ring[k]
        group, lane_views, timers, t = self.groups[k], self.lane_views[k], self.timers, self.step[k]
        clock = timers.now()
        if self.explore is not None:  # before the actions are recorded and taken
            lane = self.lanes[0]
            steps = self._start_steps + int(self._group_steps * self._steps_per_group_step)
            self.explore(lane.action[g], g * lane.rows, steps)
            self._group_steps += 1
        for lane, view in lane_views:
            seg = lane.states[k].columns
            for key, source in lane.step_sources:
                seg[key][t] = source[g]
            seg["life"][t] = self.life
            if lane.records_active:  # whose agents were in their episode for this observation
                seg["active"][t] = view.active
            if lane.core is not None:
                lane.core.record(g, t, seg)  # core0: the state step 0 of the segment used
        clock = timers.add(COPY, clock)

        if self._one_lane is not None:  # next observations land in the inference slots
            group.step(self._one_lane.action[g])
        else:
            group.step({lane.policy: lane.action[g] for lane in self.lanes})
        clock = timers.add(ENV, clock)

        for lane, view in lane_views:
            st = lane.states[k]
            seg = st.columns
            seg["reward"][t] = view.rewards
            seg["terminated"][t] = view.terminated
            seg["truncated"][t] = view.truncated
            st.episode_return += view.score
            st.episode_length += 1
            over = view.game_over
            seg["episode_return"][t] = st.episode_return
            seg["episode_length"][t] = st.episode_length
            seg["game_over"][t] = over
            for field, key in lane.info_fields:
                seg[field][t] = view.info[key]
            ended = view.terminated | view.truncated
            if ended.any():
                for name, final in view.final_obs.items():
                    seg["final_obs/" + name][t][ended] = final[ended]
                st.episode_return[over] = 0.0
                st.episode_length[over] = 0
            if lane.core is not None:
                lane.core.advance(g, ended)  # the next request's state: reset where ended

        self.step[k] = t + 1
        if self.step[k] == self.rollout_len:
            for lane in self.lanes:
                seg = lane.states[k].columns
                for key, obs in lane.obs_fields:
                    seg[key][self.rollout_len] = obs[g]  # bootstrap observation
                lane.next_segment(k, g)
            self.step[k] = 0
        timers.add(COPY, clock)
        self._post(k)

    def close(self) -> None:
        for group in self.groups:
            group.close()


def _lanes(ctx: RunContext, b: Binding) -> list[_Lane]:
    """One lane per policy, in the run's policy order (one lane when the run has one)."""
    by_policy: dict[str, dict[str, Port]] = {}
    for port in b.ports.values():
        by_policy.setdefault(port.policy, {})[port.kind] = port
    names = [""] if "" in by_policy else ctx.cfg.policy_names
    inline = ctx.cfg.workers.inference == "inline"
    lanes = []
    for name in names:
        ports = by_policy[name]
        params = ports.get("versions") if inline else None
        inference = ports["request/response"]
        lane = _Lane(ctx.for_policy(name), b, inference, ports["segments"], params, name)
        lanes.append(lane)
    return lanes


def _explorer(ctx: RunContext, b: Binding) -> Explorer:
    """The algorithm's exploration (`RunContext.explore`) over every env column of the run."""
    from surge.imports import import_object

    seed = derive_seed(ctx.cfg.seed, "explore", ctx.resumes, b.index, b.life)
    explorer: Explorer = import_object(ctx.explore)(ctx.cfg, ctx.env, ctx.total_rows, seed)
    return explorer


def _league_pool(ctx: RunContext, b: Binding) -> LeaguePool | None:
    """The opponents of a self-play actor's games: snapshots from the league's stream, each
    played by a policy of its own (numpy for MLPs, as the actor's inline policy)."""
    snapshots = [p for p in b.ports.values() if p.kind == "snapshots"]
    if not snapshots:
        return None
    from surge.models.acting import ActingPolicy, acting_policy

    env, cfg = ctx.env, ctx.cfg
    seeds = iter(range(1_000_000))

    def make_policy() -> ActingPolicy:
        seed = derive_seed(cfg.seed, "opponent", ctx.resumes, b.index, b.life, next(seeds))
        return acting_policy(ctx.acting_policy, env, cfg, seed)

    s = cfg.selfplay
    return LeaguePool(b.transport, snapshots[0].block, make_policy, s.latest_share, s.pfsp_power)
