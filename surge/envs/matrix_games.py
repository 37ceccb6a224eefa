"""Matrix games that tell value-decomposition methods apart, as PettingZoo parallel envs.

The two-step game of the QMIX paper (Rashid et al. 2018, section 6.1, figure 3):
`env.id=pettingzoo:surge.envs.matrix_games:two_step`. Two agents each pick action A (0) or
B (1) at each of two steps.

- Step 1 (state 1) pays nothing. Agent 1's (`agent_0`'s) action picks the game of step 2:
  A leads to state 2A, B to state 2B; agent 2's first action does not matter.
- Step 2 pays by the state's matrix, agent 1's action the row and agent 2's the column:
  state 2A pays 7 whatever they do, state 2B pays [[0, 1], [1, 8]]. The episode ends.

The best return, 8, needs both agents to pick B at step 2 after agent 1 picked B at step 1.
A sum of per-agent values (VDN) cannot represent state 2B's payoffs, values 2B below 2A's
sure 7 and settles at 7; QMIX's state-conditioned monotonic mixing represents them and
reaches 8.

Observations: each agent sees the state, a one-hot over (1, 2A, 2B); `state()` is the same
one-hot. After the last step there is no state and both are all zeros.

Rewards: surge reports an env's episode return as the sum of its agents' rewards
(surge/envs/multiagent.py), so each of the two agents gets half the game's payoff: the team
return is then the payoff (7 or 8), and both agents learn from the same signal.
`infos[agent]["team_reward"]` carries the whole payoff, for learners that want it once.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from pettingzoo import ParallelEnv

STATE_1, STATE_2A, STATE_2B = 0, 1, 2
STATE_NAMES = ("1", "2A", "2B")
ACTION_B = 1
PAYOFF_2A = np.full((2, 2), 7.0)
PAYOFF_2B = np.array([[0.0, 1.0], [1.0, 8.0]])
"""Step 2's payoffs: [agent 1's action, agent 2's action]."""


class TwoStepGame(ParallelEnv[str, np.ndarray, int]):
    """The QMIX paper's two-step cooperative matrix game (see the module docstring)."""

    metadata = {"name": "two_step_v0", "render_modes": []}

    def __init__(self) -> None:
        self.possible_agents = ["agent_0", "agent_1"]
        self.agents: list[str] = []
        self._state: int | None = None  # None: the episode is over (or not started)
        self._obs_space = gym.spaces.Box(0.0, 1.0, (len(STATE_NAMES),), np.float32)
        self._act_space = gym.spaces.Discrete(2)
        self.state_space = self._obs_space
        self.max_episode_steps = 2
        """Every episode is the two steps (an episode replay's padding)."""

    def observation_space(self, agent: str) -> gym.spaces.Box:
        """The state's one-hot, for every agent."""
        return self._obs_space

    def action_space(self, agent: str) -> gym.spaces.Discrete:
        """A (0) or B (1), for every agent."""
        return self._act_space

    def state(self) -> np.ndarray:
        """The one-hot of the current state (zeros once the episode is over)."""
        one_hot = np.zeros(len(STATE_NAMES), np.float32)
        if self._state is not None:
            one_hot[self._state] = 1.0
        return one_hot

    def reset(
        self, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, np.ndarray], dict[str, dict[str, Any]]]:
        """Start at state 1; the game is deterministic, so `seed` changes nothing."""
        self._state = STATE_1
        self.agents = list(self.possible_agents)
        return self._observe(), {agent: {} for agent in self.agents}

    def step(self, actions: dict[str, int]) -> tuple[dict[str, Any], ...]:
        """Play one step; each agent gets half the payoff, so the team's sum is the payoff."""
        first, second = (int(actions[agent]) for agent in self.possible_agents)
        acting = list(self.agents)
        if self._state == STATE_1:
            payoff = 0.0
            self._state = STATE_2B if first == ACTION_B else STATE_2A
            over = False
        else:
            table = PAYOFF_2B if self._state == STATE_2B else PAYOFF_2A
            payoff = float(table[first, second])
            self._state = None
            over = True
        share = payoff / len(self.possible_agents)
        rewards = dict.fromkeys(acting, share)
        terminated = dict.fromkeys(acting, over)
        truncated = dict.fromkeys(acting, False)
        infos: dict[str, dict[str, Any]] = {agent: {"team_reward": payoff} for agent in acting}
        obs = self._observe()
        if over:
            self.agents = []
        return obs, rewards, terminated, truncated, infos

    def _observe(self) -> dict[str, np.ndarray]:
        one_hot = self.state()
        return {agent: one_hot.copy() for agent in self.possible_agents}


def two_step() -> TwoStepGame:
    """The QMIX paper's two-step game: `env.id=pettingzoo:surge.envs.matrix_games:two_step`."""
    return TwoStepGame()
