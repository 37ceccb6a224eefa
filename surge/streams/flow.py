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

import math
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class VersionBound:
    """The policy-lag bound of on-policy streams: a sample trains only versions at most `max_lag`
    ahead of the version that produced it."""

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
        """The bound in words, for the run's header."""
        return f"at most {self.max_lag} version(s) behind the trainer"


@dataclass(frozen=True)
class SampleToInsertRatio:
    """Reverb's rate limiter (`SampleToInsertRatio`): `ratio` samples per inserted item, no
    sample before `min_size` inserts, and neither side ahead of the other by more than
    `error_buffer` samples. With diff = inserts * ratio - samples (Reverb's bounds
    min_size * ratio -+ error_buffer on diff):

        a sample is allowed while  samples < (inserts - min_size) * ratio + error_buffer
        an insert is allowed while inserts < min_size + (samples + error_buffer) / ratio
    """

    ratio: float
    min_size: int
    error_buffer: float

    def samples_allowed(self, inserts: int) -> float:
        """How many samples `inserts` inserts allow in all (negative: none yet)."""
        if inserts < self.min_size:
            return 0.0
        return (inserts - self.min_size) * self.ratio + self.error_buffer

    def inserts_allowed(self, samples: int) -> float:
        """How many inserts `samples` samples allow in all."""
        return self.min_size + (samples + self.error_buffer) / self.ratio


@dataclass(frozen=True)
class RatioBound:
    """The flow policy of a sample stream a replay reads: the insert half of
    `SampleToInsertRatio` on the version clock. The trainer's version v is the number of
    batches of `batch` transitions it has sampled, so the actors may start segment n (which
    brings the run's inserts to (n - start + 1) * `round` transitions, `round` being one
    segment of every group) only with parameters of version >= `min_version(n)`: inserts
    wait for the trainer. The other half (samples wait for inserts) is the replay worker's.

    Slots are kept safe by the reader's acknowledgements (streams/sample.py), not by the
    versions: `depth` is how many segments a group may have in flight. Every sample is
    admitted, whatever its version: replay-based learners are off-policy."""

    limiter: SampleToInsertRatio
    batch: int
    round: int
    start: int
    slots: int

    @property
    def depth(self) -> int:
        """Slots per writer row: segments a group may have in flight."""
        return self.slots

    @property
    def max_lag(self) -> int:
        """Off-policy: no version bound on what trains."""
        return 0

    def min_version(self, segment: int) -> int:
        """The oldest trainer version whose parameters may produce segment `segment`, so that
        inserts stay within the limiter's ratio of the samples taken."""
        inserts = (segment - self.start + 1) * self.round
        limit = self.limiter
        need = ((inserts - limit.min_size) * limit.ratio - limit.error_buffer) / self.batch
        return self.start + max(0, math.ceil(need))

    def admits(self, reader_version: int, versions: np.ndarray) -> np.ndarray:
        """Every sample: replay-based learners are off-policy."""
        return np.ones(np.shape(versions), bool)

    def describe(self) -> str:
        """The bound in words, for the run's header."""
        limit = self.limiter
        return (
            f"inserts wait for the trainer: {limit.ratio:g} samples per insert after "
            f"{limit.min_size:,}, within {limit.error_buffer:g} samples"
        )


FlowPolicy = VersionBound | RatioBound
"""What a stream's flow policy is (`StreamSpec.flow`, `Port.flow`)."""
