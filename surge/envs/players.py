"""Players of two-player games, for self-play envs (surge/envs/selfplay.py) and their fixed
opponents: the `Opponent` contract, and a uniformly random player."""

from __future__ import annotations

from typing import Protocol

import numpy as np


class Opponent(Protocol):
    @property
    def name(self) -> str: ...

    def act(self, obs: dict[str, np.ndarray], rng: np.random.Generator) -> int:
        """A legal move for the seat whose observation (with `action_mask`) this is."""
        ...

    def act_batch(self, obs: dict[str, np.ndarray], rng: np.random.Generator) -> np.ndarray:
        """Moves for a batch of observations (each field stacked, [B, ...])."""
        ...


def act_one_by_one(
    player: Opponent, obs: dict[str, np.ndarray], rng: np.random.Generator
) -> np.ndarray:
    """`act_batch` for players that decide one observation at a time."""
    rows = len(next(iter(obs.values())))
    return np.array([player.act({k: v[i] for k, v in obs.items()}, rng) for i in range(rows)])


class RandomPlayer:
    """A uniformly random legal move."""

    name = "random"

    def act(self, obs: dict[str, np.ndarray], rng: np.random.Generator) -> int:
        return int(rng.choice(np.flatnonzero(obs["action_mask"])))

    def act_batch(self, obs: dict[str, np.ndarray], rng: np.random.Generator) -> np.ndarray:
        return act_one_by_one(self, obs, rng)
