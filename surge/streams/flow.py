"""Flow policies of streams: how far a writer may run ahead of its readers.

`VersionBound(max_lag)` is SRL's and AReaL's staleness bound. It has two halves, both here so
that they cannot disagree:

- backpressure: an actor starts segment n only with parameters of version >= `min_version(n)`
  (the policy worker holds the request until it has them);
- admission: a reader checks the policy versions a batch was produced with and rejects steps
  older than the bound (`admits`). In the segment stream the slots already make that
  impossible (a slot is reused only after the version that frees it, streams/sample.py), so
  there a rejection is a broken invariant; streams that keep samples longer (replay, LLM
  rollouts) drop what `admits` rejects.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class VersionBound:
    max_lag: int
    """A sample trains version v only if it was produced by a version >= v - max_lag."""

    @property
    def depth(self) -> int:
        """Slots per writer row: segments a writer may have in flight."""
        return self.max_lag + 1

    def min_version(self, segment: int) -> int:
        """The oldest policy version that may produce segment `segment` (= the trainer
        version that will train on it)."""
        return max(0, segment - self.max_lag)

    def admits(self, reader_version: int, versions: np.ndarray) -> np.ndarray:
        """Which samples (their producing `versions`) the reader at `reader_version` accepts."""
        return np.asarray(versions) >= reader_version - self.max_lag

    def describe(self) -> str:
        return f"at most {self.max_lag} version(s) behind the trainer"
