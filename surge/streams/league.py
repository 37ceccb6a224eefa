"""The league stream: a pool of the learner's past versions, for self-play opponents.

The league worker (surge/workers/league.py) writes a snapshot of the learner's parameters
every `selfplay.snapshot_every` versions into slot `count % pool_size` of the block (the
oldest is replaced once the pool is full); actors read it for the opponents of their
self-play games (surge/envs/selfplay.py). Each slot has a sequence counter, odd while being
written (a seqlock, as in the parameter service): a reader that raced the writer copies
again, so an opponent never plays with torn weights, and nobody waits for anybody.

Which opponent an episode gets (`choose_snapshot`): the newest snapshot with probability
`latest_share`, else one drawn from the pool (the newest included): uniformly, or with
`pfsp_power` > 0 by prioritised fictitious self-play (AlphaStar's "hard" weighting, Vinyals
et al. 2019): a snapshot's weight is (1 - the learner's win rate against it) ** pfsp_power,
so the pool's play goes to the snapshots the learner still loses to. Each actor counts the
results of its own games (`PoolResults`); nothing is shared.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from surge.envs.players import Opponent, RandomPlayer
from surge.streams.transport import BlockLayout, Field, Transport


def league_layout(pool_size: int, n_params: int) -> BlockLayout:
    return BlockLayout(
        {
            "flat": Field((pool_size, n_params), "<f4"),
            "version": Field((pool_size,), "<i8"),
            "seq": Field((pool_size,), "<i8"),
            "count": Field((1,), "<i8"),  # snapshots written so far
        }
    )


def choose_snapshot(
    rng: np.random.Generator,
    count: int,
    pool_size: int,
    latest_share: float,
    weights: np.ndarray | None = None,
) -> int:
    """The slot of an episode's opponent, given `count` snapshots written into a pool of
    `pool_size` slots: the newest with probability `latest_share`, else one drawn from the
    stored slots with `weights` (uniformly without)."""
    stored = min(count, pool_size)
    newest = (count - 1) % pool_size
    if rng.random() < latest_share:
        return newest
    if weights is None:
        return int(rng.integers(stored))
    return int(rng.choice(stored, p=weights))


def pfsp_weights(win_rates: np.ndarray, power: float) -> np.ndarray:
    """Drawing probabilities (1 - win rate) ** power, normalised; uniform if every win rate
    is 1 (nothing left to learn from any of them) or `power` is 0."""
    weights = (1.0 - np.clip(win_rates, 0.0, 1.0)) ** power
    total = weights.sum()
    return weights / total if total > 0 else np.full(len(weights), 1.0 / len(weights))


class PoolResults:
    """The learner's results against each slot's snapshot, as one actor saw them. A draw
    counts half a win; a snapshot with no games yet counts as an even match (a prior of one
    win and one loss), and a slot's count starts over when a new snapshot replaces it."""

    def __init__(self, pool_size: int) -> None:
        self.version = np.full(pool_size, -1, np.int64)
        self.score = np.zeros(pool_size)  # wins + draws / 2
        self.games = np.zeros(pool_size)

    def add(self, slot: int, version: int, outcome: int) -> None:
        if self.version[slot] != version:
            self.version[slot], self.score[slot], self.games[slot] = version, 0.0, 0.0
        self.score[slot] += (outcome + 1) / 2
        self.games[slot] += 1

    def win_rates(self, versions: np.ndarray) -> np.ndarray:
        """The win rate against each slot's current snapshot (`versions`, slot order)."""
        n = len(versions)
        same = self.version[:n] == versions
        return np.where(same, (self.score[:n] + 1) / (self.games[:n] + 2), 0.5)


def _pool_arrays(transport: Transport, block: str) -> tuple[np.ndarray, ...]:
    """The pool block's snapshots, their versions, seqlocks and count."""
    a = transport.block(block)
    return a["flat"], a["version"], a["seq"], a["count"]


class LeagueWriter:
    def __init__(self, transport: Transport, block: str) -> None:
        self._flat, self._version, self._seq, self._count = _pool_arrays(transport, block)

    @property
    def count(self) -> int:
        return int(self._count[0])

    def newest_version(self) -> int:
        """The version of the newest snapshot (-1: none yet)."""
        if self.count == 0:
            return -1
        return int(self._version[(self.count - 1) % len(self._version)])

    def add(self, version: int, flat: np.ndarray) -> None:
        self.put(self.count, version, flat)

    def put(self, number: int, version: int, flat: np.ndarray) -> None:
        """Write snapshot `number` (0, 1, ...) into its slot; the pool then holds
        `number + 1` snapshots (a forwarded copy on another node, surge/streams/ray_bridge.py,
        is written with the number it had)."""
        slot = number % len(self._version)
        self._seq[slot] |= 1  # odd: being written (already odd if a previous life died here)
        self._flat[slot] = flat
        self._version[slot] = version
        self._seq[slot] += 1  # even: complete
        self._count[0] = max(self.count, number + 1)


class LeagueReader:
    """Whole snapshots out of the pool (the league's forwarder to other nodes)."""

    def __init__(self, transport: Transport, block: str) -> None:
        self._flat, self._version, self._seq, self._count = _pool_arrays(transport, block)
        self.pool_size = len(self._version)

    @property
    def count(self) -> int:
        return int(self._count[0])

    def read(self, slot: int) -> tuple[int, np.ndarray]:
        """(version, a copy of the parameters) of the snapshot in `slot`."""
        while True:
            seq = int(self._seq[slot])
            if seq % 2:
                continue  # being written: the writer finishes in microseconds
            flat = self._flat[slot].copy()
            version = int(self._version[slot])
            if int(self._seq[slot]) == seq:
                return version, flat


class PolicyPlayer:
    """An opponent that samples its moves from one snapshot's policy (the one in `slot`)."""

    def __init__(self, policy: Any, slot: int) -> None:
        self.policy = policy  # a FlatPolicy (models/flat_policy.py): act on numpy batches
        self.slot = slot
        self.version = -1

    @property
    def name(self) -> str:
        return f"v{self.version}"

    def act(self, obs: dict[str, np.ndarray], rng: np.random.Generator) -> int:
        batch = {k: np.asarray(v)[None] for k, v in obs.items()}
        return int(self.policy.act(batch, deterministic=False)[0][0])

    def act_batch(self, obs: dict[str, np.ndarray], rng: np.random.Generator) -> np.ndarray:
        return np.asarray(self.policy.act(obs, deterministic=False)[0])


class LeaguePool:
    """An actor's view of the league: `sample` draws an episode's opponent (an
    `OpponentSource`, surge/envs/selfplay.py). A random player stands in until the league
    holds a snapshot."""

    def __init__(
        self,
        transport: Transport,
        block: str,
        make_policy: Callable[[], Any],
        latest_share: float,
        pfsp_power: float = 0.0,
    ) -> None:
        self._league = LeagueReader(transport, block)
        a = transport.block(block)
        self._version, self._seq = a["version"], a["seq"]
        self._make_policy = make_policy
        self._players: dict[int, PolicyPlayer] = {}  # by slot
        self._latest_share = latest_share
        self._pfsp_power = pfsp_power
        self.results = PoolResults(self._league.pool_size)
        self._random = RandomPlayer()

    def sample(self, rng: np.random.Generator) -> Opponent:
        count = self._league.count
        if count == 0:
            return self._random
        weights = None
        if self._pfsp_power > 0:
            versions = self._version[: min(count, self._league.pool_size)]
            weights = pfsp_weights(self.results.win_rates(versions), self._pfsp_power)
        slot = choose_snapshot(rng, count, self._league.pool_size, self._latest_share, weights)
        player = self._players.get(slot)
        if player is None:
            player = self._players[slot] = PolicyPlayer(self._make_policy(), slot)
        if player.version != int(self._version[slot]) or int(self._seq[slot]) % 2:
            self._load(slot, player)
        return player

    def report(self, opponent: Opponent, outcome: int) -> None:
        if isinstance(opponent, PolicyPlayer):  # not the random stand-in of an empty pool
            self.results.add(opponent.slot, opponent.version, outcome)

    def _load(self, slot: int, player: PolicyPlayer) -> None:
        version, flat = self._league.read(slot)
        np.copyto(player.policy.flat, flat)
        player.policy.reload()
        player.version = version
