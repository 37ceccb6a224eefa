"""The replay stores an algorithm chooses from (`Spec.store`), and what each needs: its
storage arrays, the fields of a sampled item, and the store over a shard's arrays.

- `transitions` (algos/transition_store.py): n-step transitions of one env column (DQN,
  SAC), uniform or prioritised;
- `sequences` (algos/sequence_replay.py): fixed-length sequences of one column with the
  recurrent state at their start (R2D2);
- `episodes` (algos/episode_store.py): whole episodes spanning an env's agents, with the
  team reward (QMIX, VDN).

The replay worker (surge/workers/replay_shard.py) and the batches block
(surge/streams/replay_blocks.py) are written once against these.
"""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np

from surge.algos.episode_store import EpisodeStore, episode_item_fields, episode_storage_fields
from surge.algos.sequence_replay import SequenceStore
from surge.algos.transition_store import Fields, ReplayStore, Spec, storage_fields

STORES = ("transitions", "sequences", "episodes")


class Store(Protocol):
    """What the replay worker asks of a store."""

    spec: Spec
    a: dict[str, np.ndarray]
    prioritized: bool

    @property
    def size(self) -> int: ...
    @property
    def inserted(self) -> int: ...
    @property
    def sampled(self) -> int: ...
    @property
    def per_item(self) -> int: ...
    @property
    def steps(self) -> int: ...

    def can_sample(self, batch: int) -> bool: ...
    def segments_added(self, columns: np.ndarray) -> int: ...
    def add(
        self, columns: np.ndarray, steps: dict[str, np.ndarray], episodes: np.ndarray | None
    ) -> int: ...
    def sample(
        self, batch: int, beta: float, out: dict[str, np.ndarray] | None = None
    ) -> dict[str, np.ndarray]: ...
    def batch_fields(self) -> Fields: ...
    def take_episodes(self, most: int) -> np.ndarray: ...
    def update_priorities(
        self, items: np.ndarray, generations: np.ndarray, td_abs: np.ndarray
    ) -> None: ...


def store_fields(spec: Spec) -> Fields:
    """The arrays of a shard's storage block."""
    return episode_storage_fields(spec) if spec.store == "episodes" else storage_fields(spec)


def item_fields(spec: Spec) -> Fields:
    """What a sampled item holds: field -> (shape, dtype), per item."""
    if spec.store == "episodes":
        return episode_item_fields(spec)
    return (SequenceStore if spec.store == "sequences" else ReplayStore).item_fields(spec)


def make_store(spec: Spec, arrays: dict[str, np.ndarray], seed: int, **settings: Any) -> Store:
    """The store of `spec.store` over a shard's arrays; `settings`: the return and priority
    settings of the transition and sequence stores (gamma, nstep, prioritized, alpha, ...)."""
    if spec.store not in STORES:
        raise ValueError(f"replay store {spec.store!r}: expected one of {STORES}")
    if spec.store == "episodes":
        return EpisodeStore(spec, arrays, seed)
    kind = SequenceStore if spec.store == "sequences" else ReplayStore
    return kind(spec, arrays, seed=seed, **settings)
