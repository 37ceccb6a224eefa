"""Exploration in the actors (`RunContext.explore`): what an actor does to the acting policy's
actions before it steps its envs, and records as the actions taken. Pure numpy: actors never
import torch.

- `EpsilonGreedy` (DQN): each env column's action becomes a uniformly random one with
  probability epsilon; epsilon falls linearly over env steps (CleanRL's dqn.py: from 1 to
  0.05 over half the run), or is fixed per column, epsilon_i = 0.4^(1 + 7 i / (N - 1)) for
  column i of N (Horgan et al. 2018, Ape-X, section 4.1).
- `RandomStart` (SAC): uniformly random actions until the replay may be sampled (CleanRL's
  sac_continuous_action.py, `learning_starts`).
"""

from __future__ import annotations

from typing import Any, Protocol

import gymnasium as gym
import numpy as np

from surge.config.schema import ExperimentConfig
from surge.envs.spaces import EnvInfo


class Explorer(Protocol):
    def __call__(self, actions: np.ndarray, first_column: int, env_steps: int) -> None:
        """Change in place the actions [rows, ...] of the env columns `first_column`,
        `first_column + 1`, ..., given the run's env steps so far."""
        ...


def apex_epsilons(n: int, base: float = 0.4, alpha: float = 7.0) -> np.ndarray:
    """Ape-X's per-actor exploration rates base ** (1 + alpha * i / (n - 1)), i = 0..n-1.

    Returns [n] float64; n == 1 gives [base].
    """
    if n < 1:
        raise ValueError(f"n must be at least 1, got {n}")
    if n == 1:
        return np.array([base], dtype=np.float64)
    i = np.arange(n, dtype=np.float64)
    return np.power(base, 1.0 + alpha * i / (n - 1))


def linear_schedule(start: float, end: float, duration: float, t: float) -> float:
    """`start` at t = 0, linear to `end` at t = duration, `end` after (`start` before 0).

    CleanRL's linear_schedule for epsilon-greedy; duration <= 0 gives `end`.
    """
    if duration <= 0:
        return end
    fraction = min(max(t / duration, 0.0), 1.0)
    return start + fraction * (end - start)


class EpsilonGreedy:
    """epsilon-greedy over a Discrete action space (see the module docstring)."""

    def __init__(self, cfg: ExperimentConfig, env: EnvInfo, columns: int, seed: int) -> None:
        space = env.action_space
        if not isinstance(space, gym.spaces.Discrete):
            raise ValueError(f"epsilon-greedy explores Discrete actions, not {space}")
        self.n, self.start = int(space.n), int(space.start)
        d = cfg.dqn
        self.per_column = (
            apex_epsilons(columns, d.apex_base, d.apex_alpha) if d.exploration == "apex" else None
        )
        self.schedule = (d.epsilon_start, d.epsilon_end, d.epsilon_fraction * cfg.total_env_steps)
        self.rng = np.random.default_rng(seed)

    def epsilons(self, first_column: int, rows: int, env_steps: int) -> np.ndarray | float:
        if self.per_column is not None:
            return self.per_column[first_column : first_column + rows]
        return linear_schedule(*self.schedule, env_steps)

    def __call__(self, actions: np.ndarray, first_column: int, env_steps: int) -> None:
        rows = len(actions)
        explore = self.rng.random(rows) < self.epsilons(first_column, rows, env_steps)
        if explore.any():
            # floor(u * n) rather than rng.integers, whose bounds checks cost ~4 us a call: an
            # actor stepping one env explores at most steps
            uniform = self.rng.random(int(explore.sum())) * self.n
            actions[explore] = uniform.astype(np.int64) + self.start


class TeamEpsilonGreedy(EpsilonGreedy):
    """QMIX's exploration (EPyMARL's): every agent row epsilon-greedy with one epsilon,
    linear from `qmix.epsilon_start` to `qmix.epsilon_finish` over
    `qmix.epsilon_anneal_steps` env steps."""

    def __init__(self, cfg: ExperimentConfig, env: EnvInfo, columns: int, seed: int) -> None:
        super().__init__(cfg, env, columns, seed)
        q = cfg.qmix
        self.per_column = None
        self.schedule = (q.epsilon_start, q.epsilon_finish, float(q.epsilon_anneal_steps))


class RandomStart:
    """Uniformly random actions until `replay.min_size` env steps (see the module
    docstring)."""

    def __init__(self, cfg: ExperimentConfig, env: EnvInfo, columns: int, seed: int) -> None:
        self.space: Any = env.action_space
        self.until = cfg.replay.min_size
        self.rng = np.random.default_rng(seed)

    def __call__(self, actions: np.ndarray, first_column: int, env_steps: int) -> None:
        if env_steps >= self.until:
            return
        low, high = self.space.low, self.space.high
        actions[:] = self.rng.uniform(low, high, actions.shape).astype(actions.dtype)
