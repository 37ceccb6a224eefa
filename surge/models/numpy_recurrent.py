"""GRU and LSTM unrolls with resets, forward and backward through time, in numpy.

Why: a learner unrolls the core over a segment one step at a time, and on a CPU each step's
cost is per-operator overhead, not arithmetic: through torch's cells autograd records about
a dozen nodes per step, each a dispatch of several microseconds; the same maths as numpy
ufuncs, with the backward written out, takes about half as long for 32 steps of 8-16
sequences (benchmarks/recurrent_speed.py). models/recurrent.py runs these as one autograd
node on CPU float32 tensors (`FusedUnroll`) and keeps torch's cells as the reference;
tests/unit/test_recurrent.py checks outputs and gradients against them.

The equations are torch's (nn.GRUCell, nn.LSTMCell), with the input projections of every
step computed in one matmul before the loop (`xp = x W_ih^T + b_ih`, [T, B, G*H]):

    GRU:  r, z = sigmoid(xp_rz + h W_hh_rz^T + b_hh_rz);  a = h W_hh_n^T + b_hh_n
          n = tanh(xp_n + r * a);  h' = n + z * (h - n)
    LSTM: i, f, g, o = sig, sig, tanh, sig of (xp + h W_hh^T + b_hh);
          c' = f * c + i * g;  h' = o * tanh(c')

Before step t the state is multiplied by `keep[t]` ([T, B], 0 where the episode restarted):
the reset, whose gradient is the same mask.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


def _sigmoid(x: np.ndarray) -> np.ndarray:
    """1 / (1 + exp(-x)) in place of x (three ufunc calls, no temporaries)."""
    np.negative(x, out=x)
    np.exp(x, out=x)
    x += 1.0
    np.reciprocal(x, out=x)
    return x


@dataclass
class UnrollCache:
    """What the backward pass needs from the forward one."""

    kind: str
    prev: np.ndarray  # [T, B, S]: the state each step started from, after its reset
    gates: np.ndarray  # [T, B, G*H]: the gate activations (GRU: r, z, n; LSTM: i, f, g, o)
    extra: np.ndarray  # GRU: [T, B, H] a = h W_hh_n^T + b_hh_n; LSTM: [T, B, H] tanh(c')
    keep: np.ndarray  # [T, B, 1]
    any_reset: list[bool]


def step(
    kind: str,
    xp: np.ndarray,
    prev: np.ndarray,
    w_hh_t: np.ndarray,
    b_hh: np.ndarray,
    gates: np.ndarray,
    extra: np.ndarray,
    out: np.ndarray,
) -> None:
    """One step from the state `prev` [B, S] and projected inputs `xp` [B, G*H] into `out`
    [B, S]; `w_hh_t` is W_hh transposed [H, G*H]. Fills `gates` [B, G*H] and `extra` [B, H]
    (the backward's cache, module doc)."""
    H = w_hh_t.shape[0]
    if kind == "gru":
        np.matmul(prev, w_hh_t, out=gates)
        gates += b_hh
        np.copyto(extra, gates[:, 2 * H :])  # a = h W_hh_n^T + b_hh_n
        gates[:, : 2 * H] += xp[:, : 2 * H]
        _sigmoid(gates[:, : 2 * H])  # r, z
        n = gates[:, 2 * H :]
        np.multiply(gates[:, :H], extra, out=n)  # r * a
        n += xp[:, 2 * H :]
        np.tanh(n, out=n)
        np.subtract(prev, n, out=out)
        out *= gates[:, H : 2 * H]
        out += n
    else:
        np.matmul(prev[:, :H], w_hh_t, out=gates)
        gates += b_hh
        gates += xp
        _sigmoid(gates[:, : 2 * H])  # i, f
        np.tanh(gates[:, 2 * H : 3 * H], out=gates[:, 2 * H : 3 * H])  # g
        _sigmoid(gates[:, 3 * H :])  # o
        out_c = out[:, H:]
        np.multiply(gates[:, H : 2 * H], prev[:, H:], out=out_c)
        out_c += gates[:, :H] * gates[:, 2 * H : 3 * H]
        np.tanh(out_c, out=extra)
        np.multiply(gates[:, 3 * H :], extra, out=out[:, :H])


def unroll_forward(
    kind: str,
    xp: np.ndarray,
    state: np.ndarray,
    keep: np.ndarray,
    w_hh: np.ndarray,
    b_hh: np.ndarray,
) -> tuple[np.ndarray, UnrollCache]:
    """The states after every step, [T, B, S], from `state` [B, S]; `xp` [T, B, G*H] are the
    projected inputs, `keep` [T, B] the reset masks. Returns them and the backward's cache."""
    T, B, _ = xp.shape
    H = w_hh.shape[1]
    S = H if kind == "gru" else 2 * H
    keep3 = keep.reshape(T, B, 1).astype(xp.dtype, copy=False)
    any_reset = (keep3 == 0).reshape(T, -1).any(axis=1).tolist()
    states = np.empty((T, B, S), xp.dtype)
    prev = np.empty_like(states)
    gates = np.empty_like(xp)
    extra = np.empty((T, B, H), xp.dtype)
    w_hh_t = np.ascontiguousarray(w_hh.T)
    s = state
    for t in range(T):
        if any_reset[t]:
            np.multiply(s, keep3[t], out=prev[t])
        else:
            prev[t] = s
        step(kind, xp[t], prev[t], w_hh_t, b_hh, gates[t], extra[t], states[t])
        s = states[t]
    return states, UnrollCache(kind, prev, gates, extra, keep3, any_reset)


def unroll_backward(
    grad_states: np.ndarray, cache: UnrollCache, w_hh: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Backward through time of `unroll_forward` given dL/dstates [T, B, S]: (dL/dxp [T, B,
    G*H], dL/dstate [B, S], dL/dW_hh, dL/db_hh)."""
    T, B, S = grad_states.shape
    H = w_hh.shape[1]
    gates, prev, extra = cache.gates, cache.prev, cache.extra
    d_pre = np.empty_like(gates)  # dL/d(pre-activations), the recurrent part for GRU's n
    dxp = np.empty_like(gates)
    carry = np.zeros((B, S), grad_states.dtype)  # dL/d(state after step t) from step t+1
    for t in range(T - 1, -1, -1):
        d = grad_states[t] + carry
        g, p = gates[t], prev[t]
        dp, dx = d_pre[t], dxp[t]
        if cache.kind == "gru":
            r, z, n = g[:, :H], g[:, H : 2 * H], g[:, 2 * H :]
            dn = d * (1.0 - z)
            dx[:, H : 2 * H] = d * (p - n) * z * (1.0 - z)  # z's pre-activation
            dn *= 1.0 - n * n  # n's pre-activation: xp_n + r * a
            dx[:, 2 * H :] = dn
            dx[:, :H] = dn * extra[t] * r * (1.0 - r)  # r's pre-activation
            dp[:, : 2 * H] = dx[:, : 2 * H]
            np.multiply(dn, r, out=dp[:, 2 * H :])  # a = h W_hh_n^T + b_hh_n
            dprev = d * z
            dprev += dp @ w_hh
        else:
            i, f, gg, o = g[:, :H], g[:, H : 2 * H], g[:, 2 * H : 3 * H], g[:, 3 * H :]
            dh, dc = d[:, :H], d[:, H:]
            tc = extra[t]
            dc_total = dc + dh * o * (1.0 - tc * tc)
            c_prev = p[:, H:]
            dx[:, :H] = dc_total * gg * i * (1.0 - i)
            dx[:, H : 2 * H] = dc_total * c_prev * f * (1.0 - f)
            dx[:, 2 * H : 3 * H] = dc_total * i * (1.0 - gg * gg)
            dx[:, 3 * H :] = dh * tc * o * (1.0 - o)
            dp[:] = dx
            dprev = np.empty((B, S), grad_states.dtype)
            np.matmul(dp, w_hh, out=dprev[:, :H])
            np.multiply(dc_total, f, out=dprev[:, H:])
        if cache.any_reset[t]:
            dprev *= cache.keep[t]
        carry = dprev
    flat_dp = d_pre.reshape(T * B, -1)
    d_w_hh = flat_dp.T @ prev.reshape(T * B, S)[:, :H]
    d_b_hh = flat_dp.sum(axis=0)
    return dxp, carry, d_w_hh, d_b_hh
