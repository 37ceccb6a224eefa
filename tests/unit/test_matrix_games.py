"""The QMIX paper's two-step game (surge/envs/matrix_games.py): PettingZoo's API test, the
return of every joint action against the paper's figure 3, what the agents observe, and
that surge reports the game's payoff as the env's episode return."""

from __future__ import annotations

import itertools
import warnings

import numpy as np
import pytest

pytest.importorskip("pettingzoo")

from pettingzoo.test import parallel_api_test  # noqa: E402

from surge.config.schema import EnvConfig, MultiAgentEnvConfig  # noqa: E402
from surge.envs.make import probe_env  # noqa: E402
from surge.envs.matrix_games import TwoStepGame, two_step  # noqa: E402
from surge.envs.multiagent import MultiAgentGroup  # noqa: E402
from surge.envs.spaces import obs_specs  # noqa: E402

TWO_STEP_ID = "pettingzoo:surge.envs.matrix_games:two_step"
STATE_1, STATE_2A, STATE_2B = np.eye(3, dtype=np.float32)
PAPER_2B = [[0.0, 1.0], [1.0, 8.0]]  # Rashid et al. 2018, figure 3: state 2B's payoffs


def _play(game: TwoStepGame, first: tuple[int, int], second: tuple[int, int]) -> list[tuple]:
    """Both steps of one episode: (observations, rewards, terminated, infos) of each."""
    game.reset(seed=0)
    steps = []
    for a0, a1 in (first, second):
        obs, rewards, terminated, truncated, infos = game.step({"agent_0": a0, "agent_1": a1})
        assert not any(truncated.values())
        steps.append((obs, rewards, terminated, infos))
    return steps


def test_pettingzoo_api_test_passes() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the API test only warns about some violations
        parallel_api_test(two_step(), num_cycles=10)


@pytest.mark.parametrize("first", list(itertools.product([0, 1], repeat=2)))
@pytest.mark.parametrize("second", list(itertools.product([0, 1], repeat=2)))
def test_every_joint_action_pays_the_papers_payoff(
    first: tuple[int, int], second: tuple[int, int]
) -> None:
    steps = _play(two_step(), first, second)
    (_, rewards_1, done_1, _), (_, rewards_2, done_2, infos) = steps
    assert rewards_1 == {"agent_0": 0.0, "agent_1": 0.0} and not any(done_1.values())
    payoff = 7.0 if first[0] == 0 else PAPER_2B[second[0]][second[1]]  # agent 1 picks the game
    assert sum(rewards_2.values()) == payoff  # the team return surge reports
    assert rewards_2["agent_0"] == rewards_2["agent_1"] == payoff / 2
    assert infos["agent_0"]["team_reward"] == payoff
    assert all(done_2.values())
    assert (payoff == 8.0) == (first[0] == 1 and second == (1, 1))


def test_each_agent_observes_the_state_one_hot() -> None:
    game = two_step()
    obs, _ = game.reset()
    for agent in game.possible_agents:
        np.testing.assert_array_equal(obs[agent], STATE_1)
    np.testing.assert_array_equal(game.state(), STATE_1)
    for agent_0_action, expected in ((0, STATE_2A), (1, STATE_2B)):
        for agent_1_action in (0, 1):  # agent 2's first action does not matter
            game.reset()
            obs, *_ = game.step({"agent_0": agent_0_action, "agent_1": agent_1_action})
            np.testing.assert_array_equal(obs["agent_1"], expected)
            np.testing.assert_array_equal(game.state(), expected)
    obs, *_ = game.step({"agent_0": 1, "agent_1": 1})
    assert game.agents == [] and not obs["agent_0"].any() and not game.state().any()


def test_surge_reports_the_payoff_as_the_episode_return() -> None:
    cfg = EnvConfig(id=TWO_STEP_ID, multiagent=MultiAgentEnvConfig(global_state="env"))
    info = probe_env(cfg, seed=0)
    assert info.observation_space["global_state"].shape == (3,)
    rows = 2 * info.rows_per_env  # two envs of two agents
    out = {
        k: np.zeros((rows, *s.shape), s.dtype) for k, s in obs_specs(info.observation_space).items()
    }
    group = MultiAgentGroup(cfg, [0, 1], out)
    group.reset()
    group.step(np.array([1, 0, 0, 1]))  # env 0 goes to 2B, env 1 to 2A
    np.testing.assert_array_equal(out["global_state"], [STATE_2B, STATE_2B, STATE_2A, STATE_2A])
    group.step(np.array([1, 1, 0, 1]))
    assert group.game_over.tolist() == [True, False, True, False]  # once per env, on its row 0
    assert group.score.tolist() == [8.0, 0.0, 7.0, 0.0]
