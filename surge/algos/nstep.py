"""n-step returns over a window of consecutive steps of N env columns (pure numpy).

The replay worker turns each window of L steps into transitions
(s_t, a_t, R_t, discount_t, s_{t+m}) with the truncated n-step return

    R_t = sum_{k<m} gamma^k r_{t+k},    target = R_t + discount_t * max_a Q(s_{t+m}, a)

as in Horgan et al. 2018 (Ape-X, section 3) and Kapturowski et al. 2019 (R2D2), where m = n
unless the episode ended sooner. Following Gymnasium's and CleanRL's conventions a
termination (a terminal state) gives discount 0, while a truncation (a time limit) still
bootstraps, from the final observation of the episode (Pardo et al. 2018, "Time Limits in
Reinforcement Learning").
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class NStep:
    """n-step targets for each start t and column j; every field is [L, N].

    Entries with `complete` False are not final (their return runs past the window): their
    values are the partial sums so far and must be discarded; the caller recomputes them
    with the next window.
    """

    returns: np.ndarray
    """float32: sum_{k<m} gamma^k * rewards[t + k]."""
    discount: np.ndarray
    """float32: 0 if step t + m - 1 terminated, else gamma^m."""
    horizon: np.ndarray
    """int64: m, the number of steps in the return (<= n)."""
    complete: np.ndarray
    """bool: t + m - 1 < L, the whole return lies in the window."""
    truncated_end: np.ndarray
    """bool: step t + m - 1 was a truncation: bootstrap from its final observation."""


def nstep_targets(
    rewards: np.ndarray,
    terminated: np.ndarray,
    truncated: np.ndarray,
    gamma: float,
    n: int,
) -> NStep:
    """n-step returns, discounts and horizons for every start of a window.

    `rewards` [L, N] float32, `terminated` and `truncated` [L, N] bool: L consecutive steps
    of N independent env columns; terminated[t] / truncated[t] mean the episode ended at
    step t, right after its action. A step both terminated and truncated counts as a
    termination (no bootstrap). Returns an `NStep` of [L, N] arrays.
    """
    if n < 1:
        raise ValueError(f"n must be at least 1, got {n}")
    if not 0 < gamma <= 1:
        raise ValueError(f"gamma must be in (0, 1], got {gamma}")
    r = np.asarray(rewards, dtype=np.float64)
    term = np.asarray(terminated, dtype=bool)
    trunc = np.asarray(truncated, dtype=bool)
    if r.ndim != 2 or term.shape != r.shape or trunc.shape != r.shape:
        raise ValueError(
            "rewards, terminated and truncated must share one [L, N] shape, got "
            f"{r.shape}, {term.shape}, {trunc.shape}"
        )
    length, columns = r.shape
    done = term | trunc

    # Pad the window with n - 1 steps of "not there yet" so that step t + k always exists.
    pad = n - 1
    r_pad = np.concatenate([r, np.zeros((pad, columns))])
    term_pad = np.concatenate([term, np.zeros((pad, columns), dtype=bool)])
    done_pad = np.concatenate([done, np.zeros((pad, columns), dtype=bool)])
    present = np.concatenate([np.ones(length, dtype=bool), np.zeros(pad, dtype=bool)])

    # Accumulate in float64: float32 only at the end, so the return is one rounding off.
    returns = np.zeros((length, columns), dtype=np.float64)
    horizon = np.full((length, columns), n, dtype=np.int64)
    ended_terminated = np.zeros((length, columns), dtype=bool)
    ended_truncated = np.zeros((length, columns), dtype=bool)
    running = np.ones((length, columns), dtype=bool)  # no episode end among t..t+k-1
    complete = np.ones((length, columns), dtype=bool)
    for k in range(n):
        step = slice(k, k + length)
        there = present[step][:, None]
        # A return that reaches past the window is incomplete whatever follows.
        complete &= ~(running & ~there)
        running &= there
        returns += np.where(running, gamma**k * r_pad[step], 0.0)
        ends = running & done_pad[step]
        horizon[ends] = k + 1
        ended_terminated |= ends & term_pad[step]
        ended_truncated |= ends & ~term_pad[step]
        running &= ~done_pad[step]

    discount = np.where(ended_terminated, 0.0, float(gamma) ** horizon)
    return NStep(
        returns=returns.astype(np.float32),
        discount=discount.astype(np.float32),
        horizon=horizon,
        complete=complete,
        truncated_end=ended_truncated,
    )
