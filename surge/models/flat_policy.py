"""A policy that acts from the flat parameter vector the trainer publishes.

One version of the vector is the model's weights followed, with `model.normalize_obs`, by
the observation statistics they were trained with and, with `model.value_norm`, the value
statistics (algos/normalize.py), so a policy always normalises with its own version's
statistics. MLPs act in numpy (models/numpy_policy.py: no
torch import in an actor); other models (the CNN encoders) through the torch `ActorCritic`.
Policy workers, inline inference, evaluation workers and `surge eval` all act through this.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

from surge.algos.normalize import (
    VALUE_STATS_SIZE,
    ObsNormalizer,
    denormalize_published,
    obs_stats_size,
)
from surge.config.schema import ModelConfig
from surge.models.numpy_policy import NumpyPolicy, layout_size, numpy_layout


class TorchActing:
    """`ActorCritic.act` on numpy batches, for the models the numpy path does not cover."""

    def __init__(
        self, obs_space: gym.Space[Any], action_space: gym.Space[Any], model: ModelConfig, seed: int
    ) -> None:
        import torch  # only processes that run a torch policy pay for the import

        from surge.models.actor_critic import ActorCritic

        self.torch = torch
        self.model = ActorCritic(obs_space, action_space, model)
        self.model.eval()
        self.generator = torch.Generator().manual_seed(seed)

    def size(self) -> int:
        from surge.workers.weights import count_params

        return count_params(self.model)

    def load(self, flat: np.ndarray) -> None:
        from surge.workers.weights import flat_to_model

        flat_to_model(flat, self.model)

    def act(
        self, obs: dict[str, np.ndarray], deterministic: bool = False
    ) -> tuple[np.ndarray, ...]:
        torch = self.torch
        with torch.inference_mode():
            t_obs = {k: torch.from_numpy(v) for k, v in obs.items()}
            out = self.model.act(t_obs, deterministic=deterministic, generator=self.generator)
        return tuple(t.numpy() for t in out)


class FlatPolicy:
    """Acts with the version last written into `flat` (call `reload()` after writing)."""

    def __init__(
        self, obs_space: gym.Space[Any], action_space: gym.Space[Any], model: ModelConfig, seed: int
    ) -> None:
        layout = numpy_layout(obs_space, action_space, model)
        self.policy: NumpyPolicy | TorchActing
        if layout is None:
            self.policy = TorchActing(obs_space, action_space, model, seed)
            n_weights = self.policy.size()
        else:
            n_weights = layout_size(layout)
        n_stats = obs_stats_size(obs_space, model.normalize_obs)
        n_value = VALUE_STATS_SIZE if model.value_norm else 0
        self.flat = np.zeros(n_weights + n_stats + n_value, np.float32)
        """The published vector of the loaded version: weights, then observation statistics,
        then value statistics (algos/normalize.py)."""
        self.weights = self.flat[:n_weights]
        self.stats = self.flat[n_weights : n_weights + n_stats]
        self.value_stats = self.flat[n_weights + n_stats :] if n_value else None
        self.normalizer = ObsNormalizer(obs_space, model.clip_obs) if n_stats else None
        if layout is not None:  # its weights are views of self.weights: `reload` rebuilds
            self.policy = NumpyPolicy(layout, self.weights, np.random.default_rng(seed))

    def reload(self) -> None:
        """Use the parameters now in `flat`."""
        if isinstance(self.policy, TorchActing):
            self.policy.load(self.weights)
        else:
            self.policy.reload()
        if self.normalizer is not None:
            self.normalizer.load(self.stats)

    def load(self, flat: np.ndarray) -> None:
        if flat.shape != self.flat.shape:
            raise ValueError(
                f"a version of this policy has {self.flat.size} values, got {flat.size}"
            )
        np.copyto(self.flat, flat)
        self.reload()

    def act(
        self, obs: dict[str, np.ndarray], deterministic: bool = False
    ) -> tuple[np.ndarray, ...]:
        """(action, then the policy outputs: log-prob, value) for a batch of raw observations."""
        if self.normalizer is not None:
            obs = self.normalizer(obs)
        action, *outputs = self.policy.act(obs, deterministic)
        if self.value_stats is not None:  # the critic learns normalised values
            outputs[-1] = denormalize_published(outputs[-1], self.value_stats)
        return (action, *outputs)
