"""Recurrent cores (`model.core`: GRU or LSTM) and the sequence maths of truncated BPTT.

A core sits between the encoder and the MLP torsos. Its state is one float32 vector per row
(h for a GRU, h and c concatenated for an LSTM; models/recurrent_state.py says how actors
carry it): `step` consumes a step's features and the state before it and returns the state
after it, whose first `hidden` values (h) are the step's output.

The learner unrolls a segment `[T, B]` from the state stored at its start (`core0`), zeroing
the state before every step whose previous step ended an episode (`resets`,
models/recurrent_state.py `resets_before`), optionally running the first `burn_in` steps
without gradient (R2D2's burn-in). `unroll` and `unroll_with_burn_in` are that maths as pure
functions of a step function; tests/unit/test_recurrent.py checks them against a loop that
unrolls each column by hand with explicit resets.

On CPU float32 a core unrolls through `FusedUnroll`: the same maths with torch's cell
equations written out in numpy (models/numpy_recurrent.py), forward and backward through time
as one autograd node: about half the time of a loop of torch cells on the small batches of a
CPU learner (32 steps of 8-16 sequences; benchmarks/results/recurrent_speed.md). Elsewhere (a
GPU, float64) it loops over torch's cells. torch's fused nn.GRU / nn.LSTM cannot zero the
state of one sequence mid-way, so they would need the segments split at every reset.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn
from torch.autograd.function import once_differentiable

from surge.config.schema import ModelConfig
from surge.models.numpy_recurrent import unroll_backward, unroll_forward

StepFn = Callable[[Tensor, Tensor], Tensor]
"""(features [B, F], state before [B, S]) -> state after [B, S]."""


def unroll(step: StepFn, x: Tensor, state: Tensor, resets: Tensor) -> Tensor:
    """The states after every step, [T, B, S], of `step` run over `x` [T, B, F] from `state`
    [B, S], with the state zeroed before step t in the columns where `resets[t]` ([T, B]
    bool). Gradients flow through everything given with grad."""
    T = x.shape[0]
    if T == 0:
        return state.new_zeros((0, *state.shape))
    keep = (~resets).unsqueeze(-1).to(state.dtype)  # [T, B, 1]
    any_reset = resets.any(dim=1).tolist()  # one read, not one sync per step
    states = []
    for t in range(T):
        if any_reset[t]:
            state = state * keep[t]
        state = step(x[t], state)
        states.append(state)
    return torch.stack(states)


def unroll_with_burn_in(
    step: StepFn, x: Tensor, state: Tensor, resets: Tensor, burn_in: int
) -> Tensor:
    """`unroll` whose first `burn_in` steps only rebuild the state, without gradient: the
    states after steps burn_in .. T-1, [T - burn_in, B, S], with gradients from there on
    (none reach the stored `state` or the burn-in steps' inputs)."""
    if burn_in:
        with torch.no_grad():
            state = unroll(step, x[:burn_in], state, resets[:burn_in])[-1]
    return unroll(step, x[burn_in:], state.detach(), resets[burn_in:])


class RecurrentCore(nn.Module):
    """A GRU or LSTM cell (torch's nn.GRUCell / nn.LSTMCell) over a flat state vector."""

    def __init__(self, kind: str, in_dim: int, hidden: int) -> None:
        super().__init__()
        if kind not in ("gru", "lstm"):
            raise ValueError(f"unknown recurrent core {kind!r}")
        self.kind = kind
        self.hidden = hidden
        self.out_dim = hidden
        self.state_size = hidden if kind == "gru" else 2 * hidden
        self.cell: nn.GRUCell | nn.LSTMCell = (
            nn.GRUCell(in_dim, hidden) if kind == "gru" else nn.LSTMCell(in_dim, hidden)
        )

    def _weights(self) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        cell = self.cell
        return cell.weight_ih, cell.weight_hh, cell.bias_ih, cell.bias_hh

    def _fused(self, *tensors: Tensor) -> bool:
        return all(
            t.device.type == "cpu" and t.dtype == torch.float32
            for t in (*tensors, *self._weights())
        )

    def step(self, x: Tensor, state: Tensor) -> Tensor:
        """The state after one step: [B, F], [B, S] -> [B, S]."""
        if not torch.is_grad_enabled() and self._fused(x, state):  # acting: numpy, no graph
            keep = np.ones((1, x.shape[0]), np.float32)
            return torch.from_numpy(self._forward(x.unsqueeze(0), state, keep)[0][0])
        return self.cell_step(x, state)

    def cell_step(self, x: Tensor, state: Tensor) -> Tensor:
        """`step` with torch's cell (the reference)."""
        if isinstance(self.cell, nn.GRUCell):
            out: Tensor = self.cell(x, state)
            return out
        h, c = self.cell(x, (state[:, : self.hidden], state[:, self.hidden :]))
        return torch.cat([h, c], dim=1)

    def output(self, states: Tensor) -> Tensor:
        """The features the torsos see: h, the first `hidden` values of a state [..., S]."""
        return states if self.kind == "gru" else states[..., : self.hidden]

    def unroll(self, x: Tensor, state: Tensor, resets: Tensor, burn_in: int = 0) -> Tensor:
        """States after each step past the burn-in: `unroll_with_burn_in` with this cell
        (fused on CPU float32)."""
        if not self._fused(x, state):
            return unroll_with_burn_in(self.cell_step, x, state, resets, burn_in)
        keep = (~resets).to(torch.float32)
        if burn_in:
            with torch.no_grad():
                state = self.fused_unroll(x[:burn_in], state, keep[:burn_in])[-1]
        return self.fused_unroll(x[burn_in:], state.detach(), keep[burn_in:])

    def fused_unroll(self, x: Tensor, state: Tensor, keep: Tensor) -> Tensor:
        """`unroll` as one autograd node (numpy maths); `keep` = 1 - resets, float32."""
        if x.shape[0] == 0:
            return state.new_zeros((0, *state.shape))
        out: Tensor = FusedUnroll.apply(self, x, state, keep, *self._weights())
        return out

    def _forward(
        self, x: Tensor, state: Tensor, keep: np.ndarray | Tensor
    ) -> tuple[np.ndarray, Any]:
        w_ih, w_hh, b_ih, b_hh = (_numpy(w) for w in self._weights())
        T, B, F = x.shape
        xp = (_numpy(x).reshape(T * B, F) @ w_ih.T + b_ih).reshape(T, B, -1)
        return unroll_forward(self.kind, xp, _numpy(state), _numpy(keep), w_hh, b_hh)


def _numpy(t: Tensor | np.ndarray) -> np.ndarray:
    return t if isinstance(t, np.ndarray) else t.detach().numpy()


class FusedUnroll(torch.autograd.Function):
    """A core's unroll ([T, B, F] inputs, [B, S] state, [T, B] keep masks) as one node:
    models/numpy_recurrent.py forward, and backward through time."""

    @staticmethod
    def forward(
        ctx: Any,
        core: RecurrentCore,
        x: Tensor,
        state: Tensor,
        keep: Tensor,
        w_ih: Tensor,
        w_hh: Tensor,
        b_ih: Tensor,
        b_hh: Tensor,
    ) -> Tensor:
        states, cache = core._forward(x, state, keep)
        ctx.cache, ctx.x, ctx.w_ih, ctx.w_hh = cache, _numpy(x), _numpy(w_ih), _numpy(w_hh)
        out = torch.from_numpy(states)
        ctx.save_for_backward(out)  # so that autograd's version check catches in-place edits
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, ...]:
        ctx.saved_tensors  # noqa: B018 - raises if the output was modified in place
        dxp, d_state, d_w_hh, d_b_hh = unroll_backward(
            _numpy(grad.contiguous()), ctx.cache, ctx.w_hh
        )
        T, B, F = ctx.x.shape
        flat = dxp.reshape(T * B, -1)
        d_w_ih = flat.T @ ctx.x.reshape(T * B, F)
        d_x = (flat @ ctx.w_ih).reshape(T, B, F) if ctx.needs_input_grad[1] else None
        return (
            None,
            None if d_x is None else torch.from_numpy(d_x),
            torch.from_numpy(d_state) if ctx.needs_input_grad[2] else None,
            None,
            torch.from_numpy(d_w_ih),
            torch.from_numpy(d_w_hh),
            torch.from_numpy(flat.sum(axis=0)),
            torch.from_numpy(d_b_hh),
        )


def make_core(cfg: ModelConfig, in_dim: int) -> RecurrentCore | None:
    """The core `model.core` names on features of `in_dim`, or None (`none`)."""
    if cfg.core == "none":
        return None
    return RecurrentCore(cfg.core, in_dim, cfg.core_size)
