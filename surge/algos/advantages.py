"""Advantage estimation: pure functions over time-major [T, N] tensors."""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor


def gae(
    rewards: Tensor,
    values: Tensor,
    next_values: Tensor,
    terminated: Tensor,
    dones: Tensor,
    gamma: float,
    lam: float,
) -> tuple[Tensor, Tensor]:
    """Generalised advantage estimation (Schulman et al. 2016). Returns (advantages, returns).

    All inputs are [T, N] (time-major, N envs); `terminated` and `dones` are bool.

    - `values[t]` = V(s_t) from the behaviour policy.
    - `next_values[t]` = V of the true next state of step t: V(s_{t+1}) normally, V(final
      observation) when the episode was truncated at t (time limit), anything when it
      terminated at t. Taking next values explicitly, instead of shifting `values`, is what
      lets truncated episodes bootstrap from their final observation (the env has already
      reset, so s_{t+1} in the rollout belongs to the next episode).
    - `terminated[t]`: the episode ended at t in a terminal state: no bootstrap.
    - `dones[t]` = terminated or truncated at t: the recursion is cut, so advantages never
      flow across an episode boundary.

        delta_t = r_t + gamma * (1 - terminated_t) * next_values_t - values_t
        A_t     = delta_t + gamma * lam * (1 - dones_t) * A_{t+1}     (A_T = 0)
        returns = A + values
    """
    shape = rewards.shape
    others = {"values": values, "next_values": next_values, "terminated": terminated}
    for name, x in {**others, "dones": dones}.items():
        if x.shape != shape:
            raise ValueError(f"gae: {name} has shape {tuple(x.shape)}, rewards {tuple(shape)}")
    not_terminal = 1.0 - terminated.to(rewards.dtype)
    carry = gamma * lam * (1.0 - dones.to(rewards.dtype))
    deltas = rewards + gamma * not_terminal * next_values - values
    advantages = _discounted_backwards(deltas, carry)
    return advantages, advantages + values


def _discounted_backwards(x: Tensor, carry: Tensor) -> Tensor:
    """y[t] = x[t] + carry[t] * y[t+1], y[T] = 0, over the time dim of [T, N] tensors.

    The loop runs on numpy views of CPU tensors: a step costs about 1 us there against
    about 10 us per torch call, and the loop is a few percent of a small-MLP update."""
    if x.device.type != "cpu" or x.requires_grad or carry.requires_grad:
        out = torch.empty_like(x)
        last = torch.zeros_like(x[0]) if len(x) else x
        for t in range(x.shape[0] - 1, -1, -1):
            last = x[t] + carry[t] * last
            out[t] = last
        return out
    xs, cs = x.contiguous().numpy(), carry.contiguous().numpy()
    ys = np.empty_like(xs)
    last_np = np.zeros(xs.shape[1:], xs.dtype)
    for t in range(xs.shape[0] - 1, -1, -1):
        last_np = xs[t] + cs[t] * last_np
        ys[t] = last_np
    return torch.from_numpy(ys)


def normalize(x: Tensor, eps: float = 1e-8) -> Tensor:
    """(x - mean) / (std + eps), with the unbiased std as in CleanRL. A single element has
    no spread, so it is only centred (to 0) rather than divided by a NaN std."""
    centred = x - x.mean()
    if x.numel() < 2:
        return centred
    return centred / (x.std() + eps)


def vtrace(
    rewards: Tensor,
    values: Tensor,
    next_values: Tensor,
    terminated: Tensor,
    dones: Tensor,
    log_rhos: Tensor,
    gamma: float,
    lam: float = 1.0,
    rho_bar: float = 1.0,
    c_bar: float = 1.0,
) -> tuple[Tensor, Tensor]:
    """V-trace (Espeholt et al. 2018, IMPALA): off-policy corrected value targets and policy
    advantages for actions chosen by a behaviour policy mu. Returns (advantages, targets).

    Inputs are [T, N] time-major, with the same meaning as in `gae`; `values` and
    `next_values` come from the *current* value function, and `log_rhos` = log pi(a|s) -
    log mu(a|s) (current policy vs behaviour policy).

        rho_t   = min(rho_bar, exp(log_rhos_t))
        c_t     = lam * min(c_bar, exp(log_rhos_t))
        delta_t = rho_t * (r_t + gamma * (1 - terminated_t) * next_values_t - values_t)
        D_t     = delta_t + gamma * (1 - dones_t) * c_t * D_{t+1}        (D_T = 0)
        targets = values + D                                            (v_s in the paper)
        A_t     = r_t + gamma * (1 - terminated_t) * v_next_t - values_t
    where v_next_t = next_values_t + (1 - dones_t) * D_{t+1} is the target of the next state
    (the plain bootstrap value across an episode end or the segment end). IMPALA multiplies
    A_t by rho_t because its gradient is grad log pi; the clipped surrogate that consumes
    these advantages already weights them by its ratio pi / mu, so they carry no rho here.

    On-policy (log_rhos = 0) with rho_bar, c_bar >= 1, the targets equal GAE(lam)'s returns;
    `lam` is the lambda variant of the paper's remark 2.
    """
    shape = rewards.shape
    inputs = {"values": values, "next_values": next_values, "terminated": terminated}
    for name, x in {**inputs, "dones": dones, "log_rhos": log_rhos}.items():
        if x.shape != shape:
            raise ValueError(f"vtrace: {name} has shape {tuple(x.shape)}, rewards {tuple(shape)}")
    rhos = torch.exp(log_rhos)
    clipped_rhos = torch.clamp(rhos, max=rho_bar)
    cs = lam * torch.clamp(rhos, max=c_bar)
    not_terminal = 1.0 - terminated.to(rewards.dtype)
    cont = 1.0 - dones.to(rewards.dtype)
    bootstrap = rewards + gamma * not_terminal * next_values
    deltas = clipped_rhos * (bootstrap - values)
    carry = gamma * cont * cs
    corrections = _discounted_backwards(deltas, carry)  # D_t = v_s - V(x_s)
    after = torch.zeros_like(deltas)  # D_{t+1} per step, 0 at the segment end
    after[:-1] = corrections[1:]
    targets = values + corrections
    next_targets = next_values + cont * after
    advantages = rewards + gamma * not_terminal * next_targets - values
    return advantages, targets
