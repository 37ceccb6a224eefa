"""Soft actor-critic's networks (torch, for the learner; models/sac_policy.py acts with the
actor, in numpy for MLPs).

The actor: the observation encoder of `model.encoder` (flat or a CNN, models/encoders.py),
the MLP torso of `model.hidden_sizes` (none on a CNN, which is the torso), and two linear
heads with an output per action dim: the mean and the raw log-std of a Gaussian over the
action before its tanh. The learner bounds the log-std and squashes and scales the sample to the Box
(algos/sac.py `bounded_log_std`, `squashed_gaussian`, with models/sac_policy.py
`box_scale_bias`); the networks sit below the maths layer, so they return the heads' raw
outputs.

The critic: twin Q-networks (Fujimoto et al. 2018's clipped double Q, as SAC uses them),
each its own encoder and an MLP on [observation features, action] to one value.

CleanRL's sac_continuous_action.py builds the same shapes with PyTorch's default init; here
the layers are initialised as every surge network is (models/layers.py: orthogonal, gain
sqrt(2) in the torsos, 0.01 on the policy's heads, 1 on the Q heads).
"""

from __future__ import annotations

import math
from typing import Any

import gymnasium as gym
import torch
from torch import Tensor, nn

from surge.config.schema import ModelConfig
from surge.models.encoders import make_encoder
from surge.models.layers import MLP, mlp, orthogonal_linear, parallel_mlps
from surge.models.numpy_net import POLICY_GAIN, VALUE_GAIN


class SACActor(nn.Module):
    """The policy network (see the module docstring); its `parameters()` are what the
    trainer publishes."""

    def __init__(
        self, obs_space: gym.Space[Any], action_space: gym.Space[Any], cfg: ModelConfig
    ) -> None:
        super().__init__()
        dims = math.prod(action_space.shape or ())
        self.encoder = make_encoder(obs_space, cfg)
        hidden = [] if self.encoder.is_torso else list(cfg.hidden_sizes)
        self.torso = mlp(self.encoder.out_dim, hidden, cfg.activation)
        width = hidden[-1] if hidden else self.encoder.out_dim
        self.mean = orthogonal_linear(width, dims, POLICY_GAIN)
        self.log_std = orthogonal_linear(width, dims, POLICY_GAIN)

    def forward(self, obs: dict[str, Tensor]) -> tuple[Tensor, Tensor]:
        """(mean [B, A], raw log-std [B, A]): the heads' outputs, before the log-std's bound."""
        h = self.torso(self.encoder(obs))
        return self.mean(h), self.log_std(h)


class SoftQ(nn.Module):
    """One Q-network: Q(s, a) from [encoder(s), a] through the MLP torso to one value."""

    def __init__(self, obs_space: gym.Space[Any], action_dims: int, cfg: ModelConfig) -> None:
        super().__init__()
        self.encoder = make_encoder(obs_space, cfg)
        # the action joins after the encoder, so even a CNN gets the MLP torso to mix them
        hidden = list(cfg.hidden_sizes)
        self.torso = mlp(self.encoder.out_dim + action_dims, hidden, cfg.activation)
        width = hidden[-1] if hidden else self.encoder.out_dim + action_dims
        self.head = orthogonal_linear(width, 1, VALUE_GAIN)

    def forward(self, obs: dict[str, Tensor], action: Tensor) -> Tensor:
        """Q-values [B]."""
        x = torch.cat([self.encoder(obs), action.to(torch.float32)], dim=-1)
        q: Tensor = self.torso(x, self.head)  # one autograd node on the CPU
        return q.squeeze(-1)

    def held(self, obs: dict[str, Tensor], action: Tensor) -> Tensor:
        """Q-values [B] with this network held constant: gradients reach `action` only (the
        actor's loss), and the backward computes no weight gradient (models/layers.py
        `MLP`, `held`): about a fifth of an actor step."""
        with torch.no_grad():
            features = self.encoder(obs)
        x = torch.cat([features, action.to(torch.float32)], dim=-1)
        q: Tensor = self.torso(x, self.head, held=True)
        return q.squeeze(-1)


class TwinQ(nn.Module):
    """The critic: two independent Q-networks (Q1, Q2). On flat observations, whose encoders
    have no weights, both read one [observation, action] input and run side by side on
    `threads` threads (models/layers.py `parallel_mlps`); a CNN encoder runs each alone."""

    def __init__(
        self,
        obs_space: gym.Space[Any],
        action_space: gym.Space[Any],
        cfg: ModelConfig,
        threads: int = 1,
    ) -> None:
        super().__init__()
        dims = math.prod(action_space.shape or ())
        self.q1 = SoftQ(obs_space, dims, cfg)
        self.q2 = SoftQ(obs_space, dims, cfg)
        self.threads = threads
        self.shared_input = not any(True for _ in self.q1.encoder.parameters())
        """Whether both networks read one input (flat observations: no encoder weights)."""

    def forward(self, obs: dict[str, Tensor], action: Tensor) -> tuple[Tensor, Tensor]:
        """(Q1 [B], Q2 [B])."""
        if not self.shared_input:
            return self.q1(obs, action), self.q2(obs, action)
        x = torch.cat([self.q1.encoder(obs), action.to(torch.float32)], dim=-1)
        q1, q2 = parallel_mlps(x, self._networks(), self.threads)
        return q1.squeeze(-1), q2.squeeze(-1)

    def held(self, obs: dict[str, Tensor], action: Tensor) -> tuple[Tensor, Tensor]:
        """(Q1 [B], Q2 [B]) with the critics held constant (`SoftQ.held`)."""
        if not self.shared_input:
            return self.q1.held(obs, action), self.q2.held(obs, action)
        with torch.no_grad():
            features = self.q1.encoder(obs)
        x = torch.cat([features, action.to(torch.float32)], dim=-1)
        q1, q2 = parallel_mlps(x, self._networks(), self.threads, held=True)
        return q1.squeeze(-1), q2.squeeze(-1)

    def use_threads(self, threads: int) -> None:
        """Run the two networks on up to `threads` threads from now on (flat observations)."""
        self.threads = threads

    def _networks(self) -> list[tuple[MLP, nn.Linear | None]]:
        return [(self.q1.torso, self.q1.head), (self.q2.torso, self.q2.head)]
