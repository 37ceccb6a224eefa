"""The env contract in terms of arrays: which spaces surge accepts and how they are stored.

Observations become a flat dict of named fields (`"obs"` for a single Box or Discrete space,
the Dict keys joined with "." for Dict spaces). Every field and the action have a fixed
shape and dtype, so streams can preallocate their buffers once at start.
"""

from __future__ import annotations

from dataclasses import dataclass, field
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


@dataclass(frozen=True)
class EnvInfo:
    """What the rest of the system needs to know about an env: its spaces and array layout."""

    observation_space: gym.Space[Any]
    action_space: gym.Space[Any]
    agents: tuple[str, ...] = ()
    """A multi-agent env's agents (`possible_agents`): each is a row of the batch with these
    spaces (surge/envs/multiagent.py). Empty for a single-agent env."""
    info: dict[str, ArraySpec] = field(default_factory=dict)
    """The recorded `info` entries (`env.info_keys`) as a probe step returned them."""

    @property
    def rows_per_env(self) -> int:
        """Rows of a batch each env contributes: its agents, or 1."""
        return max(1, len(self.agents))

    @property
    def obs(self) -> dict[str, ArraySpec]:
        return obs_specs(self.observation_space)

    @property
    def action(self) -> ArraySpec:
        return action_spec(self.action_space)


def info_spec(env_id: str, key: str, info: dict[str, Any]) -> ArraySpec:
    """How a step's `info[key]` is stored: bools as bool, integers as int64, other numbers as
    float32, uint8 arrays (frames) as they are; an EnvSpecError when it is missing or not
    numeric."""
    if key not in info:
        raise EnvSpecError(
            f"env {env_id!r}: env.info_keys names {key!r}, but step() returned info with "
            f"keys {sorted(info)}",
            "name entries the env's step() puts in its info dict",
        )
    value = np.asarray(info[key])
    kind = value.dtype.kind
    dtype: np.dtype[Any]
    if kind == "b" or value.dtype == np.uint8:
        dtype = value.dtype
    elif kind in "iu":
        dtype = np.dtype(np.int64)
    elif kind == "f":
        dtype = np.dtype(np.float32)
    else:
        raise EnvSpecError(
            f"env {env_id!r}: info[{key!r}] is {type(info[key]).__name__} ({value.dtype}), "
            "which cannot be recorded",
            "record numbers, bools or numeric arrays of a fixed shape",
        )
    return ArraySpec(value.shape, dtype)


def check_observation(env_id: str, where: str, obs: Any, space: gym.Space[Any]) -> None:
    """Raise an EnvSpecError saying what was declared and what came back, if they differ."""
    if isinstance(space, gym.spaces.Dict):
        if not isinstance(obs, dict):
            raise EnvSpecError(
                f"env {env_id!r}: observation_space is a Dict with keys {list(space.spaces)}, "
                f"but {where} returned {type(obs).__name__}",
                "return a dict with those keys, or declare the space that the env really returns",
            )
        missing = set(space.spaces) - set(obs)
        extra = set(obs) - set(space.spaces)
        if missing or extra:
            raise EnvSpecError(
                f"env {env_id!r}: {where} returned a dict with keys {sorted(obs)}; the declared "
                f"Dict space has {sorted(space.spaces)} (missing {sorted(missing)}, "
                f"undeclared {sorted(extra)})",
                "make the observation dict and observation_space agree",
            )
    leaves = flatten_obs_space(space)
    for name, value in split_obs(obs, space).items():
        _check_leaf(env_id, where, name, value, leaves[name])


def _check_leaf(env_id: str, where: str, name: str, value: Any, space: gym.Space[Any]) -> None:
    arr = np.asarray(value)
    at = f" at key {name!r}" if name != "obs" else ""
    if isinstance(space, gym.spaces.Discrete):
        if arr.shape != () or not np.issubdtype(arr.dtype, np.integer):
            raise EnvSpecError(
                f"env {env_id!r}: declared {space}{at}, but {where} returned "
                f"{arr.dtype} of shape {arr.shape}",
                "a Discrete observation is one integer; declare a Box space for arrays",
            )
        return
    assert isinstance(space, gym.spaces.Box)
    if arr.shape != space.shape:
        raise EnvSpecError(
            f"env {env_id!r}: declared observation_space {space}{at} (shape {space.shape}), but "
            f"{where} returned shape {arr.shape} ({arr.dtype})",
            f"set observation_space to a Box of shape {arr.shape}, or return arrays of shape "
            f"{space.shape}",
        )
    if not np.can_cast(arr.dtype, space.dtype, casting="same_kind"):
        raise EnvSpecError(
            f"env {env_id!r}: declared observation_space {space}{at} with dtype {space.dtype}, "
            f"but {where} returned dtype {arr.dtype}",
            f"declare dtype={arr.dtype} in the Box, or return {space.dtype} arrays",
        )


def action_converter(space: gym.Space[Any], clip: bool) -> Any:
    """A function from a policy action (numpy) to what `env.step` expects for `space`."""
    if isinstance(space, gym.spaces.Discrete):
        return int
    if isinstance(space, gym.spaces.MultiDiscrete):
        return lambda a: np.array(a, dtype=space.dtype)
    if isinstance(space, gym.spaces.Box):
        low, high, dtype = space.low, space.high, space.dtype
        if clip:
            return lambda a: np.clip(a, low, high).astype(dtype, copy=False)
        return lambda a: np.asarray(a, dtype=dtype)
    raise EnvSpecError(f"action space {space!r} is not supported", "")
