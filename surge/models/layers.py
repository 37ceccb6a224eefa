"""Small building blocks shared by the networks: initialised linear layers and MLP torsos.

Orthogonal initialisation with per-layer gains follows CleanRL's `layer_init`: hidden layers
use gain sqrt(2) so activations keep their scale through the torso, the policy output uses
0.01 so the initial policy is close to uniform (or to a zero-mean Gaussian), and the value
output uses 1.0. PPO is known to be sensitive to this choice (Andrychowicz et al. 2021).
"""

from __future__ import annotations

import math

from torch import nn

from surge.config.schema import Activation

HIDDEN_GAIN = math.sqrt(2.0)
POLICY_GAIN = 0.01
VALUE_GAIN = 1.0

_ACTIVATIONS: dict[str, type[nn.Module]] = {"tanh": nn.Tanh, "relu": nn.ReLU}


def orthogonal_linear(in_dim: int, out_dim: int, gain: float, bias: float = 0.0) -> nn.Linear:
    """A Linear layer with orthogonal weights scaled by `gain` and a constant bias."""
    layer = nn.Linear(in_dim, out_dim)
    nn.init.orthogonal_(layer.weight, gain)
    nn.init.constant_(layer.bias, bias)
    return layer


def mlp(in_dim: int, hidden_sizes: list[int], activation: Activation) -> nn.Sequential:
    """Linear + activation for each hidden width. With no hidden widths it is the identity,
    so the heads then act directly on the encoder's features."""
    layers: list[nn.Module] = []
    act = _ACTIVATIONS[activation]
    for width in hidden_sizes:
        layers += [orthogonal_linear(in_dim, width, HIDDEN_GAIN), act()]
        in_dim = width
    return nn.Sequential(*layers)


def mlp_out_dim(in_dim: int, hidden_sizes: list[int]) -> int:
    return hidden_sizes[-1] if hidden_sizes else in_dim
