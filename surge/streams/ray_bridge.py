"""Carrying streams between the shared memory of different nodes.

In a `runtime=ray` run every node has its own shared-memory directory with the same blocks and
channels as a `local` run, and workers on a node use it exactly as in `local`. Placement keeps
the inference stream inside a node, so only four kinds of stream cross nodes:

- **sample stream** (actors -> trainer). On a node without the trainer, actors write segments
  into that node's sample block, count them in its `published` array and wake the trainer's
  inbox channel there, as usual. A `SegmentForwarder` thread is the reader of that channel: for
  every segment counted there but not yet shipped it copies the group's columns and ships them
  (a Ray actor call) to the trainer's node, where `write_segments` puts them into the same
  place of the trainer's block, counts them in the trainer's `published` and wakes the trainer.
  The trainer cannot tell a forwarded segment from a local one.
- **parameter service** (trainer -> policy workers). On the trainer's node the trainer
  announces each version on the channels of the workers that run the policy (policy workers,
  or actors with inline inference), including those of workers on other nodes, which nobody
  else reads there. A `ParamsForwarder` thread reads them, copies the
  newest version once and ships it (one `ray.put`, fetched once per node) to each other node,
  where `publish_params` publishes it into that node's parameter block with the same seqlock,
  waking the workers there that run the policy. Versions are never reloaded from disk, and a
  slow node just gets the newest version (intermediate ones are skipped, as a local reader
  would).
- **league snapshots** (self-play: the league worker -> actors). On the league's node a
  forwarder ships each new snapshot of the pool to the nodes with actors, where it is
  written into the same slot under the slot's seqlock.
- **finished groups** (LLM RL: generation workers -> reward worker -> (reference) -> trainer,
  streams/rollouts.py). A writer on a node without the stream's reader fills its row there,
  sets the row's state to the one that hands it over (GENERATED for `rollouts`, ...) and wakes
  the reader's channel there. A `GroupForwarder` thread is that channel's reader: it copies
  every row newly in that state, whole, and ships it to the reader's node, where
  `write_groups` writes it into the same row (unreadable while written, as a writer's own
  rows are), sets the same state and wakes the reader. A row is handed over only once its
  group is complete, so no partial group crosses; a restarted writer's unfinished rows never
  reach that state, so they are never shipped; the version stamps travel with the tokens.

Copying a segment (or a row) before it is overwritten is safe for the same reason the local
stream is: an actor reuses a slot (a generation worker a row) only once the trainer published a
version that needs the batch the forwarded segment (group) belongs to, and the forwarder's ship
call returns after it is on the reader's node.

The forwarders take a `ship` callable, so they hold no Ray code; each waits by blocking on a
channel (0.5 s at a time, to notice `stop`), never by spinning.
"""

from __future__ import annotations

import threading
import traceback
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from surge.streams import league, params, sample
from surge.streams.rollouts import GENERATED, GENERATING, REFERENCED, SCORED
from surge.streams.transport import PARAMS_UPDATED, Channel, Transport

Segment = tuple[int, int, dict[str, np.ndarray]]
"""(env group, segment index, that group's columns of every sample field)."""


@dataclass(frozen=True)
class SegmentStream:
    """What a forwarder needs to know of a segment stream (from the graph)."""

    block: str
    reader: str
    """The worker that reads it (the trainer): its inbox is what actors wake."""
    depth: int
    group_size: int
    first: int
    """The segment index the run starts at (the resumed version)."""


WAIT_S = 0.5


class Forwarder(threading.Thread):
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


class SegmentForwarder(Forwarder):
    """Ships each segment a node's actors finish to the trainer's node, in order per group."""

    def __init__(
        self,
        transport: Transport,
        stream: SegmentStream,
        groups: list[int],
        ship: Callable[[list[Segment]], None],
    ) -> None:
        super().__init__("segment forwarder")
        arrays = transport.block(stream.block)
        self._published = arrays[sample.PROGRESS]  # finished segments per group, this run
        self._arrays = {k: v for k, v in arrays.items() if k != sample.PROGRESS}
        self._channel = transport.channel(stream.reader)  # the trainer's inbox, unread here
        depth, group_size, first_segment = stream.depth, stream.group_size, stream.first
        self._depth = depth
        self._group_size = group_size
        self._first = first_segment
        self._shipped = dict.fromkeys(groups, 0)  # counted like `published`
        self._ship = ship

    def step(self) -> None:
        self._channel.recv(WAIT_S)  # only a wake-up: the counts say what is new
        segments = []
        for g, shipped in self._shipped.items():
            for k in range(shipped, int(self._published[g])):
                n = self._first + k
                cols = slice(g * self._group_size, (g + 1) * self._group_size)
                slot = n % self._depth
                data = {
                    name: np.ascontiguousarray(v[slot, :, cols]) for name, v in self._arrays.items()
                }
                segments.append((g, n, data))
        if segments:
            self._ship(segments)
            for g, _, _ in segments:
                self._shipped[g] += 1


def write_segments(transport: Transport, stream: SegmentStream, segments: list[Segment]) -> None:
    """On the trainer's node: put forwarded segments in place, count them, wake the trainer."""
    depth, group_size, first = stream.depth, stream.group_size, stream.first
    arrays = transport.block(stream.block)
    published = arrays[sample.PROGRESS]
    for g, n, data in segments:
        cols = slice(g * group_size, (g + 1) * group_size)
        for k, v in data.items():
            arrays[k][n % depth, :, cols] = v
        published[g] = max(int(published[g]), n - first + 1)  # after the data, as an actor does
    transport.channel(stream.reader).send(*(g for g, _, _ in segments))


class ParamsForwarder(Forwarder):
    """On the trainer's node: ships every newly published version to the other nodes."""

    def __init__(
        self,
        transport: Transport,
        block: str,
        n_params: int,
        announce_channels: list[Channel],
        ship: Callable[[int, np.ndarray], None],
    ) -> None:
        super().__init__("parameter forwarder")
        self._service = params.ParameterService(transport, block)
        self._flat = np.zeros(n_params, np.float32)
        # The trainer announces each version on the channel of every worker that runs the
        # policy; we read those of workers on other nodes (left unread, they would fill).
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
    transport: Transport, block: str, subscribers: list[Channel], version: int, flat: np.ndarray
) -> None:
    """On another node: publish a forwarded version there and wake the workers that use it."""
    params.ParameterService(transport, block, subscribers).publish(version, flat)


HANDED_OVER = {"rollouts": GENERATED, "scored": SCORED, "referenced": REFERENCED}
"""The row state in which the writer of each stream of finished groups hands a group to the
reader (the LLM workers name their ports so; streams/rollouts.py has the states)."""

Row = tuple[int, dict[str, np.ndarray]]
"""(row, that row of every field of the block but `state`)."""


@dataclass(frozen=True)
class GroupStream:
    """What a forwarder needs to know of a stream of finished groups (from the graph)."""

    name: str
    block: str
    reader: str
    """The worker that reads it: its inbox is what the writers wake."""
    handed_over: int
    """The row state that hands a group to the reader (`HANDED_OVER`)."""


class GroupForwarder(Forwarder):
    """Ships each group a node's writers hand over to the reader's node, whole."""

    def __init__(
        self, transport: Transport, stream: GroupStream, ship: Callable[[list[Row]], None]
    ) -> None:
        super().__init__(f"group forwarder ({stream.name})")
        arrays = transport.block(stream.block)
        self._state, self._group = arrays["state"], arrays["group"]
        self._fields = {k: v for k, v in arrays.items() if k != "state"}
        self._channel = transport.channel(stream.reader)  # the reader's inbox, unread here
        self._handed_over = stream.handed_over
        self._shipped = np.full(len(self._state), -1, np.int64)  # group last shipped per row
        self._ship = ship

    def step(self) -> None:
        self._channel.recv(WAIT_S)  # only a wake-up: the states say what is new
        new = (self._state == self._handed_over) & (self._group != self._shipped)
        rows = [
            (int(r), {k: v[r].copy() for k, v in self._fields.items()}) for r in np.flatnonzero(new)
        ]
        if rows:
            self._ship(rows)
            for r, data in rows:
                self._shipped[r] = int(data["group"])


def write_groups(transport: Transport, stream: GroupStream, rows: list[Row]) -> None:
    """On the reader's node: put forwarded groups into their rows, hand them over, wake it."""
    arrays = transport.block(stream.block)
    state = arrays["state"]
    for r, data in rows:
        state[r] = GENERATING  # first: nobody reads the row while it is written
        for k, v in data.items():
            arrays[k][r] = v
        state[r] = stream.handed_over  # after the data, as the writer does
    transport.channel(stream.reader).send(*(r for r, _ in rows))


class SnapshotForwarder(Forwarder):
    """On the league's node: ships each new snapshot of the league's pool (self-play,
    surge/streams/league.py) to the other nodes with actors, where `write_snapshot` puts it
    into the same slot. Snapshots come every few seconds, so it looks twice a second (a
    blocking wait on its stop event, not a spin)."""

    def __init__(
        self, transport: Transport, block: str, ship: Callable[[int, int, np.ndarray], None]
    ) -> None:
        super().__init__("league forwarder")
        self._league = league.LeagueReader(transport, block)
        self._sent = 0  # snapshots shipped (the pool's `count` when they were written)
        self._ship = ship

    def step(self) -> None:
        self.stopping.wait(WAIT_S)
        count = self._league.count
        # Only the pool's newest `pool_size` snapshots still exist.
        self._sent = max(self._sent, count - self._league.pool_size)
        while self._sent < count:
            version, flat = self._league.read(self._sent % self._league.pool_size)
            self._ship(self._sent, version, flat)
            self._sent += 1


def write_snapshot(
    transport: Transport, block: str, number: int, version: int, flat: np.ndarray
) -> None:
    """On a node with actors: put forwarded snapshot `number` of the league into its slot."""
    league.LeagueWriter(transport, block).put(number, version, flat)
