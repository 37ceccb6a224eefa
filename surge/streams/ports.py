"""A worker's binding to one stream of the graph: what it reads and writes, and with whom.

Ports are computed from the graph's edges (surge/workers/graph.py `Graph.ports`) and handed
to each worker when it is built. Every worker has one inbox channel, named after it; a port
names the peers at the other end, so a worker sends to a peer's inbox by its name and never
derives a channel name or a routing rule itself.
"""

from __future__ import annotations

from dataclasses import dataclass

from surge.streams.flow import FlowPolicy


@dataclass(frozen=True)
class Port:
    """One worker's end of one stream: the stream's kind and block, the peers it writes to and hears
    from, and the block's rows on its edges."""

    stream: str
    kind: str
    """The stream's kind: `request/response`, `segments`, `versions`, `results`."""
    block: str
    """The shared-memory block that holds the stream's data."""
    sends_to: tuple[str, ...] = ()
    """Workers this one writes to (their inboxes are named after them)."""
    wakes: tuple[str, ...] = ()
    """Those of `sends_to` it wakes after each write (the others look on their own clock)."""
    hears_from: tuple[str, ...] = ()
    """Workers that write to this one."""
    slots: tuple[int, ...] = ()
    """The block's rows on this worker's edges: an actor's env groups, the groups a policy
    worker serves, an evaluator's result row."""
    peer_slots: tuple[tuple[str, tuple[int, ...]], ...] = ()
    """(peer, rows of the edge with that peer), for every edge of this worker."""
    flow: FlowPolicy | None = None
    policy: str = ""
    """The policy whose data the stream carries (multi-agent runs with several policies)."""

    def slots_of(self, peer: str) -> tuple[int, ...]:
        """The block's rows on this worker's edge with `peer`."""
        return tuple(k for name, rows in self.peer_slots if name == peer for k in rows)
