"""The actor-critic's inference path in numpy, for MLP policies: fast, and no torch import.

For the few-row batches of acting (a group of 2-16 envs), torch's per-operator dispatch costs
more than the arithmetic: `ActorCritic.act` takes about 135 us on CartPole where the same
maths in numpy takes about 20 us. So actors that run their policy inline, and policy workers
serving MLP policies, act through this module. It reads the trainer's flat parameter vector
directly (weights are views into it, no copy per reload).

`numpy_layout` mirrors `ActorCritic`'s parameter order and shapes from the config and spaces
alone (FlatEncoder -> MLP torso(s) -> action head, value head); it returns None for models it
does not cover (image encoders), and callers fall back to torch. tests/unit/test_numpy_policy.py
checks the mirror against the torch model for every supported space.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np

from surge.config.schema import ModelConfig
from surge.envs.spaces import flatten_obs_space

_LOG_SQRT_2PI = 0.5 * math.log(2.0 * math.pi)


@dataclass(frozen=True)
class NumpyLayout:
    """Where each parameter sits in the flat vector, and how the network is wired."""

    params: list[tuple[str, tuple[int, ...]]]  # in ActorCritic.parameters() order
    fields: list[tuple[str, int, int]]  # FlatEncoder: (key, one-hot n or 0, start)
    activation: str
    layers: int
    shared: bool
    head: str  # "categorical" | "multi_categorical" | "gaussian"
    nvec: tuple[int, ...]  # categorical sizes (one entry for Discrete)
    start: tuple[int, ...]  # action offsets per component


def numpy_layout(
    obs_space: gym.Space[Any], action_space: gym.Space[Any], cfg: ModelConfig
) -> NumpyLayout | None:
    """The layout for this model, or None when the numpy path does not cover it."""
    if cfg.encoder == "nature_cnn":
        return None
    leaves = flatten_obs_space(obs_space)
    fields: list[tuple[str, int, int]] = []
    in_dim = 0
    for key in sorted(leaves):
        space = leaves[key]
        if isinstance(space, gym.spaces.Discrete):
            fields.append((key, int(space.n), int(space.start)))
            in_dim += int(space.n)
        elif isinstance(space, gym.spaces.Box):
            if cfg.encoder == "auto" and space.dtype == np.uint8 and len(space.shape) == 3:
                return None  # an image: the CNN encoder's job
            fields.append((key, 0, 0))
            in_dim += math.prod(space.shape)
        else:
            return None
    params: list[tuple[str, tuple[int, ...]]] = []
    nvec: tuple[int, ...]
    start: tuple[int, ...]

    def torso(name: str) -> int:
        width = in_dim
        for i, h in enumerate(cfg.hidden_sizes):
            params.extend([(f"{name}.{2 * i}.weight", (h, width)), (f"{name}.{2 * i}.bias", (h,))])
            width = h
        return width

    feat = torso("actor_torso")
    if not cfg.shared:
        torso("critic_torso")
    if isinstance(action_space, gym.spaces.Discrete):
        head, nvec, start = "categorical", (int(action_space.n),), (int(action_space.start),)
        out = nvec[0]
    elif isinstance(action_space, gym.spaces.MultiDiscrete) and action_space.nvec.ndim == 1:
        head = "multi_categorical"
        nvec = tuple(int(n) for n in action_space.nvec)
        start = tuple(int(s) for s in action_space.start)
        out = sum(nvec)
    elif isinstance(action_space, gym.spaces.Box) and len(action_space.shape) == 1:
        head, nvec, start = "gaussian", (), ()
        out = int(action_space.shape[0])
    else:
        return None
    if head == "gaussian":  # registered before the linear layer in GaussianHead
        params.append(("action_head.log_std", (out,)))
    params += [("action_head.linear.weight", (out, feat)), ("action_head.linear.bias", (out,))]
    params += [("value_head.weight", (1, feat)), ("value_head.bias", (1,))]
    return NumpyLayout(
        params, fields, cfg.activation, len(cfg.hidden_sizes), cfg.shared, head, nvec, start
    )


def layout_size(layout: NumpyLayout) -> int:
    return sum(math.prod(shape) for _, shape in layout.params)


def flat_features(layout: NumpyLayout, obs: dict[str, np.ndarray]) -> np.ndarray:
    """`FlatEncoder` in numpy: [B, features] float32 from a dict of [B, ...] fields."""
    parts = []
    for key, n, start in layout.fields:
        x = obs[key]
        if n:
            idx = x.reshape(len(x)).astype(np.int64) - start
            parts.append(np.eye(n, dtype=np.float32)[idx])
        else:
            parts.append(x.reshape(len(x), -1).astype(np.float32, copy=False))
    return parts[0] if len(parts) == 1 else np.concatenate(parts, axis=-1)


class NumpyPolicy:
    """`act(obs) -> (action, logp, value)` with the same maths as `ActorCritic.act`.

    `flat` is the parameter vector (float32); the weights are views into it, so writing new
    parameters into `flat` in place updates the policy.
    """

    def __init__(self, layout: NumpyLayout, flat: np.ndarray, rng: np.random.Generator) -> None:
        if flat.dtype != np.float32 or flat.size != layout_size(layout):
            raise ValueError(f"flat parameters: want {layout_size(layout)} float32 values")
        self.layout = layout
        self.rng = rng
        w: dict[str, np.ndarray] = {}
        offset = 0
        for name, shape in layout.params:
            n = math.prod(shape)
            w[name] = flat[offset : offset + n].reshape(shape)
            offset += n
        # Pre-transposed views: x @ W.T without a transpose per call.
        self._actor = [
            (w[f"actor_torso.{2 * i}.weight"].T, w[f"actor_torso.{2 * i}.bias"])
            for i in range(layout.layers)
        ]
        self._critic = (
            None
            if layout.shared
            else [
                (w[f"critic_torso.{2 * i}.weight"].T, w[f"critic_torso.{2 * i}.bias"])
                for i in range(layout.layers)
            ]
        )
        self._head = (w["action_head.linear.weight"].T, w["action_head.linear.bias"])
        self._log_std = w.get("action_head.log_std")
        self._value = (w["value_head.weight"].T, w["value_head.bias"])
        self._act = np.tanh if layout.activation == "tanh" else _relu

    def features(self, obs: dict[str, np.ndarray]) -> np.ndarray:
        return flat_features(self.layout, obs)

    def _torso(self, x: np.ndarray, layers: list[tuple[np.ndarray, np.ndarray]]) -> np.ndarray:
        for wt, b in layers:
            x = self._act(x @ wt + b)
        return x

    def act(
        self, obs: dict[str, np.ndarray], deterministic: bool = False
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        x = self.features(obs)
        pi = self._torso(x, self._actor)
        v = pi if self._critic is None else self._torso(x, self._critic)
        value = (v @ self._value[0] + self._value[1])[:, 0]
        params = pi @ self._head[0] + self._head[1]
        lay = self.layout
        if lay.head == "gaussian":
            assert self._log_std is not None
            if deterministic:
                action = params
            else:
                noise = self.rng.standard_normal(params.shape, dtype=np.float32)
                action = params + np.exp(self._log_std) * noise
            z = (action - params) * np.exp(-self._log_std)
            logp = (-0.5 * z * z - self._log_std - _LOG_SQRT_2PI).sum(-1)
            return action.astype(np.float32), logp.astype(np.float32), value
        idx_parts, logp = [], np.zeros(len(params), np.float32)
        col = 0
        for n in lay.nvec:
            logits = params[:, col : col + n]
            col += n
            shifted = logits - logits.max(-1, keepdims=True)
            logp_all = shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))
            if deterministic:
                idx = logits.argmax(-1)
            else:  # inverse CDF, one uniform per row, as surge.models.distributions does
                cdf = np.exp(logp_all).cumsum(-1)
                u = self.rng.random((len(cdf), 1), dtype=np.float32)
                idx = np.minimum((cdf < u).sum(-1), n - 1)
            logp += np.take_along_axis(logp_all, idx[:, None], -1)[:, 0]
            idx_parts.append(idx)
        if lay.head == "categorical":
            action = idx_parts[0] + lay.start[0]
        else:
            action = np.stack(idx_parts, axis=-1) + np.asarray(lay.start)
        return action.astype(np.int64), logp, value


def _relu(x: np.ndarray) -> np.ndarray:
    return np.maximum(x, 0.0, out=x)
