"""Advantage estimation: pure functions over time-major [T, N] tensors."""

from __future__ import annotations

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
    advantages = torch.empty_like(deltas)
    last = torch.zeros_like(deltas[0]) if len(deltas) else deltas
    for t in range(shape[0] - 1, -1, -1):
        last = deltas[t] + carry[t] * last
        advantages[t] = last
    return advantages, advantages + values


def normalize(x: Tensor, eps: float = 1e-8) -> Tensor:
    """(x - mean) / (std + eps), with the unbiased std as in CleanRL. A single element has
    no spread, so it is only centred (to 0) rather than divided by a NaN std."""
    centred = x - x.mean()
    if x.numel() < 2:
        return centred
    return centred / (x.std() + eps)
