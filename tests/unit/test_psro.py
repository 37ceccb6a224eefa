"""PSRO's pieces on OpenSpiel's Kuhn poker: the seat env, the meta-game, NashConv, and the
greedy table of a policy (surge/envs/openspiel.py, surge/population/psro.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("pyspiel")

from surge.envs.openspiel import OpenSpielSeatEnv, TabularPopulation, load_game  # noqa: E402
from surge.errors import ConfigError, EnvSpecError  # noqa: E402
from surge.population.psro import (  # noqa: E402
    extend_payoffs,
    greedy_table,
    meta_strategies,
    nash_conv,
    payoff,
    tabular,
    uniform_table,
)

KUHN = "kuhn_poker"


def exact_best_response(game, policies: np.ndarray, meta: np.ndarray) -> np.ndarray:  # type: ignore[no-untyped-def]
    """OpenSpiel's best response in each seat to the other seat's meta-strategy mixture of
    `policies`, as one table."""
    from open_spiel.python.algorithms.best_response import BestResponsePolicy
    from open_spiel.python.algorithms.policy_aggregator import PolicyAggregator

    members = [tabular(game, p) for p in policies]
    mixture = PolicyAggregator(game).aggregate([0, 1], [members, members], list(meta))
    table = uniform_table(game).copy()
    responders = [BestResponsePolicy(game, p, mixture) for p in (0, 1)]
    states = tabular(game, table).states
    for row, state in enumerate(states):
        best = responders[state.current_player()].best_response_action(
            state.information_state_string()
        )
        table[row] = np.eye(table.shape[1])[best]
    return table


def test_uniform_kuhn_numbers() -> None:
    """The published figures: uniform play is worth 0.125 to the first player and its
    NashConv is 0.917."""
    game = load_game(KUHN)
    u = uniform_table(game)
    assert payoff(game, u, u) == pytest.approx(0.125)
    conv, gains = nash_conv(game, u[None], np.ones((2, 1)))
    assert conv == pytest.approx(0.9166667, abs=1e-6)
    assert gains.sum() == pytest.approx(conv)


def test_meta_strategies_solve_a_cyclic_game() -> None:
    """Rock-paper-scissors as a meta-game: replicator dynamics find the uniform mixture."""
    rps = np.array([[0.0, -1.0, 1.0], [1.0, 0.0, -1.0], [-1.0, 1.0, 0.0]])
    meta = meta_strategies(rps, "prd", 10_000)
    assert meta.shape == (2, 3)
    np.testing.assert_allclose(meta, 1 / 3, atol=0.03)
    np.testing.assert_allclose(meta_strategies(rps, "uniform", 0), 1 / 3)


def test_exact_oracle_drives_nash_conv_down() -> None:
    """PSRO's loop with OpenSpiel's exact best response as the oracle: NashConv falls from
    0.917 to near 0 on Kuhn poker (the meta-game machinery the RL oracle plugs into)."""
    game = load_game(KUHN)
    policies = uniform_table(game)[None]
    payoffs = np.array([[payoff(game, policies[0], policies[0])]])
    convs = []
    for _ in range(6):
        meta = meta_strategies(payoffs, "prd", 5_000)
        convs.append(nash_conv(game, policies, meta)[0])
        policies = np.concatenate([policies, exact_best_response(game, policies, meta)[None]])
        payoffs = extend_payoffs(game, payoffs, policies)
    assert convs[0] == pytest.approx(0.9166667, abs=1e-6)
    assert convs[-1] < 0.3 and convs[-1] < convs[0] / 3, convs


def test_greedy_table_is_one_hot_and_legal() -> None:
    game = load_game(KUHN)
    table = greedy_table(game, lambda obs: obs["action_mask"].argmax(axis=1))
    assert table.shape == uniform_table(game).shape
    assert np.all(table.sum(axis=1) == 1)
    with pytest.raises(RuntimeError, match="illegal"):
        greedy_table(game, lambda obs: np.full(len(obs["action_mask"]), 5))


def test_seat_env_alternates_and_plays_the_population(tmp_path: Path) -> None:
    """The learner's seat alternates; the opponent is drawn from the other seat's meta-strategy
    and plays its table: an opponent that always bets (action 1) is met as such."""
    game = load_game(KUHN)
    always_bet = np.zeros_like(uniform_table(game))
    always_bet[:, 1] = 1.0
    path = tmp_path / "population.npz"
    TabularPopulation(always_bet[None], np.ones((2, 1))).save(path)
    env = OpenSpielSeatEnv(KUHN, str(path))
    seats = []
    for episode in range(6):
        obs, info = env.reset(seed=episode)
        seats.append(info["seat"])
        assert obs["observation"].shape == env.observation_space["observation"].shape
        if info["seat"] == 1:  # the opponent (seat 0) has bet: its history shows it
            assert env.state.history()[-1] == 1
        done = False
        while not done:
            legal = np.flatnonzero(obs["action_mask"])
            obs, reward, done, truncated, info = env.step(int(legal[0]))
        assert info["outcome"] == int(np.sign(reward))
    assert seats == [0, 1, 0, 1, 0, 1]


def test_seat_env_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no such game"):
        OpenSpielSeatEnv("no_such_game")
    with pytest.raises(EnvSpecError, match="two-player"):
        OpenSpielSeatEnv("kuhn_poker(players=3)")
    env = OpenSpielSeatEnv("leduc_poker")
    obs, info = env.reset(seed=0)
    assert info["seat"] == 0 and obs["action_mask"][0] == 0  # nothing to fold against yet
    with pytest.raises(EnvSpecError, match="not legal"):
        env.step(0)
    wrong = tmp_path / "wrong.npz"
    TabularPopulation(np.ones((1, 3, 2)), np.ones((2, 1))).save(wrong)
    with pytest.raises(ConfigError, match="population"):
        OpenSpielSeatEnv(KUHN, str(wrong))


def test_zero_sum_nash_matches_known_equilibria() -> None:
    """Rock-paper-scissors: uniform; matching pennies with a skew: the textbook mixture."""
    rps = np.array([[0.0, -1.0, 1.0], [1.0, 0.0, -1.0], [-1.0, 1.0, 0.0]])
    np.testing.assert_allclose(meta_strategies(rps, "nash", 0), 1 / 3, atol=1e-6)
    # row: (2, -1; -1, 1) -> the row player mixes 2/5, 3/5; the column player 2/5, 3/5
    skew = np.array([[2.0, -1.0], [-1.0, 1.0]])
    np.testing.assert_allclose(
        meta_strategies(skew, "nash", 0), [[0.4, 0.6], [0.4, 0.6]], atol=1e-6
    )
