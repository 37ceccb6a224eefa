"""The DQN family's Q-network (torch, for the learner; models/q_policy.py acts with it).

The observation encoder of `model.encoder` (flat or a CNN, models/encoders.py), with
`model.core` a recurrent core on its features (R2D2; models/recurrent.py), the MLP torso of
`model.hidden_sizes` (none on a CNN, which is the torso), and a head with one Q-value per
action, or dueling heads (Wang et al. 2016: Q = V + A - mean(A)).
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
from torch import Tensor, nn

from surge.config.schema import ModelConfig
from surge.models.encoders import make_encoder
from surge.models.layers import mlp, orthogonal_linear
from surge.models.recurrent import make_core


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
        self.core = make_core(cfg, self.encoder.out_dim)
        features = self.core.out_dim if self.core is not None else self.encoder.out_dim
        hidden = [] if self.encoder.is_torso else list(cfg.hidden_sizes)
        self.torso = mlp(features, hidden, cfg.activation)
        width = hidden[-1] if hidden else features
        self.dueling = dueling
        if dueling:
            self.value = orthogonal_linear(width, 1, 1.0)
            self.advantage = orthogonal_linear(width, n_actions, 1.0)
        else:
            self.head = orthogonal_linear(width, n_actions, 1.0)

    def forward(self, obs: dict[str, Tensor]) -> Tensor:
        """Q-values [B, A] of a feed-forward network."""
        return self.heads(self.encoder(obs))

    def heads(self, x: Tensor) -> Tensor:
        """Q-values [..., A] from the torso's input features [..., F]."""
        if self.dueling:
            h = self.torso(x)
            return dueling_q(self.value(h), self.advantage(h))
        out: Tensor = self.torso(x, self.head)  # one autograd node on the CPU
        return out

    def unroll(
        self, obs: dict[str, Tensor], state: Tensor, resets: Tensor, burn_in: int = 0
    ) -> Tensor:
        """A recurrent network's Q-values [T - burn_in, B, A] over sequences (`obs` fields
        [T, B, ...]) from the state before their first step `state` [B, S], the state
        zeroed before the steps in `resets` [T, B]; the first `burn_in` steps only rebuild
        the state (models/recurrent.py `unroll_with_burn_in`)."""
        assert self.core is not None, "a feed-forward Q-network has no state to unroll"
        T, B = resets.shape
        flat = {k: v.reshape(T * B, *v.shape[2:]) for k, v in obs.items()}
        x = self.encoder(flat).reshape(T, B, -1)
        states = self.core.unroll(x, state, resets, burn_in)
        h = self.core.output(states)
        return self.heads(h.reshape(-1, h.shape[-1])).reshape(T - burn_in, B, -1)
