"""Small building blocks shared by the networks: initialised linear layers and MLP torsos.

Orthogonal initialisation with per-layer gains follows CleanRL's `layer_init`: hidden layers
use gain sqrt(2) so activations keep their scale through the torso, the policy output uses
0.01 so the initial policy is close to uniform (or to a zero-mean Gaussian), and the value
output uses 1.0. PPO is known to be sensitive to this choice (Andrychowicz et al. 2021).
The gains live in numpy_net.py, whose numpy initialisation uses the same ones.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import Tensor, nn
from torch.autograd.function import once_differentiable

from surge.config.schema import Activation
from surge.models.numpy_net import HIDDEN_GAIN, mlp_backward, mlp_forward

_ACTIVATIONS: dict[str, type[nn.Module]] = {"tanh": nn.Tanh, "relu": nn.ReLU}


def orthogonal_linear(in_dim: int, out_dim: int, gain: float, bias: float = 0.0) -> nn.Linear:
    """A Linear layer with orthogonal weights scaled by `gain` and a constant bias."""
    layer = nn.Linear(in_dim, out_dim)
    nn.init.orthogonal_(layer.weight, gain)
    nn.init.constant_(layer.bias, bias)
    return layer


def mlp(in_dim: int, hidden_sizes: list[int], activation: Activation) -> MLP:
    """Linear + activation for each hidden width. With no hidden widths it is the identity,
    so the heads then act directly on the encoder's features."""
    layers: list[nn.Module] = []
    act = _ACTIVATIONS[activation]
    for width in hidden_sizes:
        layers += [orthogonal_linear(in_dim, width, HIDDEN_GAIN), act()]
        in_dim = width
    return MLP(activation, *layers)


class MLP(nn.Sequential):
    """An MLP torso (Linear, activation, Linear, activation, ...); on CPU it runs as one
    autograd node whose forward and backward are numpy (`_MLPFunction`).

    Why: on the small batches of a CPU learner (CartPole: 128 rows x 64 units) a torso's
    cost is per-operator overhead, not arithmetic. Autograd records about ten nodes per
    layer (addmm, transpose, activation, accumulate-grad), each a torch dispatch of a few
    microseconds; numpy's matmul and ufuncs on such arrays cost about one. tanh matters
    too: this torch build's CPU tanh takes about 2.8 ns per element against numpy's 0.4
    (measured on the 2-core dev box). Elsewhere (a GPU, float64) it is plain nn.Sequential.
    The layers and their state-dict keys are nn.Sequential's (`0.weight`, `0.bias`,
    `2.weight`, ...), so checkpoints and the numpy policy (numpy_policy.py) are unchanged.
    tests/unit/test_models.py checks outputs and gradients against plain autograd.
    """

    def __init__(self, activation: Activation, *layers: nn.Module) -> None:
        super().__init__(*layers)
        self.activation = activation

    def forward(self, x: Tensor, head: nn.Linear | None = None) -> Tensor:
        """The torso's features; with `head`, that linear layer applied to them (no
        activation after it), in the same autograd node."""
        params: list[Tensor] = []
        for layer in self:
            if isinstance(layer, nn.Linear):
                params += [layer.weight, layer.bias]
        if head is not None:
            params += [head.weight, head.bias]
        if not params:
            return x
        if not all(_numpy_ready(t) for t in (x, *params)):
            out: Tensor = super().forward(x)
            return out if head is None else head(out)
        if not torch.is_grad_enabled():  # no graph to record: the numpy forward alone
            arrays = [_as_numpy(t) for t in params]
            layers = list(zip(arrays[0::2], arrays[1::2], strict=True))
            hidden = mlp_forward(_as_numpy(x), layers, self.activation, head is not None)
            return torch.from_numpy(hidden[-1])
        out = _MLPFunction.apply(x, self.activation, head is not None, *params)
        return out


def _numpy_ready(t: Tensor) -> bool:
    return t.device.type == "cpu" and t.dtype == torch.float32


def _as_numpy(t: Tensor) -> np.ndarray:
    return t.detach().numpy()


class _MLPFunction(torch.autograd.Function):
    """`mlp_forward` / `mlp_backward` (models/numpy_net.py) as one autograd node."""

    @staticmethod
    def forward(ctx: Any, x: Tensor, activation: str, has_head: bool, *params: Tensor) -> Tensor:
        weights = [_as_numpy(w) for w in params[0::2]]
        layers = list(zip(weights, [_as_numpy(b) for b in params[1::2]], strict=True))
        hidden = mlp_forward(_as_numpy(x), layers, activation, has_head)
        ctx.activation, ctx.has_head, ctx.hidden, ctx.weights = (
            activation,
            has_head,
            hidden,
            weights,
        )
        out = torch.from_numpy(hidden[-1])
        ctx.save_for_backward(out)  # so that autograd's version check catches in-place edits
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, ...]:
        ctx.saved_tensors  # noqa: B018 - raises if the output was modified in place
        layer_grads, input_grad = mlp_backward(
            _as_numpy(grad.contiguous()),
            ctx.hidden,
            ctx.weights,
            ctx.activation,
            ctx.has_head,
            input_grad=ctx.needs_input_grad[0],
        )
        grads = [torch.from_numpy(g) for pair in layer_grads for g in pair]
        x_grad = torch.from_numpy(input_grad) if input_grad is not None else None
        return (x_grad, None, None, *grads)


def mlp_out_dim(in_dim: int, hidden_sizes: list[int]) -> int:
    return hidden_sizes[-1] if hidden_sizes else in_dim
