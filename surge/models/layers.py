"""Small building blocks shared by the networks: initialised linear layers and MLP torsos.

Orthogonal initialisation with per-layer gains follows CleanRL's `layer_init`: hidden layers
use gain sqrt(2) so activations keep their scale through the torso, the policy output uses
0.01 so the initial policy is close to uniform (or to a zero-mean Gaussian), and the value
output uses 1.0. PPO is known to be sensitive to this choice (Andrychowicz et al. 2021).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn
from torch.autograd.function import once_differentiable

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
    """An MLP torso (Linear, activation, Linear, activation, ...) that runs as one autograd
    node with a hand-written backward (`_MLPFunction`).

    Why: on the small batches of a CPU learner (CartPole: 128 rows x 64 units) the cost of
    a torso is per-operator overhead, not arithmetic. Autograd records about ten nodes per
    layer (addmm, transpose, activation, accumulate-grad); here the forward is one addmm and
    one in-place activation per layer, and the backward three matmul-sized kernels. The
    layers and their state-dict keys are nn.Sequential's (`0.weight`, `0.bias`, `2.weight`,
    ...), so checkpoints and the numpy mirror (numpy_policy.py) are unchanged.
    tests/unit/test_models.py checks outputs and gradients against plain autograd.
    """

    def __init__(self, activation: Activation, *layers: nn.Module) -> None:
        super().__init__(*layers)
        self.activation = activation

    def forward(self, x: Tensor) -> Tensor:
        if len(self) == 0:
            return x
        params: list[Tensor] = []
        for layer in self:
            if isinstance(layer, nn.Linear):
                params += [layer.weight, layer.bias]
        out: Tensor = _MLPFunction.apply(x, self.activation, *params)
        return out


def _activate_(x: Tensor, activation: str) -> Tensor:
    """The activation in place on a fresh layer output. tanh on a CPU float32 tensor runs
    in numpy: this torch build's CPU tanh costs about 2.8 ns per element against numpy's
    0.4 (measured on the 2-core dev box), and a CartPole update applies it 40 times."""
    if activation == "relu":
        return x.relu_()
    if x.device.type == "cpu" and x.dtype == torch.float32 and x.is_contiguous():
        out = x.numpy()
        np.tanh(out, out=out)
        return x
    return x.tanh_()


class _MLPFunction(torch.autograd.Function):
    """h_{k+1} = act(h_k W_k^T + b_k) for each layer; backward by the chain rule."""

    @staticmethod
    def forward(ctx: Any, x: Tensor, activation: str, *params: Tensor) -> Tensor:
        hidden = [x]
        h = x
        for weight, bias in zip(params[0::2], params[1::2], strict=True):
            h = _activate_(torch.addmm(bias, h, weight.t()), activation)
            hidden.append(h)
        ctx.activation = activation
        ctx.save_for_backward(*hidden, *params[0::2])
        return h

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, ...]:
        saved = ctx.saved_tensors
        layers = (len(saved) - 1) // 2
        hidden, weights = saved[: layers + 1], saved[layers + 1 :]
        grads: list[Tensor | None] = [None, None] * layers
        for k in range(layers - 1, -1, -1):
            out = hidden[k + 1]
            if ctx.activation == "relu":
                grad = torch.ops.aten.threshold_backward(grad, out, 0)
            else:
                grad = torch.ops.aten.tanh_backward(grad, out)
            grads[2 * k] = grad.t().mm(hidden[k])
            grads[2 * k + 1] = grad.sum(0)
            if k > 0 or ctx.needs_input_grad[0]:
                grad = grad.mm(weights[k])
        return (grad if ctx.needs_input_grad[0] else None, None, *grads)


def mlp_out_dim(in_dim: int, hidden_sizes: list[int]) -> int:
    return hidden_sizes[-1] if hidden_sizes else in_dim
