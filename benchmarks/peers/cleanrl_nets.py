"""The layers both CleanRL-style scripts build their agents from, as CleanRL's ppo.py,
ppo_atari.py and ppo_continuous_action.py write them: orthogonal init, and the 64x64 tanh
MLP of the actor and the critic. (Kept out of common.py, which imports no torch.)"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn


def layer_init(layer: nn.Module, std: float = np.sqrt(2), bias_const: float = 0.0) -> nn.Module:
    torch.nn.init.orthogonal_(layer.weight, std)
    torch.nn.init.constant_(layer.bias, bias_const)
    return layer


def tanh_mlp(in_dim: int, out_dim: int, out_std: float) -> nn.Sequential:
    """in -> 64 -> 64 -> out, tanh between; the output layer's init gain is `out_std`."""
    return nn.Sequential(
        layer_init(nn.Linear(in_dim, 64)),
        nn.Tanh(),
        layer_init(nn.Linear(64, 64)),
        nn.Tanh(),
        layer_init(nn.Linear(64, out_dim), std=out_std),
    )
