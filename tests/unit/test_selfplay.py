"""Self-play: connect four's rules and heuristic player, the learner's seat as an env, the
league's pool and how an episode's opponent is drawn."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

pytest.importorskip("pettingzoo")

from surge.config.schema import EnvConfig, ModelConfig  # noqa: E402
from surge.envs.connect_four import (  # noqa: E402
    ConnectFourHeuristic,
    four_in_a_row,
    landing_row,
)
from surge.envs.make import probe_env  # noqa: E402
from surge.envs.players import RandomPlayer  # noqa: E402
from surge.envs.selfplay import (  # noqa: E402
    Fixed,
    fixed_player,
    make_selfplay_env,
)
from surge.errors import ConfigError  # noqa: E402
from surge.models.flat_policy import FlatPolicy  # noqa: E402
from surge.streams.league import (  # noqa: E402
    LeaguePool,
    LeagueWriter,
    PoolResults,
    choose_snapshot,
    league_layout,
    pfsp_weights,
)
from surge.streams.transport import InlineTransport  # noqa: E402

C4 = "selfplay:pettingzoo.classic.connect_four_v3"


def _obs(rows: list[str]) -> dict[str, np.ndarray]:
    """A board from the mover's view: 'x' its pieces, 'o' the opponent's, top row first."""
    board = np.zeros((6, 7, 2), np.int8)
    for r, line in enumerate(rows):
        for c, ch in enumerate(line):
            if ch == "x":
                board[r, c, 0] = 1
            elif ch == "o":
                board[r, c, 1] = 1
    mask = (board[0].sum(-1) == 0).astype(np.int8)
    return {"observation": board, "action_mask": mask}


EMPTY = ["......."] * 6


def test_rules() -> None:
    occupied = np.zeros((6, 7), bool)
    assert landing_row(occupied, 3) == 5
    occupied[5, 3] = occupied[4, 3] = True
    assert landing_row(occupied, 3) == 3
    occupied[:, 0] = True
    assert landing_row(occupied, 0) == -1
    for cells in (
        [(5, 0), (5, 1), (5, 2), (5, 3)],
        [(2, 6), (3, 6), (4, 6), (5, 6)],
        [(5, 0), (4, 1), (3, 2), (2, 3)],
        [(2, 0), (3, 1), (4, 2), (5, 3)],
    ):
        board = np.zeros((6, 7), bool)
        for r, c in cells:
            board[r, c] = True
        assert four_in_a_row(board)
        board[cells[-1]] = False
        assert not four_in_a_row(board)


def test_heuristic_wins_blocks_and_does_not_help() -> None:
    h, rng = ConnectFourHeuristic(), np.random.default_rng(0)
    win = _obs([".......", ".......", ".......", ".......", "o......", "oxxx.o."])
    assert h.act(win, rng) == 4  # takes the win rather than blocking column 0
    block = _obs([".......", ".......", ".......", "o......", "o......", "o.x.x.."])
    assert h.act(block, rng) == 0
    # x in column 1 lands on row 4 and lets o complete the diagonal (2,0)-(5,3) on top of it.
    trap = _obs([".......", ".......", "o......", "o......", "x.o....", "xxxo..."])
    moves = {h.act(trap, np.random.default_rng(s)) for s in range(200)}
    assert 1 not in moves and moves <= {0, 2, 3, 4, 5, 6}
    # Otherwise centre-weighted: the centre column is the most frequent first move.
    firsts = [h.act(_obs(EMPTY), np.random.default_rng(s)) for s in range(400)]
    counts = np.bincount(firsts, minlength=7)
    assert counts.argmax() == 3 and counts[0] < counts[3] / 2


def test_learner_seat_alternates_and_rewards_are_the_learners() -> None:
    env = make_selfplay_env(C4, {}, Fixed(RandomPlayer()))
    outcomes, seats = [], []
    rng = np.random.default_rng(0)
    for episode in range(40):
        obs, info = env.reset(seed=episode)
        seats.append(info["seat"])
        if info["seat"] == 1:  # the opponent has moved first
            assert obs["observation"][..., 1].sum() == 1
        total, done = 0.0, False
        while not done:
            assert obs["action_mask"].any()  # it is always the learner's turn
            action = RandomPlayer().act(obs, rng)
            obs, reward, terminated, truncated, info = env.step(action)
            total += reward
            done = terminated or truncated
        assert info["outcome"] == int(np.sign(total)) and total in (-1.0, 0.0, 1.0)
        outcomes.append(total)
    assert seats == [0, 1] * 20
    assert {-1.0, 1.0} <= set(outcomes)


def test_heuristic_beats_random() -> None:
    """The fixed evaluation opponent is much stronger than random (seats alternating)."""
    env = make_selfplay_env(C4, {}, Fixed(RandomPlayer()))
    h, rng, wins = ConnectFourHeuristic(), np.random.default_rng(1), 0
    for episode in range(100):
        obs, _ = env.reset(seed=episode)
        done, total = False, 0.0
        while not done:
            obs, reward, terminated, truncated, _ = env.step(h.act(obs, rng))
            total += reward
            done = terminated or truncated
        wins += total > 0
    assert wins >= 90


def test_fixed_players_by_name() -> None:
    assert isinstance(fixed_player("random", C4), RandomPlayer)
    assert isinstance(fixed_player("heuristic", C4), ConnectFourHeuristic)
    with pytest.raises(ConfigError, match="no 'heuristic' player"):
        fixed_player("heuristic", "selfplay:pettingzoo.classic.tictactoe_v3")


def test_choose_snapshot_shares() -> None:
    rng = np.random.default_rng(0)
    picks = np.array([choose_snapshot(rng, 25, 20, 0.5) for _ in range(20000)])
    newest = (25 - 1) % 20
    assert abs((picks == newest).mean() - (0.5 + 0.5 / 20)) < 0.02
    assert set(picks.tolist()) == set(range(20))
    assert {choose_snapshot(rng, 3, 20, 0.0) for _ in range(200)} == {0, 1, 2}


def _league(slots: int) -> tuple[Callable[[], FlatPolicy], int, InlineTransport, LeagueWriter]:
    """A connect-four league block of `slots` snapshots of a small MLP: (a maker of its
    policies, floats per snapshot, the transport, the league's writer)."""
    info = probe_env(EnvConfig(id=C4), 0)
    model = ModelConfig(hidden_sizes=[8])

    def make_policy() -> FlatPolicy:
        return FlatPolicy(info.observation_space, info.action_space, model, 0)

    n = make_policy().flat.size
    transport = InlineTransport({"league": league_layout(slots, n)}, [])
    return make_policy, n, transport, LeagueWriter(transport, "league")


def test_league_pool_reads_whole_snapshots_and_reloads_replaced_slots() -> None:
    make_policy, n, transport, writer = _league(2)
    pool = LeaguePool(transport, "league", make_policy, latest_share=1.0)
    rng = np.random.default_rng(0)
    assert isinstance(pool.sample(rng), RandomPlayer)  # nothing in the league yet
    writer.add(0, np.full(n, 0.5, np.float32))
    first = pool.sample(rng)
    assert first.name == "v0" and (first.policy.flat == 0.5).all()  # type: ignore[attr-defined]
    writer.add(10, np.full(n, 1.5, np.float32))
    writer.add(20, np.full(n, 2.5, np.float32))  # replaces version 0's slot
    newest = pool.sample(rng)
    assert newest.name == "v20" and (newest.policy.flat == 2.5).all()  # type: ignore[attr-defined]
    assert writer.newest_version() == 20 and writer.count == 3
    obs = _obs(EMPTY)
    assert 0 <= newest.act(obs, rng) < 7


def test_pfsp_weights_favour_the_snapshots_the_learner_loses_to() -> None:
    w = pfsp_weights(np.array([0.9, 0.5, 0.1]), 2.0)
    np.testing.assert_allclose(w, np.array([0.01, 0.25, 0.81]) / 1.07)
    np.testing.assert_allclose(pfsp_weights(np.array([0.9, 0.1]), 0.0), [0.5, 0.5])
    np.testing.assert_allclose(pfsp_weights(np.array([1.0, 1.0]), 2.0), [0.5, 0.5])


def test_pool_results_count_per_snapshot_and_start_over_when_a_slot_is_replaced() -> None:
    r = PoolResults(3)
    for outcome in (1, 1, 1, 0):  # 3.5 of 4 against version 10 in slot 0
        r.add(0, 10, outcome)
    r.add(1, 20, -1)
    rates = r.win_rates(np.array([10, 20, 30]))
    np.testing.assert_allclose(rates, [(3.5 + 1) / 6, 1 / 3, 0.5])  # slot 2: no games yet
    np.testing.assert_allclose(r.win_rates(np.array([40, 20]))[0], 0.5)  # slot 0 replaced
    r.add(0, 40, -1)
    np.testing.assert_allclose(r.win_rates(np.array([40]))[0], 1 / 3)


def test_a_pfsp_pool_draws_the_snapshot_the_learner_loses_to_more_often() -> None:
    """The env reports each finished game to its source; with pfsp_power the pool then
    draws the snapshot the learner keeps losing to far more often than the one it beats."""
    make_policy, n, transport, writer = _league(2)
    writer.add(0, np.zeros(n, np.float32))
    writer.add(10, np.ones(n, np.float32))
    pool = LeaguePool(transport, "league", make_policy, latest_share=0.0, pfsp_power=2.0)
    rng = np.random.default_rng(0)
    beaten, unbeaten = pool.sample(rng), pool.sample(rng)
    while unbeaten is beaten:
        unbeaten = pool.sample(rng)
    for _ in range(20):
        pool.report(beaten, 1)
        pool.report(unbeaten, -1)
    draws = [pool.sample(rng) for _ in range(2000)]
    share = sum(d is unbeaten for d in draws) / len(draws)
    # win rates 21/22 and 1/22: weights (1/22)^2 and (21/22)^2, a share of 441/442
    assert share > 0.98
    # SelfPlayEnv tells its source how each game ended.
    told: list[int] = []

    class Told(Fixed):
        def report(self, opponent: object, outcome: int) -> None:
            told.append(outcome)

    env = make_selfplay_env(C4, {}, Told(RandomPlayer()))
    env.reset(seed=0)
    done = False
    while not done:
        mask = env.game.observe(env.learner)["action_mask"]
        _, reward, done, _, info_ = env.step(int(np.flatnonzero(mask)[0]))
    assert told == [info_["outcome"]] and info_["outcome"] == int(np.sign(reward))


class _Leftmost:
    """A deterministic opponent that counts its batched calls."""

    name = "leftmost"

    def __init__(self) -> None:
        self.batches: list[int] = []

    def act(self, obs: dict[str, np.ndarray], rng: np.random.Generator) -> int:
        return int(np.flatnonzero(obs["action_mask"])[0])

    def act_batch(self, obs: dict[str, np.ndarray], rng: np.random.Generator) -> np.ndarray:
        self.batches.append(len(obs["action_mask"]))
        return obs["action_mask"].argmax(-1)


def test_a_group_of_games_batches_the_opponents_and_plays_what_each_game_plays() -> None:
    """SelfPlayGroup asks the opponent once for all games waiting on it, and every game goes
    exactly as the same game played alone (SelfPlayEnv.step) with the same moves."""
    from surge.config.schema import EnvConfig as Cfg
    from surge.envs.selfplay import SelfPlayGroup

    G = 4
    opponent = _Leftmost()
    info = probe_env(Cfg(id=C4), 0)
    out = {
        "observation": np.zeros((G, 6, 7, 2), np.int8),
        "action_mask": np.zeros((G, 7), np.int8),
    }
    group = SelfPlayGroup(Cfg(id=C4), list(range(G)), out, Fixed(opponent))
    alone = [make_selfplay_env(C4, {}, Fixed(_Leftmost())) for _ in range(G)]
    assert group.observation_space == info.observation_space
    group.reset()
    for i, env in enumerate(alone):
        first, _ = env.reset(seed=i)
        np.testing.assert_array_equal(out["observation"][i], first["observation"])
    rng = np.random.default_rng(0)
    ends = 0
    for _ in range(60):
        moves = np.array(
            [RandomPlayer().act({k: v[i] for k, v in out.items()}, rng) for i in range(G)]
        )
        group.step(moves)
        for i, env in enumerate(alone):
            o, r, te, tr, _ = env.step(moves[i])
            assert group.rewards[i] == r and group.terminated[i] == te
            if te or tr:
                ends += 1
                np.testing.assert_array_equal(group.final_obs["observation"][i], o["observation"])
                o, _ = env.reset()
            np.testing.assert_array_equal(out["observation"][i], o["observation"])
            np.testing.assert_array_equal(out["action_mask"][i], o["action_mask"])
    assert ends >= 4 and max(opponent.batches) == G  # one call for all four games
