"""Small building blocks shared by the networks: initialised linear layers and MLP torsos.

Orthogonal initialisation with per-layer gains follows CleanRL's `layer_init`: hidden layers
use gain sqrt(2) so activations keep their scale through the torso, the policy output uses
0.01 so the initial policy is close to uniform (or to a zero-mean Gaussian), and the value
output uses 1.0. PPO is known to be sensitive to this choice (Andrychowicz et al. 2021).
The gains live in numpy_net.py, whose numpy initialisation uses the same ones.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.autograd.function import once_differentiable

from surge.config.schema import Activation
from surge.models import gemm
from surge.models.numpy_net import HIDDEN_GAIN, mlp_backward, mlp_forward
from surge.threads import run_each

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

    def forward(self, x: Tensor, head: nn.Linear | None = None, held: bool = False) -> Tensor:
        """The torso's features; with `head`, that linear layer applied to them (no
        activation after it), in the same autograd node. `held`: the weights are constants
        here, gradients reach `x` only (a critic inside an actor's loss), and the backward
        computes no weight gradient."""
        (out,) = parallel_mlps(x, [(self, head)], threads=1, held=held)
        return out


def parallel_mlps(
    x: Tensor,
    networks: Sequence[tuple[MLP, nn.Linear | None]],
    threads: int,
    held: bool = False,
) -> tuple[Tensor, ...]:
    """Each (torso, head) network of `networks` on the same input `x` (as `MLP.forward`),
    up to `threads` networks at a time: one autograd node whose forward and backward run
    every network's numpy pass on its own thread. `held` as in `MLP.forward`.

    Why threads: numpy releases the GIL in its matmuls and large ufuncs, so two networks'
    passes overlap on two cores while OpenBLAS and torch stay single-threaded. The products
    run in numpy or torch (models/gemm.py `matmul`: the learner picks the faster). A SAC
    learner's twin critics (256 x 256, batch 256, forward and backward) took 3.65 ms one after
    the other and 2.0 ms on two threads on the 2-core dev machine. Finer parts gain little: a
    thread's hand-over costs tens of microseconds, so a 256 x 256 matmul split by rows over
    two threads took 299 us against 354 us whole. More torch threads do worse: surge's worker
    processes start OpenMP with `OMP_WAIT_POLICY=PASSIVE` (runtime/warm.py), its threads
    sleep between operations, and waking them for every small operation cost more than the
    second core gave (that SAC update: 16 ms on two torch threads against 12.5 on one)."""
    activation = networks[0][0].activation
    if any(torso.activation != activation for torso, _ in networks):
        raise ValueError("parallel_mlps: the torsos must share one activation")
    per_net: list[list[Tensor]] = []
    for torso, head in networks:
        params: list[Tensor] = []
        for layer in (*torso, *([head] if head is not None else [])):
            if isinstance(layer, nn.Linear):
                params += [layer.weight, layer.bias]
        per_net.append([p.detach() for p in params] if held else params)
    heads = tuple(head is not None for _, head in networks)
    if not all(per_net):  # a torso with no layers and no head: the identity
        return tuple(
            x if not params else _plain_forward(x, params, activation, has_head)
            for params, has_head in zip(per_net, heads, strict=True)
        )
    flat = [p for params in per_net for p in params]
    if not all(_numpy_ready(t) for t in (x, *flat)):
        return tuple(
            _plain_forward(x, params, activation, has_head)
            for params, has_head in zip(per_net, heads, strict=True)
        )
    counts = tuple(len(params) // 2 for params in per_net)
    if not torch.is_grad_enabled():  # no graph to record: the numpy forwards alone
        nets = _layers(flat, counts)
        xs = _as_numpy(x)
        outs = run_each(
            lambda i: mlp_forward(xs, nets[i], activation, heads[i], gemm.matmul)[-1],
            range(len(nets)),
            threads,
        )
        return tuple(torch.from_numpy(out) for out in outs)
    result: tuple[Tensor, ...] = _MLPFunction.apply(
        x, activation, heads, counts, threads, held, *flat
    )
    return result


def _plain_forward(x: Tensor, params: list[Tensor], activation: str, has_head: bool) -> Tensor:
    """A torso (and head) as plain torch layers (off the numpy path: a GPU, float64)."""
    act = torch.relu if activation == "relu" else torch.tanh
    h = x
    last = len(params) - 2
    for k in range(0, len(params), 2):
        h = F.linear(h, params[k], params[k + 1])
        if not (has_head and k == last):
            h = act(h)
    return h


def _numpy_ready(t: Tensor) -> bool:
    return t.device.type == "cpu" and t.dtype == torch.float32


def _as_numpy(t: Tensor) -> np.ndarray:
    return t.detach().numpy()


def _layers(
    params: Sequence[Tensor], counts: tuple[int, ...]
) -> list[list[tuple[np.ndarray, np.ndarray]]]:
    """The flat parameter list as each network's [(weight, bias)] numpy views."""
    arrays = [_as_numpy(p) for p in params]
    nets, at = [], 0
    for n in counts:
        weights, biases = arrays[at : at + 2 * n : 2], arrays[at + 1 : at + 2 * n : 2]
        nets.append(list(zip(weights, biases, strict=True)))
        at += 2 * n
    return nets


class _MLPFunction(torch.autograd.Function):
    """`mlp_forward` / `mlp_backward` (models/numpy_net.py) of one or more networks on one
    input as one autograd node, each network on its own thread (`parallel_mlps`)."""

    @staticmethod
    def forward(
        ctx: Any,
        x: Tensor,
        activation: str,
        heads: tuple[bool, ...],
        counts: tuple[int, ...],
        threads: int,
        held: bool,
        *params: Tensor,
    ) -> tuple[Tensor, ...]:
        nets = _layers(params, counts)
        xs = _as_numpy(x)
        hiddens = run_each(
            lambda i: mlp_forward(xs, nets[i], activation, heads[i], gemm.matmul),
            range(len(nets)),
            threads,
        )
        ctx.activation, ctx.heads, ctx.threads, ctx.held = activation, heads, threads, held
        ctx.hiddens, ctx.weights = hiddens, [[w for w, _ in layers] for layers in nets]
        outs = tuple(torch.from_numpy(hidden[-1]) for hidden in hiddens)
        ctx.save_for_backward(*outs)  # so that autograd's version check catches in-place edits
        return outs

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, *grads: Tensor) -> tuple[Tensor | None, ...]:
        ctx.saved_tensors  # noqa: B018 - raises if an output was modified in place
        want_x = bool(ctx.needs_input_grad[0])

        def one(i: int) -> tuple[list[tuple[np.ndarray, np.ndarray]], np.ndarray | None]:
            return mlp_backward(
                _as_numpy(grads[i].contiguous()),
                ctx.hiddens[i],
                ctx.weights[i],
                ctx.activation,
                ctx.heads[i],
                input_grad=want_x,
                weight_grads=not ctx.held,
                matmul=gemm.matmul,
            )

        results = run_each(one, range(len(grads)), ctx.threads)
        x_grad = None
        if want_x:
            parts = [part for _, part in results if part is not None]
            total = parts[0]
            for part in parts[1:]:  # every network read x: their gradients add up
                total = total + part
            x_grad = torch.from_numpy(total)
        nulls = (None, None, None, None, None)
        if ctx.held:
            return (x_grad, *nulls, *[None] * (2 * sum(len(w) for w in ctx.weights)))
        grads_out = [
            torch.from_numpy(g) for layer_grads, _ in results for p in layer_grads for g in p
        ]
        return (x_grad, *nulls, *grads_out)


def mlp_out_dim(in_dim: int, hidden_sizes: list[int]) -> int:
    return hidden_sizes[-1] if hidden_sizes else in_dim
