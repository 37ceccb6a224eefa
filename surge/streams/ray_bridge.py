"""Carrying the two cross-node streams between the shared memory of different nodes.

In a `runtime=ray` run every node has its own shared-memory directory with the same blocks and
channels as a `local` run, and workers on a node use it exactly as in `local`. Placement keeps
the inference stream inside a node, so only two edges of the graph cross nodes:

- **sample stream** (actors -> trainer). On a node without the trainer, actors write segments
  into that node's sample block and send the group id on that node's `trainer` channel, as
  usual. A `SegmentForwarder` thread is the reader of that channel: it copies the group's
  columns of the segment and ships them (a Ray actor call) to the trainer's node, where
  `write_segments` puts them into the same place of the trainer's block and sends the group id
  on the trainer's channel. The trainer cannot tell a forwarded segment from a local one.
- **parameter service** (trainer -> policy workers). On the trainer's node the trainer
  announces each version on the policy channels, including those of policy workers on other
  nodes, which nobody else reads there. A `ParamsForwarder` thread reads them, copies the
  newest version once and ships it (one `ray.put`, fetched once per node) to each other node,
  where `publish_params` publishes it into that node's parameter block with the same seqlock,
  waking the node's policy workers. Versions are never reloaded from disk, and a slow node
  just gets the newest version (intermediate ones are skipped, as a local reader would).

Copying a segment before it is overwritten is safe for the same reason the local sample stream
is: an actor reuses a slot only once the trainer published a version that needs the batch the
forwarded segment belongs to, and the forwarder's ship call returns after the segment is on the
trainer's node.

The forwarders take a `ship` callable, so they hold no Ray code; each waits by blocking on a
channel (0.5 s at a time, to notice `stop`), never by spinning.
"""

from __future__ import annotations

import threading
import traceback
from collections.abc import Callable

import numpy as np

from surge.streams import params, sample
from surge.streams.transport import PARAMS_UPDATED, Channel, Transport

Segment = tuple[int, int, dict[str, np.ndarray]]
"""(env group, segment index, that group's columns of every sample field)."""

WAIT_S = 0.5


class _Forwarder(threading.Thread):
    """A daemon thread that remembers the first exception it hit, for the controller."""

    def __init__(self, name: str) -> None:
        super().__init__(name=name, daemon=True)
        self.stopping = threading.Event()
        self.error: str | None = None

    def run(self) -> None:
        try:
            while not self.stopping.is_set():
                self.step()
        except Exception:
            self.error = f"{self.name} failed:\n{traceback.format_exc()}"

    def step(self) -> None:
        raise NotImplementedError

    def stop(self) -> None:
        self.stopping.set()
        self.join(5.0)


class SegmentForwarder(_Forwarder):
    """Reads a node's sample channel and ships each finished segment to the trainer's node."""

    def __init__(
        self,
        transport: Transport,
        depth: int,
        group_size: int,
        groups: list[int],
        first_segment: int,
        ship: Callable[[list[Segment]], None],
    ) -> None:
        super().__init__("segment forwarder")
        self._arrays = transport.block(sample.BLOCK)
        self._channel = transport.channel(sample.CHANNEL)
        self._depth = depth
        self._group_size = group_size
        # Segments of a group arrive in order on the channel, so counting gives their index.
        self._next = dict.fromkeys(groups, first_segment)
        self._ship = ship
        self.shipped = 0

    def step(self) -> None:
        groups = [g for g in self._channel.recv(WAIT_S) if g >= 0]
        if not groups:
            return
        segments = []
        for g in groups:
            n = self._next[g]
            self._next[g] = n + 1
            cols = slice(g * self._group_size, (g + 1) * self._group_size)
            slot = n % self._depth
            data = {k: np.ascontiguousarray(v[slot, :, cols]) for k, v in self._arrays.items()}
            segments.append((g, n, data))
        self._ship(segments)
        self.shipped += len(segments)


def write_segments(transport: Transport, depth: int, group_size: int, segments: list[Segment]):  # type: ignore[no-untyped-def]
    """On the trainer's node: put forwarded segments in place, then tell the trainer."""
    arrays = transport.block(sample.BLOCK)
    for g, n, data in segments:
        cols = slice(g * group_size, (g + 1) * group_size)
        for k, v in data.items():
            arrays[k][n % depth, :, cols] = v
    transport.channel(sample.CHANNEL).send(*(g for g, _, _ in segments))


class ParamsForwarder(_Forwarder):
    """On the trainer's node: ships every newly published version to the other nodes."""

    def __init__(
        self,
        transport: Transport,
        n_params: int,
        announce_channels: list[Channel],
        ship: Callable[[int, np.ndarray], None],
    ) -> None:
        super().__init__("parameter forwarder")
        self._service = params.ParameterService(transport)
        self._flat = np.zeros(n_params, np.float32)
        # The trainer announces each version on every policy channel; we are the reader of
        # the ones whose policy worker lives on another node (left unread, they would fill).
        self._first, *self._others = announce_channels
        self._ship = ship
        self.sent = params.NONE

    def step(self) -> None:
        announced = PARAMS_UPDATED in self._first.recv(WAIT_S)
        for channel in self._others:
            channel.recv(0.0)
        # Checked even without an announcement: version 0 may predate this thread.
        if announced or self._service.latest_version() > self.sent:
            version = self._service.read(self._flat)
            if version > self.sent:
                self._ship(version, self._flat)
                self.sent = version


def publish_params(
    transport: Transport, subscribers: list[Channel], version: int, flat: np.ndarray
) -> None:
    """On another node: publish a forwarded version there and wake that node's policy workers."""
    params.ParameterService(transport, subscribers).publish(version, flat)
