"""Building Gymnasium envs from the config, and checking them once at start."""

from __future__ import annotations

import difflib
import importlib
import typing
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import gymnasium as gym
import numpy as np

from surge.config.schema import EnvConfig, ExperimentConfig
from surge.envs.atari import (
    AleGroup,
    atari_observation_space,
    is_atari_id,
    make_atari_env,
    resolve_backend,
)
from surge.envs.openspiel import is_openspiel_id, make_openspiel_env
from surge.envs.selfplay import OpponentSource, is_selfplay_id, make_selfplay_env
from surge.envs.spaces import EnvInfo, check_observation, info_spec
from surge.errors import ConfigError, EnvSpecError


def make_env(cfg: EnvConfig, opponents: OpponentSource | None = None) -> gym.Env[Any, Any]:
    """`gymnasium.make(cfg.id)`; `module:Env-v0` imports `module` first (gymnasium's own syntax).

    `ALE/*` ids get the Atari preprocessing of `env.atari` (raw rewards, real game ends:
    clipping and episodic life belong to the env group). `selfplay:` ids are the learner's
    seat of a two-player game against `opponents` (surge/envs/selfplay.py; None: a random
    player); `openspiel:` ids a seat of an OpenSpiel game (surge/envs/openspiel.py). Then
    `env.wrappers`, in order."""
    wrappers = [load_wrapper(spec, i) for i, spec in enumerate(cfg.wrappers)]
    env = _make(cfg, opponents)
    for i, wrapper in enumerate(wrappers):
        env = wrapper(env)
        if not isinstance(env, gym.Env):
            raise ConfigError(
                f"env.wrappers[{i}]={cfg.wrappers[i]!r} returned {type(env).__name__}, "
                "not a gymnasium.Env",
                "name a gymnasium.Wrapper subclass, or a function that takes the env and "
                "returns the wrapped env",
            )
    return env


def load_wrapper(spec: str, i: int = 0) -> Callable[[gym.Env[Any, Any]], Any]:
    """The callable an `env.wrappers` entry names: `module:Name` or `module.Name`."""
    module, sep, name = spec.partition(":")
    if not sep:
        module, _, name = spec.rpartition(".")
    where = f"env.wrappers[{i}]={spec!r}"
    if not module or not name:
        raise ConfigError(
            f"{where}: not an import path",
            "write `module:Name` (or `module.Name`), e.g. minigrid.wrappers:ImgObsWrapper",
        )
    try:
        obj = getattr(importlib.import_module(module), name)
    except ImportError as e:
        raise ConfigError(
            f"{where}: cannot import module {module!r} ({e})",
            "install the package that provides it (MiniGrid's: pip install -e '.[minigrid]'), "
            "or put the module on PYTHONPATH",
        ) from None
    except AttributeError:
        raise ConfigError(
            f"{where}: module {module!r} has no attribute {name!r}",
            "check the spelling: `module:Name` names a wrapper class or function",
        ) from None
    if not callable(obj):
        raise ConfigError(
            f"{where}: {type(obj).__name__} is not callable",
            "name a gymnasium.Wrapper subclass, or a function that takes the env",
        )
    return typing.cast(Callable[[gym.Env[Any, Any]], Any], obj)


def _make(cfg: EnvConfig, opponents: OpponentSource | None) -> gym.Env[Any, Any]:
    if is_atari_id(cfg.id):
        return make_atari_env(cfg)
    if is_openspiel_id(cfg.id):
        return make_openspiel_env(cfg.id, dict(cfg.kwargs))
    if is_selfplay_id(cfg.id):
        kwargs = dict(cfg.kwargs)
        render_mode = kwargs.pop("render_mode", None)
        return make_selfplay_env(cfg.id, kwargs, opponents, render_mode)
    kwargs = dict(cfg.kwargs)
    if cfg.max_episode_steps is not None:
        kwargs["max_episode_steps"] = cfg.max_episode_steps
    try:
        return gym.make(cfg.id, **kwargs)
    except ModuleNotFoundError as e:
        module = cfg.id.split(":")[0]
        raise EnvSpecError(
            f"env.id={cfg.id!r}: cannot import module {module!r} ({e})",
            "make sure the module is importable (installed, or on PYTHONPATH) and registers the env"
            " with gymnasium.register(...) at import",
        ) from None
    except (TypeError, ValueError) as e:
        # the env's constructor rejected an argument: a setting the user wrote in env.kwargs
        # (a misspelt keyword is a TypeError). Chained, so the API still shows where. With
        # no arguments given, the error is the env's own: raised as it is.
        if not kwargs:
            raise
        given = ", ".join(sorted(kwargs))
        raise ConfigError(
            f"env.id={cfg.id!r}: its constructor rejected env.kwargs ({given}): "
            f"{type(e).__name__}: {e}",
            "fix or remove the env.kwargs value the message names (the env's own docs list "
            "its arguments)",
        ) from e
    except gym.error.Error as e:
        known = list(gym.registry.keys())
        close = difflib.get_close_matches(cfg.id.split(":")[-1], known, n=3)
        hint = f"did you mean {', '.join(close)}? " if close else ""
        raise EnvSpecError(
            f"env.id={cfg.id!r}: {e}",
            f"{hint}use a registered Gymnasium id, or `module:EnvName-v0` for your own env",
        ) from None


def probe_env(cfg: EnvConfig, seed: int) -> EnvInfo:
    """Build one env, check its spaces and that reset/step return what they declare.

    For the `ale` and `envpool` backends: build a one-env group, step it once, and return
    its spaces (for Atari: the preprocessed frame stack and the game's action set)."""
    from surge.envs.pettingzoo import is_pettingzoo_id

    if is_pettingzoo_id(cfg.id):  # every agent to one policy (several: probe_policies)
        from surge.envs.multiagent import probe_multiagent

        if cfg.info_keys:
            raise ConfigError(
                f"env.info_keys: recorded for single-agent envs; env.id={cfg.id} has agents",
                "remove env.info_keys",
            )
        return next(iter(probe_multiagent(cfg, seed).values()))
    backend = resolve_backend(cfg)
    for setting, value in (("env.wrappers", cfg.wrappers), ("env.info_keys", cfg.info_keys)):
        if value and backend != "gymnasium":
            raise ConfigError(
                f"{setting} apply to gymnasium envs; env.backend={backend} steps its own "
                "vectorised envs",
                f"set env.backend=gymnasium to use {setting}, or remove {setting}",
            )
    if cfg.info_keys and is_selfplay_id(cfg.id):
        raise ConfigError(
            f"env.info_keys: not recorded in self-play games (env.id={cfg.id})",
            "remove env.info_keys",
        )
    if backend == "ale":
        return _probe_ale(cfg, seed)
    if backend == "envpool":
        return _probe_envpool(cfg, seed)
    env = make_env(cfg)
    try:
        info = EnvInfo(env.observation_space, env.action_space)
        info.obs  # noqa: B018 - raises for unsupported observation spaces
        info.action  # noqa: B018 - raises for unsupported action spaces
        obs, _ = env.reset(seed=seed)
        check_observation(cfg.id, "reset()", obs, env.observation_space)
        env.action_space.seed(seed)
        result = env.step(env.action_space.sample())
        if not isinstance(result, tuple) or len(result) != 5:
            raise EnvSpecError(
                f"env {cfg.id!r}: step() returned {type(result).__name__} of length "
                f"{len(result) if isinstance(result, tuple) else '?'}",
                "step() must return (observation, reward, terminated, truncated, info) as in the "
                "Gymnasium >= 0.26 API; wrap old-style envs with gymnasium's compatibility wrapper",
            )
        obs, reward, terminated, truncated, step_info = result
        check_observation(cfg.id, "step()", obs, env.observation_space)
        reward_shape = np.shape(np.asarray(reward))
        if reward_shape != ():
            raise EnvSpecError(
                f"env {cfg.id!r}: step() returned a reward of shape {reward_shape}",
                "single-agent envs return one scalar reward per step",
            )
        for name, flag in (("terminated", terminated), ("truncated", truncated)):
            if not isinstance(flag, (bool, np.bool_)):
                raise EnvSpecError(
                    f"env {cfg.id!r}: step() returned {name}={flag!r} ({type(flag).__name__})",
                    f"return a Python bool for {name}",
                )
        recorded = {k: info_spec(cfg.id, k, step_info) for k in cfg.info_keys}
        return replace(info, info=recorded) if recorded else info
    finally:
        env.close()


def _probe_ale(cfg: EnvConfig, seed: int) -> EnvInfo:
    space = atari_observation_space(cfg.atari)
    obs = {"obs": np.zeros((1, *space.shape), np.uint8)}
    group = AleGroup(cfg, [seed], obs)
    try:
        group.reset()
        group.step(np.zeros(1, np.int64))
        check_observation(cfg.id, "step()", obs["obs"][0], group.observation_space)
        return EnvInfo(group.observation_space, group.action_space)
    finally:
        group.close()


def _probe_envpool(cfg: EnvConfig, seed: int) -> EnvInfo:
    from surge.envs.envpool_group import envpool_spaces, make_envpool

    env = make_envpool(cfg, 1, seed)
    try:
        obs_space, action_space = envpool_spaces(env)
        if is_atari_id(cfg.id):
            obs_space = atari_observation_space(cfg.atari)
        info = EnvInfo(obs_space, action_space)
        info.obs  # noqa: B018 - raises for unsupported observation spaces
        info.action  # noqa: B018 - raises for unsupported action spaces
        env.reset()
        action_space.seed(seed)
        env.step(np.stack([action_space.sample()]))
        return info
    finally:
        env.close()


def probe_policies(cfg: ExperimentConfig) -> dict[str, EnvInfo]:
    """Each policy's view of the env (`policies`, `policy_mapping`): for a multi-agent env its
    agents' rows (surge/envs/multiagent.py), otherwise the one policy's `probe_env`."""
    from surge.envs.pettingzoo import is_pettingzoo_id

    if is_pettingzoo_id(cfg.env.id):
        from surge.envs.multiagent import probe_multiagent

        return probe_multiagent(cfg.env, cfg.seed, cfg.policy_names, cfg.policy_mapping)
    return {cfg.policy_names[0]: probe_env(cfg.env, cfg.seed)}
