"""A user-defined environment, trained with surge without touching surge's code.

surge builds every env with `gymnasium.make(env.id)`. An id of the form `module:Name-v0`
makes gymnasium import `module` first; importing this module runs the `gymnasium.register`
call at the bottom, so `MyEnv-v0` then exists. Each worker process does the same import.

Train it from the repository root (surge puts the current directory on sys.path, so
`examples` is importable):

    .venv/bin/surge train env.id=examples.custom_env:MyEnv-v0 stop_return=0.8

The task: an agent on a line of cells must walk to a target cell. Observation: agent and
target positions scaled to [-1, 1] (a Box of shape (2,)); actions: 0 = left, 1 = stay,
2 = right (Discrete(3)). Reaching the target ends the episode (terminated) with reward +1;
every step costs 0.05; the time limit set in `register` cuts an episode after 50 steps
(truncated). A random policy averages about -0.5, walking straight to the target about 0.84.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np


class MyEnv(gym.Env[np.ndarray, Any]):
    def __init__(self, cells: int = 9) -> None:
        self.cells = cells
        self.observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
        self.action_space = gym.spaces.Discrete(3)
        self.agent = 0
        self.target = 0

    def _obs(self) -> np.ndarray:
        scale = (self.cells - 1) / 2
        return np.array([self.agent / scale - 1, self.target / scale - 1], dtype=np.float32)

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)  # seeds self.np_random
        self.agent = int(self.np_random.integers(self.cells))
        self.target = int(self.np_random.integers(self.cells))
        while self.target == self.agent:
            self.target = int(self.np_random.integers(self.cells))
        return self._obs(), {}

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        self.agent = min(max(self.agent + int(action) - 1, 0), self.cells - 1)
        terminated = self.agent == self.target
        reward = (1.0 if terminated else 0.0) - 0.05
        # truncated is always False here: gymnasium's TimeLimit wrapper, added by `make`
        # because of max_episode_steps below, sets it.
        return self._obs(), reward, terminated, False, {}


# The entry point names this module and class, as in Gymnasium's own docs.
gym.register(id="MyEnv-v0", entry_point="examples.custom_env:MyEnv", max_episode_steps=50)
