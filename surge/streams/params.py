"""The parameter service: versioned weights, published by the trainer, read by policy workers.

One block per policy (the graph names it after the policy id, `params.<policy>`), so a graph
may hold several policies, each with its own trainer and subscribers.

Two buffers of the flat parameter vector; the trainer writes the one not marked latest, then
flips. Each buffer has a sequence counter (odd while being written), so a reader that raced a
writer notices and copies again (a seqlock): no locks, no torn parameters.
"""

from __future__ import annotations

import numpy as np

from surge.streams.transport import PARAMS_UPDATED, BlockLayout, Channel, Field, Transport

NONE = -1


def params_block(policy: str) -> str:
    """The block and stream name of policy `policy`'s parameters."""
    return f"params.{policy}"


def params_layout(n_params: int) -> BlockLayout:
    """The parameter block: two buffers of `n_params` float32 each, with their versions and sequence
    counters, and which one is the newest."""
    return BlockLayout(
        {
            "flat": Field((2, n_params), "<f4"),
            "seq": Field((2,), "<i8"),
            "version": Field((2,), "<i8"),
            "latest": Field((1,), "<i8"),  # index of the newest complete buffer, or -1
        }
    )


class ParameterService:
    """Versioned flat parameters in a double buffer: the trainer publishes, policy workers and
    actors read the newest without locks (a sequence counter per buffer tells a torn read)."""

    def __init__(
        self, transport: Transport, block: str, subscribers: list[Channel] | None = None
    ) -> None:
        a = transport.block(block)
        self._flat, self._seq, self._version, self._latest = (
            a["flat"],
            a["seq"],
            a["version"],
            a["latest"],
        )
        self._subscribers = subscribers or []

    def reset(self) -> None:
        """Mark the service empty (the trainer does this before its first publish)."""
        self._latest[0] = NONE

    def publish(self, version: int, flat: np.ndarray) -> None:
        """Write parameters `flat` of `version` into the buffer readers are not using, make it the
        newest, and notify every subscriber."""
        b = 1 if int(self._latest[0]) == 0 else 0  # the buffer readers are not using
        self._seq[b] += 1  # odd: writing
        self._flat[b] = flat
        self._version[b] = version
        self._seq[b] += 1  # even: complete
        self._latest[0] = b
        for channel in self._subscribers:
            channel.notify(PARAMS_UPDATED)

    def latest_version(self) -> int:
        """The version of the newest published parameters (-1: none yet)."""
        b = int(self._latest[0])
        return NONE if b == NONE else int(self._version[b])

    def read(self, out: np.ndarray) -> int:
        """Copy the newest parameters into `out`; returns their version (-1: none yet)."""
        while True:
            b = int(self._latest[0])
            if b == NONE:
                return NONE
            seq = int(self._seq[b])
            if seq % 2:
                continue
            np.copyto(out, self._flat[b])
            version = int(self._version[b])
            if int(self._seq[b]) == seq:
                return version
