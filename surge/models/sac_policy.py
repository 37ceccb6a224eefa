"""The acting policy of SAC (models/acting.py): the tanh-squashed Gaussian of the published
actor.

The trainer publishes the actor's parameters alone (models/sac_network.py `SACActor`, in
`parameters()` order). `act` returns tanh(mean + std * noise) * scale + bias, the Box's
bounds giving scale and bias (deterministic: tanh(mean) * scale + bias), with the log-std
bounded as the learner bounds it (algos/sac.py `bounded_log_std`). SAC's exploration is the
policy's own noise, plus `RandomStart`'s uniform actions until learning starts
(algos/exploration.py). MLP actors act in numpy, the same maths as `SACActor` (so an actor
or policy worker never imports torch); CNNs compute the heads through the torch actor.
"""

from __future__ import annotations

import math
from typing import Any

import gymnasium as gym
import numpy as np

from surge.config.schema import ExperimentConfig, ModelConfig
from surge.envs.spaces import EnvInfo, flatten_obs_space
from surge.models.images import choose_encoder
from surge.models.numpy_policy import encode_fields, flat_fields
from surge.models.published_net import Observations, Outputs, Params, PublishedNet

LOG_STD_MIN, LOG_STD_MAX = -5.0, 2.0
"""algos/sac.py's bounds of the log-std, repeated here because models sit below algos
(tests/unit/test_layers.py); tests/unit/test_sac_policy.py checks that they agree."""


def box_dims(action_space: gym.Space[Any]) -> int:
    """Action dims of a 1-D Box (what the plug-in checked)."""
    assert isinstance(action_space, gym.spaces.Box), "SAC acts on Box actions"
    return math.prod(action_space.shape)


def box_scale_bias(space: gym.Space[Any]) -> tuple[np.ndarray, np.ndarray]:
    """(scale, bias) [A] float32 of a Box: action = tanh(u) * scale + bias spans its bounds
    (CleanRL: scale = (high - low) / 2, bias = (high + low) / 2)."""
    assert isinstance(space, gym.spaces.Box), "SAC acts on Box actions"
    low = np.asarray(space.low, np.float64).reshape(-1)
    high = np.asarray(space.high, np.float64).reshape(-1)
    return ((high - low) / 2.0).astype(np.float32), ((high + low) / 2.0).astype(np.float32)


def sac_params(obs_space: gym.Space[Any], action_space: gym.Space[Any], cfg: ModelConfig) -> Params:
    """`SACActor`'s parameters (state-dict names and shapes, in `parameters()` order) for
    flat observations, computed without torch; [] for a CNN encoder."""
    leaves = flatten_obs_space(obs_space)
    encoded = flat_fields(leaves, sorted(leaves))  # FlatEncoder: every field, sorted
    if choose_encoder(obs_space, cfg) != "flat" or encoded is None:
        return []
    _, width = encoded
    params: Params = []
    for i, h in enumerate(cfg.hidden_sizes):
        params += [(f"torso.{2 * i}.weight", (h, width)), (f"torso.{2 * i}.bias", (h,))]
        width = h
    dims = box_dims(action_space)
    for head in ("mean", "log_std"):
        params += [(f"{head}.weight", (dims, width)), (f"{head}.bias", (dims,))]
    return params


def count_sac_params(
    obs_space: gym.Space[Any], action_space: gym.Space[Any], cfg: ModelConfig
) -> int:
    """Floats in the published vector: the actor's parameters."""
    params = sac_params(obs_space, action_space, cfg)
    if params:
        return sum(math.prod(shape) for _, shape in params)
    from surge.models.sac_network import SACActor  # a CNN: built once to count

    return sum(p.numel() for p in SACActor(obs_space, action_space, cfg).parameters())


def bound_log_std(raw: np.ndarray) -> np.ndarray:
    """algos/sac.py `bounded_log_std` in numpy: raw outputs smoothly into the bounds."""
    return LOG_STD_MIN + 0.5 * (LOG_STD_MAX - LOG_STD_MIN) * (np.tanh(raw) + 1.0)


def sac_policy(env: EnvInfo, cfg: ExperimentConfig, seed: int, device: str = "cpu") -> SACPolicy:
    """The acting policy of `algo: sac` (`RunContext.acting_policy`)."""
    return SACPolicy(env.observation_space, env.action_space, cfg.model, seed, device)


class SACPolicy(PublishedNet):
    """The squashed Gaussian of the loaded version (see the module docstring)."""

    OUTPUTS: dict[str, tuple[str, tuple[int, ...]]] = {}  # SAC's samples carry none

    def __init__(
        self,
        obs_space: gym.Space[Any],
        action_space: gym.Space[Any],
        cfg: ModelConfig,
        seed: int,
        device: str = "cpu",
    ) -> None:
        self.scale, self.bias = box_scale_bias(action_space)
        self.rng = np.random.default_rng(seed)
        super().__init__(
            obs_space, sac_params(obs_space, action_space, cfg),
            sorted(flatten_obs_space(obs_space)),  # FlatEncoder: every field, sorted
            lambda: _sac_actor(obs_space, action_space, cfg), cfg.activation, device,
        )  # fmt: skip
        self.reload()

    def bind(self, views: list[np.ndarray]) -> None:
        pairs = self.linear_pairs(views)
        self.torso, (self.mean_head, self.log_std_head) = pairs[:-2], pairs[-2:]

    def heads(self, obs: Observations) -> tuple[np.ndarray, np.ndarray]:
        """(mean [B, A], bounded log-std [B, A]) float32 of the Gaussian before the tanh."""
        if self.net is not None:
            import torch

            with torch.inference_mode():
                mean_t, raw_t = self.net(self.torch_inputs(obs))
            mean, raw = mean_t.cpu().numpy(), raw_t.cpu().numpy()
        else:
            h = self.mlp(encode_fields(self.fields, obs), self.torso)
            mean = h @ self.mean_head[0] + self.mean_head[1]
            raw = h @ self.log_std_head[0] + self.log_std_head[1]
        return mean, bound_log_std(raw).astype(np.float32, copy=False)

    def act(
        self, obs: Observations, deterministic: bool = False, core: np.ndarray | None = None
    ) -> Outputs:
        """(action [B, A] float32 within the Box's bounds,)."""
        mean, log_std = self.heads(obs)
        u = mean
        if not deterministic:
            noise = self.rng.standard_normal(mean.shape, dtype=np.float32)
            u = mean + np.exp(log_std) * noise
        action = np.tanh(u) * self.scale + self.bias
        return (action.astype(np.float32, copy=False),)


def _sac_actor(obs_space: gym.Space[Any], action_space: gym.Space[Any], cfg: ModelConfig) -> Any:
    from surge.models.sac_network import SACActor

    return SACActor(obs_space, action_space, cfg)
