"""The rollout batch both learners train on, built from a sample-stream slot in place."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from surge.streams.sample import prefixed

Array = Any
"""numpy arrays for the numpy learner, torch tensors (sharing the memory) for the torch one."""


@dataclass
class RolloutBatch:
    """One segment of every env, time-major. Built by the trainer from shared-memory arrays."""

    obs: dict[str, Array]
    """[T, N, *field] observation at each step, in its stored dtype."""
    last_obs: dict[str, Array]
    """[N, *field] observation after the last step (to bootstrap the last value)."""
    final_obs: dict[str, Array]
    """[T, N, *field] final observation of an episode truncated at t; garbage elsewhere."""
    actions: Array
    """[T, N, *action] actions taken."""
    logp: Array
    """[T, N] behaviour-policy log-probabilities of the actions."""
    values: Array
    """[T, N] behaviour value estimates V(s_t)."""
    rewards: Array
    """[T, N] float32 rewards."""
    terminated: Array
    """[T, N] bool: the episode reached a terminal state at t."""
    truncated: Array
    """[T, N] bool: the episode was cut at t (time limit) and its final obs is in final_obs."""


def slot_batch(
    arrays: dict[str, np.ndarray], steps: int, wrap: Callable[[np.ndarray], Array] = lambda x: x
) -> RolloutBatch:
    """The batch over a slot's arrays without copying (the slot is not rewritten until the
    trainer publishes the next version); `wrap` turns each array into the learner's kind
    (torch.from_numpy for the torch learner)."""
    obs = {k: wrap(v) for k, v in prefixed(arrays, "obs/").items()}
    return RolloutBatch(
        obs={k: v[:steps] for k, v in obs.items()},
        last_obs={k: v[steps] for k, v in obs.items()},
        final_obs={k: wrap(v) for k, v in prefixed(arrays, "final_obs/").items()},
        actions=wrap(arrays["action"]),
        logp=wrap(arrays["logp"]),
        values=wrap(arrays["value"]),
        rewards=wrap(arrays["reward"]),
        terminated=wrap(arrays["terminated"]),
        truncated=wrap(arrays["truncated"]),
    )
