"""Connect four's rules on PettingZoo's observation, and a fixed heuristic player.

PettingZoo's `connect_four_v3` observes a [6, 7, 2] board from the seat to move: channel 0
its own pieces, channel 1 the opponent's, row 0 the top. Pieces drop to the lowest empty row.

`ConnectFourHeuristic` is the fixed opponent the self-play evaluations report against: it
wins at once when it can, else blocks the opponent's immediate win, else avoids a move that
lets the opponent win on top of it, and otherwise picks at random, weighted towards the
centre columns (1, 2, 3, 4, 3, 2, 1). It sees one move ahead only, so it can be beaten by
threats it cannot see coming, such as two at once.
"""

from __future__ import annotations

import numpy as np

from surge.envs.players import act_one_by_one

CENTRE_WEIGHTS = np.array([1, 2, 3, 4, 3, 2, 1], np.float64)


def landing_row(occupied: np.ndarray, col: int) -> int:
    """The row a piece dropped in `col` lands on (-1: the column is full)."""
    empty = np.flatnonzero(~occupied[:, col])
    return int(empty[-1]) if len(empty) else -1


def four_in_a_row(pieces: np.ndarray) -> bool:
    """Whether the [6, 7] bool board has four in a row in any direction."""
    p = pieces
    return bool(
        (p[:, :-3] & p[:, 1:-2] & p[:, 2:-1] & p[:, 3:]).any()  # horizontal
        or (p[:-3] & p[1:-2] & p[2:-1] & p[3:]).any()  # vertical
        or (p[:-3, :-3] & p[1:-2, 1:-2] & p[2:-1, 2:-1] & p[3:, 3:]).any()  # diagonal \
        or (p[3:, :-3] & p[2:-1, 1:-2] & p[1:-2, 2:-1] & p[:-3, 3:]).any()  # diagonal /
    )


def wins_with(pieces: np.ndarray, row: int, col: int) -> bool:
    """Whether adding a piece at (row, col) makes four in a row."""
    if row < 0:
        return False
    board = pieces.copy()
    board[row, col] = True
    return four_in_a_row(board)


class ConnectFourHeuristic:
    """Win, else block, else do not help the opponent, else a centre-weighted random move."""

    name = "heuristic"

    def act(self, obs: dict[str, np.ndarray], rng: np.random.Generator) -> int:
        board = np.asarray(obs["observation"]).astype(bool)
        mine, theirs = board[..., 0], board[..., 1]
        occupied = mine | theirs
        legal = [int(c) for c in np.flatnonzero(obs["action_mask"])]
        rows = {c: landing_row(occupied, c) for c in legal}
        for pieces in (mine, theirs):  # my win first, then their win to block
            for c in legal:
                if wins_with(pieces, rows[c], c):
                    return c
        safe = [c for c in legal if not wins_with(theirs, rows[c] - 1, c)]
        choices = safe or legal
        weights = CENTRE_WEIGHTS[choices]
        return int(rng.choice(choices, p=weights / weights.sum()))

    def act_batch(self, obs: dict[str, np.ndarray], rng: np.random.Generator) -> np.ndarray:
        return act_one_by_one(self, obs, rng)
