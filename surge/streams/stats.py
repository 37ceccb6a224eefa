"""A stage's statistics for the trainer's log: a few named numbers in a block of their own.

A stage worker that is not on the trainer's data path (the reward model between actors and
replay) writes its running numbers here; the trainer, which holds a port of kind `stats`
on the block, adds them to each log line as they stand. Written in place, read without a
lock: a log line may mix two writes of different fields, never a torn number.
"""

from __future__ import annotations

import numpy as np

from surge.streams.transport import BlockLayout, Field, Transport


def stats_layout(names: tuple[str, ...]) -> BlockLayout:
    """One float64 per name (NaN until written)."""
    return BlockLayout({name: Field((1,), "<f8") for name in names})


class StatsWriter:
    """A stage's end of its stats block: it sets its numbers, the trainer reads them."""

    def __init__(self, transport: Transport, block: str) -> None:
        self.arrays = transport.block(block)

    def set(self, values: dict[str, float]) -> None:
        """Set numbers by name (each one of the block's names)."""
        for name, value in values.items():
            self.arrays[name][0] = value


def read_stats(transport: Transport, block: str) -> dict[str, float]:
    """The block's numbers, by name; the NaN of a number never written is left out."""
    values = {name: float(a[0]) for name, a in transport.block(block).items()}
    return {name: v for name, v in values.items() if not np.isnan(v)}


def reset_stats(transport: Transport, block: str) -> None:
    """Set every number of the block to NaN (not written)."""
    for a in transport.block(block).values():
        a[:] = np.nan
