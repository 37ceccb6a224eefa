"""An env group: a few envs stepped together, writing straight into preallocated arrays.

The group writes observations into arrays it is given (an actor passes views of its shared
inference slot), so an observation is produced in place, once. Finished episodes are reset
here, and the final observation of each is kept in `final_obs`: the trainer needs it to
bootstrap episodes cut by a time limit.
"""

from __future__ import annotations

from typing import Any, Protocol

import gymnasium as gym
import numpy as np

from surge.config.schema import EnvConfig
from surge.envs.atari import AleGroup, is_atari_id, resolve_backend
from surge.envs.make import make_env
from surge.envs.selfplay import OpponentSource, SelfPlayGroup, is_selfplay_id
from surge.envs.spaces import action_converter, check_observation, info_spec, split_obs


class EnvGroup:
    """Envs made with `gymnasium.make`, stepped one after another (backend `gymnasium`).

    The contract every backend's group follows (the actor relies on nothing else):
    `size`, `observation_space` / `action_space` (of one env), `reset()`, `step(actions)`,
    `close()`, and after each step the arrays `rewards` (what the learner trains on),
    `terminated` / `truncated` (ends of training episodes), `final_obs` (valid where an
    episode ended), `score` (the raw reward, for reported returns) and `game_over` (the end
    of a reported episode). They differ only when a wrapper reshapes the training signal,
    as Atari's reward clipping and episodic life do. Groups of gymnasium envs also keep
    `info`: the step's `env.info_keys` entries, [size, ...] each (made at the first step).
    """

    def __init__(
        self,
        cfg: EnvConfig,
        seeds: list[int],
        obs_out: dict[str, np.ndarray],
        opponents: OpponentSource | None = None,
    ) -> None:
        self.cfg = cfg
        self.envs = [make_env(cfg, opponents) for _ in seeds]
        self.seeds = seeds
        self.size = len(seeds)
        self.obs_out = obs_out  # [G, ...] per field
        self.final_obs = {k: np.zeros_like(v) for k, v in obs_out.items()}
        self.rewards = np.zeros(self.size, np.float32)
        self.terminated = np.zeros(self.size, bool)
        self.truncated = np.zeros(self.size, bool)
        self.score = self.rewards  # no reward shaping here: the same array
        self.game_over = np.zeros(self.size, bool)
        self.observation_space: gym.Space[Any] = self.envs[0].observation_space
        self.action_space: gym.Space[Any] = self.envs[0].action_space
        self._to_env = action_converter(self.action_space, cfg.clip_actions)
        self.info: dict[str, np.ndarray] = {}

    def reset(self) -> None:
        """Reset every env with its seed and write the first observations."""
        for i, (env, seed) in enumerate(zip(self.envs, self.seeds, strict=True)):
            obs, _ = env.reset(seed=seed)
            self._write(self.obs_out, i, obs, "reset()")

    def step(self, actions: np.ndarray) -> None:
        """Step every env; finished ones are reset and their last observation kept."""
        for i, env in enumerate(self.envs):
            obs, reward, terminated, truncated, info = env.step(self._to_env(actions[i]))
            if self.cfg.info_keys:
                self._record(i, info)
            self.rewards[i] = reward
            self.terminated[i] = terminated
            self.truncated[i] = truncated
            if terminated or truncated:
                self._write(self.final_obs, i, obs, "step()")
                obs, _ = env.reset()
            self._write(self.obs_out, i, obs, "step()")
        np.logical_or(self.terminated, self.truncated, out=self.game_over)

    def _record(self, i: int, info: dict[str, Any]) -> None:
        """The step's recorded info entries (before a reset: a last step's own)."""
        for key in self.cfg.info_keys:
            if key not in self.info:
                spec = info_spec(self.cfg.id, key, info)
                self.info[key] = np.zeros((self.size, *spec.shape), spec.dtype)
            self.info[key][i] = info[key]

    def _write(self, out: dict[str, np.ndarray], i: int, obs: Any, where: str) -> None:
        try:
            for key, value in split_obs(obs, self.observation_space).items():
                out[key][i] = value
        except (ValueError, KeyError, TypeError, IndexError):
            # Explain the mismatch with the declared space (raises); re-raise if it matched.
            check_observation(self.cfg.id, where, obs, self.observation_space)
            raise

    def close(self) -> None:
        """Close every env."""
        for env in self.envs:
            env.close()


class GymAtariGroup(EnvGroup):
    """Atari through Gymnasium wrappers, stepped in turn (backend `gymnasium` for `ALE/*`).

    The wrapped env (`surge.envs.atari.make_atari_env`) gives raw rewards and real game
    ends; this group clips the rewards and ends training episodes on lost lives (then the
    game goes on, without a reset), like `AleGroup`.
    """

    def __init__(self, cfg: EnvConfig, seeds: list[int], obs_out: dict[str, np.ndarray]) -> None:
        super().__init__(cfg, seeds, obs_out)
        if cfg.atari.clip_rewards:
            self.rewards = np.zeros(self.size, np.float32)  # score stays the raw reward
        self._lives = np.zeros(self.size, np.int64)
        self._obs, self._final = self.obs_out["obs"], self.final_obs["obs"]

    def reset(self) -> None:
        """Reset every env with its seed, keeping each game's lives."""
        for i, (env, seed) in enumerate(zip(self.envs, self.seeds, strict=True)):
            self._obs[i], info = env.reset(seed=seed)
            self._lives[i] = info["lives"]

    def step(self, actions: np.ndarray) -> None:
        """Step every env with its action; with `env.atari.episodic_life` a lost life ends the
        training episode (not the game)."""
        episodic_life = self.cfg.atari.episodic_life
        for i, env in enumerate(self.envs):
            # a life's first step presses FIRE in the env (atari.py `FireOnLifeLoss`)
            obs, reward, terminated, truncated, info = env.step(int(actions[i]))
            if self.cfg.info_keys:
                self._record(i, info)
            self.score[i] = reward
            life_lost = info["lives"] < self._lives[i]
            self._lives[i] = info["lives"]
            self.game_over[i] = terminated or truncated
            self.terminated[i] = terminated or (episodic_life and life_lost)
            self.truncated[i] = truncated
            if self.terminated[i] or truncated:
                self._final[i] = obs
            if self.game_over[i]:
                obs, info = env.reset()
                self._lives[i] = info["lives"]
            self._obs[i] = obs
        if self.rewards is not self.score:
            np.sign(self.score, out=self.rewards)


class Group(Protocol):
    """The env group contract (documented on `EnvGroup`), which every backend's group meets."""

    size: int
    observation_space: gym.Space[Any]
    action_space: gym.Space[Any]
    rewards: np.ndarray
    terminated: np.ndarray
    truncated: np.ndarray
    final_obs: dict[str, np.ndarray]
    score: np.ndarray
    game_over: np.ndarray

    def reset(self) -> None:
        """Reset every env and write the first observations."""

    def step(self, actions: np.ndarray) -> None:
        """Step every env with its row of `actions`, then fill the arrays of the contract (rewards,
        ends, final observations, scores)."""

    def close(self) -> None:
        """Close every env."""


def make_group(
    cfg: EnvConfig,
    seeds: list[int],
    obs_out: dict[str, np.ndarray],
    opponents: OpponentSource | None = None,
) -> Group:
    """The env group for `cfg.backend` (see EnvGroup for the contract): `auto` is `ale` for
    `ALE/*` ids, else `gymnasium`; Atari ids on `gymnasium` get `GymAtariGroup`; `envpool`
    (surge/envs/envpool_group.py) takes Atari and EnvPool's other Box-observation envs.
    `pettingzoo:` ids get `MultiAgentGroup` (surge/envs/multiagent.py): `seeds` has one seed
    per env, `obs_out` one row per agent of every env. `selfplay:` games play their other
    seat against `opponents`, whose moves `SelfPlayGroup` batches (surge/envs/selfplay.py)."""
    from surge.envs.pettingzoo import is_pettingzoo_id

    if is_pettingzoo_id(cfg.id):
        from surge.envs.multiagent import MultiAgentGroup

        return MultiAgentGroup(cfg, seeds, obs_out)
    backend = resolve_backend(cfg)
    if backend == "ale":
        return AleGroup(cfg, seeds, obs_out)
    if backend == "envpool":
        from surge.envs.envpool_group import EnvpoolAtariGroup, EnvpoolGroup

        if is_atari_id(cfg.id):
            return EnvpoolAtariGroup(cfg, seeds, obs_out)
        return EnvpoolGroup(cfg, seeds, obs_out)
    if is_atari_id(cfg.id):
        return GymAtariGroup(cfg, seeds, obs_out)
    if is_selfplay_id(cfg.id):
        return SelfPlayGroup(cfg, seeds, obs_out, opponents)
    return EnvGroup(cfg, seeds, obs_out, opponents)
