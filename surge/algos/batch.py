"""The rollout batch both PPO learners train on (built from a sample-stream slot in place by
surge/learners/ppo.py `slot_batch`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

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
    core0: Array | None = None
    """[N, S] float32: a recurrent policy's state before each segment's first step (None for
    a feed-forward policy)."""
    active: np.ndarray | None = None
    """[T, N] bool (numpy, whatever the learner): samples that train; a multi-agent row is
    inactive while its agent is out of the episode (envs/multiagent.py). None: all train."""

    def map(self, fn: Callable[[Array], Array]) -> RolloutBatch:
        """The same batch with `fn` applied to every array (e.g. `lambda t: t.numpy()`);
        `active` stays as it is, and a field that is None stays None."""
        fields = {
            k: {kk: fn(vv) for kk, vv in v.items()} if isinstance(v, dict) else fn(v)
            for k, v in vars(self).items()
            if k != "active" and v is not None
        }
        return RolloutBatch(**fields, active=self.active)
