"""Advantage estimation: pure numpy functions over time-major [T, N] arrays.

`gae` and `vtrace` also take torch tensors (the torch learner's batches: on the CPU they
share memory with numpy) and then return tensors on the same device. The maths runs in
numpy either way: the time loop costs about 1 us per step there against about 10 us per
torch call (on a GPU, a kernel launch per step), the [T, N] arrays are small, and the numpy
learner (numpy_ppo.py) must not import torch at all.
"""

from __future__ import annotations

from typing import Any

import numpy as np

Array = Any
"""A numpy array, or a torch tensor."""


def _numpy(x: Array) -> np.ndarray:
    return x.detach().cpu().numpy() if hasattr(x, "detach") else np.asarray(x)


def _like(result: np.ndarray, example: Array) -> Array:
    """`result` as the kind of array `example` is (a torch tensor if it is one)."""
    if hasattr(example, "detach"):
        import torch  # already imported by whoever passed a tensor

        return torch.from_numpy(result).to(example.device)
    return result


def gae(
    rewards: Array,
    values: Array,
    next_values: Array,
    terminated: Array,
    dones: Array,
    gamma: float,
    lam: float,
) -> tuple[Array, Array]:
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
    example = rewards
    rewards, values, next_values, terminated, dones = (
        _numpy(x) for x in (rewards, values, next_values, terminated, dones)
    )
    shape = rewards.shape
    others = {"values": values, "next_values": next_values, "terminated": terminated}
    for name, x in {**others, "dones": dones}.items():
        if x.shape != shape:
            raise ValueError(f"gae: {name} has shape {tuple(x.shape)}, rewards {tuple(shape)}")
    dtype = rewards.dtype
    not_terminal = 1.0 - terminated.astype(dtype)
    carry = (gamma * lam) * (1.0 - dones.astype(dtype))
    deltas = rewards + (gamma * not_terminal) * next_values - values
    advantages = discounted_backwards(deltas, carry.astype(dtype))
    return _like(advantages, example), _like(advantages + values, example)


def discounted_backwards(x: np.ndarray, carry: np.ndarray) -> np.ndarray:
    """y[t] = x[t] + carry[t] * y[t+1], y[T] = 0, over the time dim of [T, N] arrays."""
    ys = np.empty_like(x)
    last = np.zeros(x.shape[1:], x.dtype)
    for t in range(x.shape[0] - 1, -1, -1):
        last = x[t] + carry[t] * last
        ys[t] = last
    return ys


def normalize(x: np.ndarray, eps: float = 1e-8) -> np.ndarray:
    """(x - mean) / (std + eps), with the unbiased std as in CleanRL. A single element has
    no spread, so it is only centred (to 0) rather than divided by a NaN std.
    (np.add.reduce and a dot product: ndarray.mean's and .std's Python wrappers cost more
    than the arithmetic on a minibatch of a few hundred advantages.)"""
    centred = x - x.dtype.type(float(np.add.reduce(x)) / x.size)
    if x.size < 2:
        return centred
    std = np.sqrt(float(np.dot(centred, centred)) / (x.size - 1))
    return centred / x.dtype.type(std + eps)


def vtrace(
    rewards: Array,
    values: Array,
    next_values: Array,
    terminated: Array,
    dones: Array,
    log_rhos: Array,
    gamma: float,
    lam: float = 1.0,
    rho_bar: float = 1.0,
    c_bar: float = 1.0,
) -> tuple[Array, Array]:
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
    example = rewards
    rewards, values, next_values, terminated, dones, log_rhos = (
        _numpy(x) for x in (rewards, values, next_values, terminated, dones, log_rhos)
    )
    shape = rewards.shape
    inputs = {"values": values, "next_values": next_values, "terminated": terminated}
    for name, x in {**inputs, "dones": dones, "log_rhos": log_rhos}.items():
        if x.shape != shape:
            raise ValueError(f"vtrace: {name} has shape {tuple(x.shape)}, rewards {tuple(shape)}")
    dtype = rewards.dtype
    rhos = np.exp(log_rhos).astype(dtype, copy=False)
    clipped_rhos = np.minimum(rhos, rho_bar)
    cs = lam * np.minimum(rhos, c_bar)
    not_terminal = 1.0 - terminated.astype(dtype)
    cont = 1.0 - dones.astype(dtype)
    bootstrap = rewards + (gamma * not_terminal) * next_values
    deltas = clipped_rhos * (bootstrap - values)
    carry = (gamma * cont * cs).astype(dtype, copy=False)
    corrections = discounted_backwards(deltas.astype(dtype, copy=False), carry)  # v_s - V(x_s)
    after = np.zeros_like(corrections)  # D_{t+1} per step, 0 at the segment end
    after[:-1] = corrections[1:]
    targets = values + corrections
    next_targets = next_values + cont * after
    advantages = rewards + (gamma * not_terminal) * next_targets - values
    return _like(advantages.astype(dtype, copy=False), example), _like(
        targets.astype(dtype, copy=False), example
    )


def vtrace_stats(log_rhos: Array, rho_bar: float) -> dict[str, float]:
    """The mean importance ratio pi/mu of a batch and the fraction `vtrace` clips."""
    rhos = np.exp(_numpy(log_rhos))
    return {
        "vtrace_rho_mean": float(rhos.mean()),
        # a margin: rounding puts half of the on-policy ratios just above 1
        "vtrace_clipped_frac": float((rhos > rho_bar * 1.001).mean()),
    }
