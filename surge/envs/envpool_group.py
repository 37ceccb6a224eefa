"""Backend `envpool`: env groups on EnvPool (https://envpool.readthedocs.io), where installed.

EnvPool steps a batch of envs in C++ threads and ships its own Atari ROMs and classic
control envs. Its ids drop gymnasium's `ALE/` prefix (`ALE/Pong-v5` is `Pong-v5`); other ids
(`CartPole-v1`) are the same. Like ale-py's vector env it autoresets in "next step" mode,
so the groups here reset finished envs at once by id (EnvPool resets a subset of a
synchronous pool), keeping the group contract of `surge.envs.group.EnvGroup`: after
`step` the slot holds the observation to act on and `final_obs` the one an episode ended
with. Atari preprocessing is EnvPool's (the same recipe as ale-py's: no-op starts, FIRE
reset, frame skip with max-pool, 84x84 grey with area interpolation, sticky actions);
frame stacking, episodic life and reward clipping are done by `VectorAtariGroup`.

EnvPool seeds its envs `seed, seed + 1, ...` from one seed: a group passes its first.
"""

from __future__ import annotations

import os
import warnings
from typing import Any

import gymnasium as gym
import numpy as np

from surge.config.schema import EnvConfig
from surge.envs.atari import ALE_PREFIX, VectorAtariGroup, is_atari_id, max_frames
from surge.envs.spaces import OBS_KEY
from surge.errors import ConfigError, EnvSpecError


def envpool_task_id(env_id: str) -> str:
    """EnvPool's name for a gymnasium id: `ALE/Pong-v5` -> `Pong-v5`, others unchanged.
    Raises a ConfigError naming the id when EnvPool does not have it."""
    import envpool

    task = env_id[len(ALE_PREFIX) :] if env_id.startswith(ALE_PREFIX) else env_id
    known = envpool.list_all_envs()
    if task not in known:
        raise ConfigError(
            f"env.backend=envpool: EnvPool has no env {task!r} (from env.id={env_id!r})",
            "see envpool.list_all_envs() for its ids, or use env.backend=auto",
        )
    return task


def make_envpool(cfg: EnvConfig, num_envs: int, seed: int) -> Any:
    """A synchronous EnvPool of `num_envs` envs with surge's settings for `cfg`."""
    import envpool

    kwargs: dict[str, Any] = {
        "num_envs": num_envs,
        "batch_size": num_envs,  # synchronous: every step returns every env
        "num_threads": cfg.threads or os.cpu_count() or 1,
        "seed": seed,
    }
    if is_atari_id(cfg.id):
        a = cfg.atari
        kwargs.update(
            stack_num=1,  # stacked by the group: a new stack repeats its first frame
            frame_skip=a.frame_skip,
            noop_max=a.noop_max,
            img_height=a.screen_size,
            img_width=a.screen_size,
            repeat_action_probability=a.repeat_action_probability,
            full_action_space=a.full_action_space,
            use_fire_reset=a.fire_reset,
            episodic_life=False,  # the group ends training episodes on lives
            reward_clip=False,  # the raw reward is the reported score
            max_episode_steps=max_frames(cfg) // a.frame_skip,  # EnvPool counts agent steps
        )
    elif cfg.max_episode_steps is not None:
        kwargs["max_episode_steps"] = cfg.max_episode_steps
    kwargs.update(cfg.kwargs)
    return envpool.make(envpool_task_id(cfg.id), env_type="gymnasium", **kwargs)


def envpool_spaces(env: Any) -> tuple[gym.Space[Any], gym.Space[Any]]:
    """(observation space, action space) of one env of the pool."""
    with warnings.catch_warnings():  # EnvPool declares float64 bounds on float32 Boxes
        warnings.filterwarnings("ignore", message=".*precision lowered.*")
        return env.observation_space, env.action_space


def _reset_ids(env: Any, mask: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
    """Reset the envs where `mask`: (obs, lives or None), rows in ascending env id order
    (the order in which `array[mask]` lists them)."""
    obs, info = env.reset(np.flatnonzero(mask).astype(np.int32))
    order = np.argsort(info["env_id"])
    lives = info.get("lives")
    return obs[order], (np.asarray(lives)[order] if lives is not None else None)


class EnvpoolAtariGroup(VectorAtariGroup):
    """Backend `envpool` for `ALE/*` ids: Atari on EnvPool, preprocessed like `AleGroup`."""

    def __init__(self, cfg: EnvConfig, seeds: list[int], obs_out: dict[str, np.ndarray]) -> None:
        super().__init__(cfg, seeds, obs_out)
        self.env = make_envpool(cfg, self.size, seeds[0])
        self.action_space: gym.Space[Any] = envpool_spaces(self.env)[1]

    def _reset_all(self) -> tuple[np.ndarray, np.ndarray]:
        return self._reset_some(np.ones(self.size, bool))

    def _reset_some(self, mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        frames, lives = _reset_ids(self.env, mask)
        assert lives is not None  # EnvPool's Atari envs report lives
        return frames, lives


class EnvpoolGroup:
    """Backend `envpool` for EnvPool's other envs with a Box observation (classic control,
    MuJoCo, ...). No reward shaping: `score` is `rewards`, `game_over` is the episode end."""

    def __init__(self, cfg: EnvConfig, seeds: list[int], obs_out: dict[str, np.ndarray]) -> None:
        self.cfg = cfg
        self.size = len(seeds)
        self.env = make_envpool(cfg, self.size, seeds[0])
        self.observation_space, self.action_space = envpool_spaces(self.env)
        if not isinstance(self.observation_space, gym.spaces.Box):
            raise EnvSpecError(
                f"env.backend=envpool: {cfg.id!r} has observation space "
                f"{self.observation_space!r}; surge's EnvPool group takes Box observations",
                "use env.backend=gymnasium for this env",
            )
        self._obs = obs_out[OBS_KEY]
        self.final_obs = {OBS_KEY: np.zeros_like(self._obs)}
        self.rewards = np.zeros(self.size, np.float32)
        self.score = self.rewards
        self.terminated = np.zeros(self.size, bool)
        self.truncated = np.zeros(self.size, bool)
        self.game_over = np.zeros(self.size, bool)
        space = self.action_space
        self._clip = (
            (space.low, space.high)
            if isinstance(space, gym.spaces.Box) and cfg.clip_actions
            else None
        )

    def reset(self) -> None:
        self._obs[:] = _reset_ids(self.env, np.ones(self.size, bool))[0]

    def step(self, actions: np.ndarray) -> None:
        if self._clip is not None:
            actions = np.clip(actions, *self._clip)
        obs, reward, terminated, truncated, _ = self.env.step(actions)
        np.copyto(self.rewards, reward)
        np.copyto(self.terminated, terminated)
        np.copyto(self.truncated, truncated)
        np.logical_or(terminated, truncated, out=self.game_over)
        self._obs[:] = obs
        if self.game_over.any():
            self.final_obs[OBS_KEY][self.game_over] = obs[self.game_over]
            self._obs[self.game_over] = _reset_ids(self.env, self.game_over)[0]

    def close(self) -> None:
        self.env.close()
