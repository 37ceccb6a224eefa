"""A policy that acts from the flat parameter vector the trainer publishes.

One version of the vector is the model's weights followed, with `model.normalize_obs`, by
the observation statistics they were trained with and, with `model.value_norm`, the value
statistics (models/normalize.py), so a policy always normalises with its own version's
statistics. MLPs, with or without a recurrent core, act in numpy (models/numpy_policy.py: no
torch import in an actor); other models (the CNN encoders) through the torch `ActorCritic`.
Policy workers, inline inference, evaluation workers and `surge eval` all act through this.
A recurrent policy keeps no state itself: the caller passes the state before the step and
gets the state after it (models/recurrent_state.py).
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

from surge.config.schema import ExperimentConfig, ModelConfig
from surge.envs.spaces import EnvInfo
from surge.models.normalize import (
    VALUE_STATS_SIZE,
    ObsNormalizer,
    denormalize_published,
    obs_stats_size,
)
from surge.models.numpy_policy import NumpyPolicy, acting_layout, layout_size


class TorchActing:
    """`ActorCritic.act` on numpy batches, for the models the numpy path does not cover."""

    def __init__(
        self,
        obs_space: gym.Space[Any],
        action_space: gym.Space[Any],
        model: ModelConfig,
        seed: int,
        device: str = "cpu",
    ) -> None:
        import torch  # only processes that run a torch policy pay for the import

        from surge.models.actor_critic import ActorCritic

        self.torch = torch
        self.device = torch.device(device)
        self.model = ActorCritic(obs_space, action_space, model).to(self.device)
        self.model.eval()
        # sampling draws on the model's device, from a generator that lives there
        self.generator = torch.Generator(device=self.device).manual_seed(seed)
        self.state_size = self.model.state_size

    def size(self) -> int:
        from surge.models.weights import count_params

        return count_params(self.model)

    def load(self, flat: np.ndarray) -> None:
        from surge.models.weights import flat_to_model

        flat_to_model(flat, self.model)

    def act(
        self, obs: dict[str, np.ndarray], deterministic: bool = False, core: Any = None
    ) -> tuple[np.ndarray, ...]:
        torch = self.torch
        device = self.device
        with torch.inference_mode():
            t_obs = {k: torch.from_numpy(v).to(device) for k, v in obs.items()}
            state = None if core is None else torch.from_numpy(core).to(device)
            out = self.model.act(t_obs, deterministic, self.generator, state)
        return tuple(t.cpu().numpy() for t in out)


def flat_policy(env: EnvInfo, cfg: ExperimentConfig, seed: int, device: str = "cpu") -> FlatPolicy:
    """The acting policy of PPO's family (`RunContext.acting_policy`, models/acting.py)."""
    return FlatPolicy(env.observation_space, env.action_space, cfg.model, seed, device)


class FlatPolicy:
    """Acts with the version last written into `flat` (call `reload()` after writing)."""

    OUTPUTS = {"logp": "<f4", "value": "<f4"}
    """What `act` returns after the action (models/acting.py): the log-probability of the
    action and the value estimate, the sample fields PPO and APPO learn from."""

    def __init__(
        self,
        obs_space: gym.Space[Any],
        action_space: gym.Space[Any],
        model: ModelConfig,
        seed: int,
        device: str = "cpu",
    ) -> None:
        layout = acting_layout(obs_space, action_space, model)
        torch_acting = None
        if layout is None:  # a torch model acts on `device`; the numpy one on the CPU
            torch_acting = TorchActing(obs_space, action_space, model, seed, device)
            n_weights = torch_acting.size()
        else:
            n_weights = layout_size(layout)
        n_stats = obs_stats_size(obs_space, model.normalize_obs)
        n_value = VALUE_STATS_SIZE if model.value_norm else 0
        self.flat = np.zeros(n_weights + n_stats + n_value, np.float32)
        """The published vector of the loaded version: weights, then observation statistics,
        then value statistics (models/normalize.py)."""
        self.weights = self.flat[:n_weights]
        self.stats = self.flat[n_weights : n_weights + n_stats]
        self.value_stats = self.flat[n_weights + n_stats :] if n_value else None
        self.normalizer = ObsNormalizer(obs_space, model.clip_obs) if n_stats else None
        if layout is None:
            assert torch_acting is not None
            self.policy = torch_acting
        else:  # its weights are views of self.weights: `reload` rebuilds them
            self.policy = NumpyPolicy(layout, self.weights, np.random.default_rng(seed))

    @property
    def policy(self) -> NumpyPolicy | TorchActing:
        """What acts: numpy for MLPs (with or without a recurrent core), else torch."""
        return self._policy

    @policy.setter
    def policy(self, policy: NumpyPolicy | TorchActing) -> None:
        self._policy = policy
        self.state_size = policy.state_size
        """Floats of recurrent state per row (0: feed-forward)."""
        if self.normalizer is None and self.value_stats is None:
            # Nothing to apply around the policy's act: callers get it directly (acting
            # batches are a few rows, so a Python layer per call is a visible share).
            self.act = policy.act  # type: ignore[method-assign]
        else:
            self.__dict__.pop("act", None)

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

    def initial_state(self, rows: int) -> np.ndarray | None:
        """The state of fresh episodes, [rows, S] zeros; None for a feed-forward policy."""
        return np.zeros((rows, self.state_size), np.float32) if self.state_size else None

    def act(
        self,
        obs: dict[str, np.ndarray],
        deterministic: bool = False,
        core: np.ndarray | None = None,
    ) -> tuple[np.ndarray, ...]:
        """(action, then the policy outputs: log-prob, value) for a batch of raw observations;
        a recurrent policy takes the state before the step `core` [B, S] float32 and returns
        the state after it last."""
        if self.normalizer is not None:
            obs = self.normalizer(obs)
        action, logp, value, *state = self.policy.act(obs, deterministic, core)
        if self.value_stats is not None:  # the critic learns normalised values
            value = denormalize_published(value, self.value_stats)
        return (action, logp, value, *state)  # the state after the step last, if recurrent
