"""Exploration in the actors (algos/exploration.py): epsilon-greedy on a linear schedule or
per env column (Ape-X), and SAC's uniform random start."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from surge.algos.exploration import EpsilonGreedy, RandomStart, apex_epsilons
from surge.config.load import load_config
from surge.envs.spaces import EnvInfo

OBS = gym.spaces.Box(-1, 1, (2,), np.float32)


def _changed(
    explorer: EpsilonGreedy, first: int, rows: int, steps: int, draws: int = 4000
) -> float:
    """The share of greedy actions (all 0) the explorer replaced by a random action that is
    not 0 (a random draw lands on 0 a quarter of the time with 4 actions)."""
    changed = 0
    for _ in range(draws):
        actions = np.zeros(rows, np.int64)
        explorer(actions, first, steps)
        changed += int((actions != 0).sum())
    return changed / (draws * rows) / 0.75


def test_linear_epsilon_falls_over_the_schedule() -> None:
    cfg, _ = load_config(
        "cartpole-dqn",
        [
            "total_env_steps=1000", "replay.min_size=500",
            "dqn.epsilon_fraction=0.5", "dqn.epsilon_end=0.1",
        ],
    )  # fmt: skip
    explorer = EpsilonGreedy(cfg, EnvInfo(OBS, gym.spaces.Discrete(4)), columns=4, seed=0)
    assert _changed(explorer, 0, 4, steps=0) == pytest.approx(1.0, abs=0.03)
    assert _changed(explorer, 0, 4, steps=250) == pytest.approx(0.55, abs=0.03)  # halfway
    assert _changed(explorer, 0, 4, steps=900) == pytest.approx(0.1, abs=0.02)  # the floor


def test_apex_epsilons_go_by_env_column() -> None:
    cfg, _ = load_config("cartpole-dqn", ["dqn.exploration=apex"])
    explorer = EpsilonGreedy(cfg, EnvInfo(OBS, gym.spaces.Discrete(4)), columns=8, seed=0)
    eps = apex_epsilons(8)
    assert _changed(explorer, 0, 1, steps=10**9) == pytest.approx(eps[0], abs=0.03)  # 0.4
    assert _changed(explorer, 3, 1, steps=0) == pytest.approx(eps[3], abs=0.02)  # 0.4 ** 4
    assert _changed(explorer, 7, 1, steps=0, draws=20000) < 0.01  # 0.4 ** 8 = 0.00066


def test_random_start_until_the_replay_may_be_sampled() -> None:
    cfg, _ = load_config("cartpole-dqn", ["replay.min_size=100"])
    box = gym.spaces.Box(np.array([-2.0, 0.0]), np.array([2.0, 1.0]), dtype=np.float32)
    explorer = RandomStart(cfg, EnvInfo(OBS, box), columns=1, seed=0)
    actions = np.full((500, 2), 9.0, np.float32)
    explorer(actions, 0, env_steps=99)
    assert np.all(actions >= box.low) and np.all(actions <= box.high)
    assert actions[:, 0].std() > 0.5  # uniform over [-2, 2]
    kept = np.full((3, 2), 9.0, np.float32)
    explorer(kept, 0, env_steps=100)
    assert np.all(kept == 9.0)  # the policy's own actions from min_size on


def test_random_actions_are_uniform_over_the_space_with_its_start() -> None:
    cfg, _ = load_config("cartpole-dqn", ["total_env_steps=1000", "replay.min_size=500"])
    space = gym.spaces.Discrete(4, start=2)
    explorer = EpsilonGreedy(cfg, EnvInfo(OBS, space), columns=8, seed=0)
    actions = np.zeros((5000, 8), np.int64)
    for row in actions:
        explorer(row, 0, 0)  # epsilon 1: every action random
    values, counts = np.unique(actions, return_counts=True)
    assert values.tolist() == [2, 3, 4, 5]
    assert counts / actions.size == pytest.approx([0.25] * 4, abs=0.01)
