"""Playing whole episodes with one policy version: returns, lengths and, if asked, frames.

One env, one episode at a time, each reset with its own seed, so an evaluation is
reproducible from (seed, version) and independent of the envs training uses. A recurrent
policy's state starts at zero with every episode and is carried from step to step, as the
actors carry it.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np

from surge.config.schema import EnvConfig
from surge.envs.multiagent import MultiAgentGroup
from surge.envs.spaces import action_converter, split_obs
from surge.models.acting import ActingPolicy
from surge.models.recurrent_state import carry
from surge.seeds import derive_seed
from surge.tracking.video import require_av


def eval_env_config(env: EnvConfig, video: bool) -> EnvConfig:
    """The env config to evaluate with; with `video`, the env renders `rgb_array` frames (and
    pygame-rendered envs need neither a display nor sound: SDL's dummy drivers)."""
    if not video:
        return env
    require_av()  # a UserError naming the extra, before any episode is played
    os.environ.setdefault("SDL_VIDEODRIVER", "dummy")
    os.environ.setdefault("SDL_AUDIODRIVER", "dummy")
    return dataclasses.replace(env, kwargs={**env.kwargs, "render_mode": "rgb_array"})


@dataclass
class EpisodeResults:
    returns: list[float] = field(default_factory=list)
    lengths: list[int] = field(default_factory=list)
    frames: list[np.ndarray] = field(default_factory=list)
    """[H, W, 3] uint8 frames of the first episode, when it was recorded."""
    metrics: dict[str, list[float]] = field(default_factory=dict)
    """The env's own measures of each episode (`info["episode_metrics"]` at its last step,
    e.g. surge/envs/driving.py's success and collision), by name, in episode order."""

    def add_metrics(self, values: dict[str, Any]) -> None:
        for key, value in values.items():
            self.metrics.setdefault(str(key), []).append(float(value))

    def extend(self, other: EpisodeResults) -> None:
        self.returns += other.returns
        self.lengths += other.lengths
        self.frames += other.frames
        for key, values in other.metrics.items():
            self.metrics.setdefault(key, []).extend(values)

    @property
    def metric_means(self) -> dict[str, float]:
        return {key: float(np.mean(values)) for key, values in self.metrics.items()}

    @property
    def return_mean(self) -> float:
        return float(np.mean(self.returns))

    @property
    def return_std(self) -> float:
        return float(np.std(self.returns))

    @property
    def length_mean(self) -> float:
        return float(np.mean(self.lengths))


def play_episodes(
    env: gym.Env[Any, Any],
    policy: ActingPolicy,
    episodes: int,
    seed: int,
    deterministic: bool,
    clip_actions: bool = True,
    record_first: bool = False,
    on_step: Callable[[], None] | None = None,
) -> EpisodeResults:
    """Play `episodes` whole episodes with `policy`; episode i is reset with a seed derived
    from (`seed`, i). `record_first`: keep the first episode's rendered frames (the env must
    render `rgb_array`). `on_step` is called after every step (e.g. a worker's heartbeat:
    one episode may last longer than the heartbeat timeout)."""
    to_env = action_converter(env.action_space, clip_actions)
    results = EpisodeResults()
    for episode in range(episodes):
        obs, _ = env.reset(seed=derive_seed(seed, "episode", episode) % 2**31)
        recording = record_first and episode == 0
        if recording:
            results.frames.append(env.render())  # type: ignore[arg-type]
        total, steps, done = 0.0, 0, False
        core = policy.initial_state(1)  # None for a feed-forward policy
        while not done:
            fields = {
                k: np.asarray(v)[None] for k, v in split_obs(obs, env.observation_space).items()
            }
            out = policy.act(fields, deterministic, core)
            action = out[0]
            if core is not None:
                core = out[-1]  # the state after this step, for the next one
            obs, reward, terminated, truncated, info = env.step(to_env(action[0]))
            total += float(reward)
            steps += 1
            done = bool(terminated or truncated)
            if done and isinstance(info.get("episode_metrics"), dict):
                results.add_metrics(info["episode_metrics"])
            if recording:
                results.frames.append(env.render())  # type: ignore[arg-type]
            if on_step is not None:
                on_step()
        results.returns.append(total)
        results.lengths.append(steps)
    return results


def play_multiagent_episodes(
    group: MultiAgentGroup,
    policies: dict[str, ActingPolicy],
    episodes: int,
    seed: int,
    deterministic: bool,
    record_first: bool = False,
    on_step: Callable[[], None] | None = None,
) -> tuple[EpisodeResults, dict[str, list[float]]]:
    """`play_episodes` for a one-env multi-agent group (surge/envs/multiagent.py): each
    policy (by lane, in `group.lanes`' order) acts for its agents' rows at once. An episode's
    return is the first policy's team return (summed over its agents), its length the env's
    steps; the second value has every policy's team returns."""
    results = EpisodeResults()
    returns: dict[str, list[float]] = {p: [] for p in group.lanes}
    env = group.envs[0]
    for episode in range(episodes):
        group.seeds = [derive_seed(seed, "episode", episode) % 2**31]
        group.reset()
        recording = record_first and episode == 0
        if recording:
            results.frames.append(env.render())
        totals = dict.fromkeys(group.lanes, 0.0)
        steps = 0
        lanes = list(zip(group.lanes, policies.values(), strict=True))
        # a recurrent policy's state per row of its lane: zero at the episode's start,
        # carried from step to step, zeroed where the row's agent is out (as the actors do)
        cores = {p: policy.initial_state(group.lanes[p].size) for p, policy in lanes}
        while True:
            actions = {}
            for p, policy in lanes:
                out = policy.act(group.lanes[p].obs_out, deterministic, cores[p])
                actions[p] = out[0]
                if cores[p] is not None:
                    cores[p] = out[-1]
            group.step(actions)
            for p, lane in group.lanes.items():
                totals[p] += float(lane.score[0])
                core = cores[p]
                if core is not None:
                    carry(core, lane.terminated | lane.truncated, core)
            steps += 1
            if recording and not group.game_over[0]:
                results.frames.append(env.render())
            if on_step is not None:
                on_step()
            if group.game_over[0]:
                break
        for p, total in totals.items():
            returns[p].append(total)
        results.returns.append(next(iter(totals.values())))
        results.lengths.append(steps)
    return results, returns


def render_fps(env: Any) -> float:
    return float(env.metadata.get("render_fps") or 30)
