"""The DQN family's Q-network (torch, for the learner; models/q_policy.py acts with it).

The observation encoder of `model.encoder` (flat or a CNN, models/encoders.py), the MLP
torso of `model.hidden_sizes` (none on a CNN, which is the torso), and a head with one
Q-value per action, or dueling heads (Wang et al. 2016: Q = V + A - mean(A)).
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
from torch import Tensor, nn

from surge.config.schema import ModelConfig
from surge.models.encoders import make_encoder
from surge.models.layers import mlp, orthogonal_linear


def dueling_q(value: Tensor, advantages: Tensor) -> Tensor:
    """Q = V + A - mean_a A: `value` [B, 1], `advantages` [B, A] float -> [B, A] float.

    Subtracting the mean makes V and A identifiable (Wang et al. 2016, eq. 9).
    """
    return value + advantages - advantages.mean(dim=1, keepdim=True)


class QNetwork(nn.Module):
    def __init__(
        self, obs_space: gym.Space[Any], n_actions: int, cfg: ModelConfig, dueling: bool
    ) -> None:
        super().__init__()
        self.encoder = make_encoder(obs_space, cfg)
        hidden = [] if self.encoder.is_torso else list(cfg.hidden_sizes)
        self.torso = mlp(self.encoder.out_dim, hidden, cfg.activation)
        width = hidden[-1] if hidden else self.encoder.out_dim
        self.dueling = dueling
        if dueling:
            self.value = orthogonal_linear(width, 1, 1.0)
            self.advantage = orthogonal_linear(width, n_actions, 1.0)
        else:
            self.head = orthogonal_linear(width, n_actions, 1.0)

    def forward(self, obs: dict[str, Tensor]) -> Tensor:
        """Q-values [B, A]."""
        x = self.encoder(obs)
        if self.dueling:
            h = self.torso(x)
            return dueling_q(self.value(h), self.advantage(h))
        out: Tensor = self.torso(x, self.head)  # one autograd node on the CPU
        return out
