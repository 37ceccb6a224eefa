"""A small PettingZoo env for tests (ours and users'): agents that join and leave mid-episode.

`env.id=pettingzoo:surge.envs.testing_pettingzoo:arrivals_env` names it. Deterministic, so a
test can check every row by hand:

- possible agents `a0`, `a1`, `a2`; an episode starts with `a0` and `a1`;
- `a2` joins after step 2 (its first observation comes with step 2's results, no reward);
- `a1` terminates at step 3 (it gets step 3's reward, then leaves);
- the episode is truncated at step `horizon` (default 6) for whoever is left;
- agent i's observation is `[i, t, 1]`, its reward `i + 1 + action / 10` (actions 0 or 1);
- `state()` is the three observations concatenated (zeros for an agent that was not in the
  last step or reset), so at an episode's end it shows who was there.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from pettingzoo import ParallelEnv

JOIN_STEP = 2
LEAVE_STEP = 3


class ArrivalsEnv(ParallelEnv[str, np.ndarray, int]):
    metadata = {"name": "surge_arrivals_v0", "render_modes": []}

    def __init__(self, horizon: int = 6) -> None:
        self.horizon = horizon
        self.possible_agents = ["a0", "a1", "a2"]
        self.agents: list[str] = []
        self.present: list[str] = []  # the agents of the last step or reset
        self.t = 0
        self._obs_space = gym.spaces.Box(-np.inf, np.inf, (3,), np.float32)
        self._act_space = gym.spaces.Discrete(2)

    def observation_space(self, agent: str) -> gym.spaces.Box:
        return self._obs_space

    def action_space(self, agent: str) -> gym.spaces.Discrete:
        return self._act_space

    def _obs(self, agent: str) -> np.ndarray:
        return np.array([self.possible_agents.index(agent), self.t, 1.0], np.float32)

    def state(self) -> np.ndarray:
        return np.concatenate(
            [
                self._obs(a) if a in self.present else np.zeros(3, np.float32)
                for a in self.possible_agents
            ]
        )

    def reset(
        self, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, np.ndarray], dict[str, dict[str, Any]]]:
        self.t = 0
        self.agents = ["a0", "a1"]
        self.present = list(self.agents)
        return {a: self._obs(a) for a in self.agents}, {a: {} for a in self.agents}

    def step(self, actions: dict[str, int]) -> tuple[dict[str, Any], ...]:
        self.t += 1
        acting = list(self.agents)
        rewards = {
            a: float(self.possible_agents.index(a) + 1 + int(actions[a]) / 10) for a in acting
        }
        terminated = {a: a == "a1" and self.t == LEAVE_STEP for a in acting}
        truncated = {a: self.t >= self.horizon and not terminated[a] for a in acting}
        obs = {a: self._obs(a) for a in acting}
        self.agents = [a for a in acting if not (terminated[a] or truncated[a])]
        if self.t == JOIN_STEP and self.t < self.horizon:
            self.agents.append("a2")
            obs["a2"] = self._obs("a2")
            rewards["a2"], terminated["a2"], truncated["a2"] = 0.0, False, False
        self.present = list(obs)
        infos: dict[str, dict[str, Any]] = {a: {} for a in obs}
        return obs, rewards, terminated, truncated, infos


def arrivals_env(horizon: int = 6) -> ArrivalsEnv:
    return ArrivalsEnv(horizon)


class StatelessArrivalsEnv(ArrivalsEnv):
    """`ArrivalsEnv` without `state()` (PettingZoo's default, which raises)."""

    state = ParallelEnv.state


def stateless_env(horizon: int = 6) -> StatelessArrivalsEnv:
    return StatelessArrivalsEnv(horizon)
