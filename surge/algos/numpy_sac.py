"""SAC's policy maths in numpy with hand-written backward passes: the squashed Gaussian
(algos/sac.py `bounded_log_std`, `squashed_gaussian`) and the gradient of torch.minimum.

Why a second implementation: with MLP networks on the CPU the networks' passes already run
in numpy (models/layers.py `parallel_mlps`), and what was left in torch, the heads, the
sampling, the losses and autograd's bookkeeping, is some 200 small operators per update at
a few microseconds each: on a 2-core Intel Xeon, an update without them took 5.44 ms
against 7.87 with them (learners/sac_numpy.py runs this maths; the networks' passes are the
same numpy code either way).
tests/unit/test_numpy_sac.py checks every output and gradient against autograd through the
torch functions, in float64.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from surge.models.sac_policy import LOG_STD_MAX, LOG_STD_MIN

_HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)
_LOG_STD_HALF_RANGE = 0.5 * (LOG_STD_MAX - LOG_STD_MIN)


@dataclass(frozen=True)
class SquashedSample:
    """What the backward of a squashed-Gaussian sample needs: the noise, std, tanh(raw)
    and y = tanh(u), all [B, A], and the denominator of the tanh correction."""

    noise: np.ndarray
    std: np.ndarray
    tanh_raw: np.ndarray
    y: np.ndarray
    jacobian: np.ndarray  # scale * (1 - y^2) + 1e-6


def squashed_gaussian_forward(
    mean: np.ndarray, raw: np.ndarray, scale: np.ndarray, bias: np.ndarray, noise: np.ndarray
) -> tuple[np.ndarray, np.ndarray, SquashedSample]:
    """`squashed_gaussian(mean, bounded_log_std(raw), scale, bias, noise)` of algos/sac.py:
    mean, raw and noise [B, A], scale and bias [A]. Returns (action [B, A], logp [B], what
    `squashed_gaussian_backward` needs)."""
    tanh_raw = np.tanh(raw)
    log_std = LOG_STD_MIN + _LOG_STD_HALF_RANGE * (tanh_raw + 1.0)
    std = np.exp(log_std)
    y = np.tanh(mean + std * noise)
    action = y * scale + bias
    jacobian = scale * (1.0 - y * y) + 1e-6
    log_normal = -0.5 * noise * noise - log_std - _HALF_LOG_2PI
    logp = (log_normal - np.log(jacobian)).sum(axis=-1)
    return action, logp, SquashedSample(noise, std, tanh_raw, y, jacobian)


def squashed_gaussian_backward(
    s: SquashedSample, scale: np.ndarray, g_action: np.ndarray | None, g_logp: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """(dL/dmean, dL/draw) [B, A] from dL/daction [B, A] (None: the action is not used) and
    dL/dlogp [B]. With u = mean + std * noise, y = tanh(u) and noise a constant:

        dL/du = (dL/da * scale + dL/dlogp * 2 y scale / jacobian) * (1 - y^2)
        dL/dlog_std = dL/du * std * noise - dL/dlogp
        dL/draw = dL/dlog_std * half_range * (1 - tanh(raw)^2)
    """
    g_logp = g_logp[:, None]
    one_minus_y2 = 1.0 - s.y * s.y
    g_u = g_logp * (2.0 * s.y * scale / s.jacobian)
    if g_action is not None:
        g_u = g_u + g_action * scale
    g_u *= one_minus_y2
    g_log_std = g_u * s.std * s.noise - g_logp
    g_raw = g_log_std * (_LOG_STD_HALF_RANGE * (1.0 - s.tanh_raw * s.tanh_raw))
    return g_u, g_raw


def minimum_backward(
    a: np.ndarray, b: np.ndarray, grad: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """The gradients of torch.minimum(a, b) given dL/dmin: to the smaller input, halved
    between the two on a tie (torch's rule)."""
    half = 0.5 * grad
    ga = np.where(a < b, grad, np.where(a == b, half, 0.0)).astype(grad.dtype, copy=False)
    gb = np.where(b < a, grad, np.where(a == b, half, 0.0)).astype(grad.dtype, copy=False)
    return ga, gb
