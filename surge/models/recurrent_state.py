"""Recurrent state bookkeeping outside the network: what the streams carry, and how an actor
carries it from step to step. numpy only (actors never import torch).

A recurrent policy's state is a float32 vector of `state_size` per row (an env; in a
multi-agent actor an (env, agent) pair): h for a GRU, h and c concatenated for an LSTM. It is
the state *before* the row's current observation: the policy consumes the observation and the
state and returns its answer and the state after the step.

- inference stream: `core_in` [groups, G, S] is the state the policy must use for a request
  (written by the actor before it posts), `core_out` [groups, G, S] the state after the step
  (written by whoever answers). The policy worker keeps no state of its own, so a restarted
  policy worker, inline inference and remote inference all act alike.
- sample stream: `core0` [depth, 1, N, S] is the `core_in` of each segment's first step: the
  learner unrolls the segment from it (truncated BPTT). It has a time axis of length 1 so that
  every sample field is `[depth, T(+1), N, ...]` and a group's columns slice alike everywhere
  (the actor's views, the Ray segment forwarder).

The actor's rule, per row, after taking step t's answer (`carry`): the next request's
`core_in` is `core_out`, zeroed where the episode ended at step t (terminated or truncated);
at step 0 of every segment it stores that step's `core_in` into `core0` (`StateCarry.record`).
A new or restarted actor starts every row from zero (its episodes are fresh).

The learner's rule (`resets_before`): the state is zeroed before step t when the episode
ended at step t - 1; step 0 starts from `core0`, which already had that applied.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from surge.config.schema import ModelConfig

CORE_IN, CORE_OUT, CORE0 = "core_in", "core_out", "core0"
STATE_DTYPE = "<f4"

RowFields = dict[str, tuple[str, tuple[int, ...]]]
"""Per-row fields beside the per-step scalars: name -> (dtype, shape of one row)."""


def state_size(model: ModelConfig) -> int:
    """Floats of recurrent state per row: 0 for a feed-forward model."""
    return {"none": 0, "gru": model.core_size, "lstm": 2 * model.core_size}[model.core]


def inference_state_fields(model: ModelConfig) -> RowFields:
    """The inference block's state fields (none for a feed-forward model)."""
    size = state_size(model)
    return {CORE_IN: (STATE_DTYPE, (size,)), CORE_OUT: (STATE_DTYPE, (size,))} if size else {}


def segment_state_fields(model: ModelConfig) -> RowFields:
    """The sample block's per-segment state fields (none for a feed-forward model)."""
    size = state_size(model)
    return {CORE0: (STATE_DTYPE, (size,))} if size else {}


def carry(core_out: np.ndarray, ended: np.ndarray, core_in: np.ndarray) -> None:
    """`core_in` = `core_out` with the rows whose episode ended (`ended`, bool per row)
    zeroed: the state the next request of each row starts from. [R, S] views in place."""
    np.copyto(core_in, core_out)
    if ended.any():
        core_in[ended] = 0.0


def resets_before(terminated: Any, truncated: Any) -> Any:
    """[T, N] bool: the state is zeroed before step t because the episode ended at t - 1.
    Step 0 is never reset here (the stored `core0` already is). numpy arrays or tensors."""
    ended = terminated | truncated
    resets = ended.clone() if hasattr(ended, "clone") else ended.copy()
    resets[1:] = ended[:-1]
    resets[0] = False
    return resets


class StateCarry:
    """An actor's side of the recurrent state, over the inference block's `core_in` and
    `core_out`. The actor calls `start` for rows whose episodes it (re)starts, `record` with
    each step's segment columns before it overwrites `core_in`, and `advance` with the rows'
    episode ends before it posts the next request. `rows` index the blocks' leading axes
    with basic indexing (an int or a slice, so that they are views: an env group `g` gives
    its [G, S] rows)."""

    def __init__(self, arrays: dict[str, np.ndarray]) -> None:
        self.core_in, self.core_out = arrays[CORE_IN], arrays[CORE_OUT]

    @classmethod
    def of(cls, arrays: dict[str, np.ndarray]) -> StateCarry | None:
        """The carry for an inference block, or None when its policy is feed-forward."""
        return cls(arrays) if CORE_IN in arrays else None

    def start(self, rows: Any) -> None:
        """Fresh episodes: zero state (a new actor, or a restarted one)."""
        self.core_in[rows] = 0.0

    def record(self, rows: Any, step: int, columns: dict[str, np.ndarray]) -> None:
        """At a segment's step 0: store the state that step's request used into `core0`."""
        if step == 0:
            columns[CORE0][0] = self.core_in[rows]

    def advance(self, rows: Any, ended: np.ndarray) -> None:
        """After taking the answer and stepping: the next request's state (`carry`)."""
        carry(self.core_out[rows], ended, self.core_in[rows])
