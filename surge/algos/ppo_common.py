"""What the two PPO learners share (algos/ppo.py in torch, algos/numpy_ppo.py in numpy): the
statistics an update reports, and the minibatch plan checked against the batch (the
per-step policy outputs their samples carry are the acting policy's, models/flat_policy.py
`FlatPolicy.OUTPUTS`).

Both learners run the same algorithm on the same batch layout; the tests keep their numbers
equal (tests/unit/test_numpy_learner.py). This module imports neither torch nor a learner.
"""

from __future__ import annotations

import numpy as np

from surge.config.schema import PPOConfig
from surge.errors import ConfigError

LOSS_STATS = ("policy_loss", "value_loss", "entropy", "approx_kl", "clipfrac")
"""The order of the statistics the PPO loss returns beside the loss."""
STATS = (*LOSS_STATS, "grad_norm")
"""Stats averaged over the minibatch steps of an update."""
APPROX_KL = LOSS_STATS.index("approx_kl")


def check_minibatches(cfg: PPOConfig, T: int, N: int) -> int:
    """cfg.minibatches, after checking it (and the epochs) against a [T, N] batch."""
    size = T * N
    if cfg.epochs < 1:
        raise ConfigError(f"ppo.epochs={cfg.epochs} must be at least 1", "set ppo.epochs >= 1")
    if cfg.minibatches < 1 or size % cfg.minibatches:
        raise ConfigError(
            f"ppo.minibatches={cfg.minibatches} does not divide the batch of {size} steps "
            f"(rollout_len {T} x {N} envs)",
            "choose ppo.minibatches so that it divides ppo.rollout_len x total envs",
        )
    return cfg.minibatches


def trained_rows(active: np.ndarray | None) -> np.ndarray | None:
    """The flat indices of the [T, N] batch's samples that train (`active`: a multi-agent
    row whose agent was in its episode, surge/envs/multiagent.py), or None when all do."""
    if active is None:
        return None
    flat = np.asarray(active).reshape(-1)
    return None if flat.all() else np.flatnonzero(flat)


def minibatch_bounds(samples: int, minibatches: int) -> list[tuple[int, int]]:
    """[start, end) of each minibatch over `samples` shuffled samples: equal slices when
    `minibatches` divides `samples` (always, without inactive rows: `check_minibatches`),
    else sizes differing by at most one; empty minibatches are dropped."""
    bounds = [
        (i * samples // minibatches, (i + 1) * samples // minibatches) for i in range(minibatches)
    ]
    return [(a, b) for a, b in bounds if b > a]
