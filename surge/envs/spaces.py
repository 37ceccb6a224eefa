"""The env contract in terms of arrays: which spaces surge accepts and how they are stored.

Observations become a flat dict of named fields (`"obs"` for a single Box or Discrete space,
the Dict keys joined with "." for Dict spaces). Every field and the action have a fixed
shape and dtype, so streams can preallocate their buffers once at start.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np

from surge.errors import EnvSpecError

OBS_KEY = "obs"


@dataclass(frozen=True)
class ArraySpec:
    """Shape (per env) and dtype of one stored array."""

    shape: tuple[int, ...]
    dtype: np.dtype[Any]


def flatten_obs_space(space: gym.Space[Any], prefix: str = "") -> dict[str, gym.Space[Any]]:
    """Map an observation space to named leaf spaces (Box or Discrete)."""
    if isinstance(space, gym.spaces.Dict):
        leaves: dict[str, gym.Space[Any]] = {}
        for key, sub in space.spaces.items():
            leaves.update(flatten_obs_space(sub, f"{prefix}{key}."))
        return leaves
    name = prefix[:-1] if prefix else OBS_KEY
    if isinstance(space, (gym.spaces.Box, gym.spaces.Discrete)):
        return {name: space}
    raise EnvSpecError(
        f"observation space {space!r}{f' (at key {name!r})' if prefix else ''} is not supported",
        "surge accepts Box, Discrete and Dict observation spaces; wrap the env with a "
        "gymnasium.ObservationWrapper (e.g. gymnasium.wrappers.FlattenObservation) to convert it",
    )


def leaf_spec(space: gym.Space[Any]) -> ArraySpec:
    if isinstance(space, gym.spaces.Discrete):
        return ArraySpec((), np.dtype(np.int64))
    assert isinstance(space, gym.spaces.Box)
    return ArraySpec(tuple(space.shape), np.dtype(space.dtype))


def obs_specs(space: gym.Space[Any]) -> dict[str, ArraySpec]:
    return {name: leaf_spec(sub) for name, sub in flatten_obs_space(space).items()}


def action_spec(space: gym.Space[Any]) -> ArraySpec:
    if isinstance(space, gym.spaces.Discrete):
        return ArraySpec((), np.dtype(np.int64))
    if isinstance(space, gym.spaces.MultiDiscrete):
        if space.nvec.ndim != 1:
            raise EnvSpecError(
                f"MultiDiscrete action space with nvec shape {space.nvec.shape} is not supported",
                "use a one-dimensional nvec",
            )
        return ArraySpec(tuple(space.nvec.shape), np.dtype(np.int64))
    if isinstance(space, gym.spaces.Box):
        if len(space.shape) != 1:
            raise EnvSpecError(
                f"Box action space of shape {space.shape} is not supported",
                "flatten the action space to one dimension with a gymnasium.ActionWrapper",
            )
        return ArraySpec(tuple(space.shape), np.dtype(np.float32))
    raise EnvSpecError(
        f"action space {space!r} is not supported",
        "surge accepts Discrete, MultiDiscrete and Box action spaces",
    )


def split_obs(obs: Any, space: gym.Space[Any]) -> dict[str, Any]:
    """One env's observation as a dict of leaf values, keyed like `flatten_obs_space`."""
    if isinstance(space, gym.spaces.Dict):
        out: dict[str, Any] = {}
        _split_into(obs, space, "", out)
        return out
    return {OBS_KEY: obs}


def _split_into(obs: Any, space: gym.spaces.Dict, prefix: str, out: dict[str, Any]) -> None:
    for key, sub in space.spaces.items():
        if isinstance(sub, gym.spaces.Dict):
            _split_into(obs[key], sub, f"{prefix}{key}.", out)
        else:
            out[f"{prefix}{key}"] = obs[key]
