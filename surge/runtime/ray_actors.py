"""The two kinds of Ray actor a `runtime=ray` run creates (plain classes; `ray.remote` is
applied by surge/runtime/ray.py).

- `NodeAgent`, one per node that hosts workers (0 CPUs): owns the node's shared memory
  (created at start, removed at the end), runs the cross-node forwarders of
  surge/streams/ray_bridge.py, and answers the controller: heartbeats measured on the node's
  own clock, the trainer's progress, stop requests.
- `WorkerHost`, one per worker: a Ray actor process (with the CPUs/GPUs its config declares)
  whose `run` drives the worker's poll loop on the node's shared memory exactly as a `local`
  worker process does. `run` returns ("finished", reason) or ("failed", its failure text); if the
  process dies instead, the controller gets a RayActorError naming the cause. A restart is a
  new host on the same node, running the next `life` (a fresh process, as in `local`).
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import time
from typing import Any

from surge.errors import failure_text
from surge.runtime.launch import drive, start_worker
from surge.runtime.warm import thread_env
from surge.streams import ray_bridge
from surge.streams.control import Control
from surge.streams.params import ParameterService
from surge.streams.transport import (
    WAKE,
    BlockLayout,
    Channel,
    ShmSpec,
    ShmTransport,
    create_shm,
    destroy_shm,
)
from surge.workers.base import RunContext
from surge.workers.graph import Graph

POLL_S = 0.5


def _node_id() -> str:
    import ray

    return str(ray.get_runtime_context().get_node_id())


class NodeAgent:
    def __init__(
        self, layouts: dict[str, BlockLayout], channels: list[str], param_blocks: list[str]
    ) -> None:
        self.shm = create_shm(layouts, channels)
        self.transport = ShmTransport(self.shm)
        self.control = Control(self.transport)
        self.control.reset()
        # An unwritten parameter block reads as version 0 of all-zero weights: mark it empty.
        for block in param_blocks:
            ParameterService(self.transport, block).reset()
        self.channels = channels
        self.forwarders: list[ray_bridge.Forwarder] = []
        self.subscribers: dict[str, list[Channel]] = {}  # parameter block -> whom to wake
        self.segment_streams: dict[str, ray_bridge.SegmentStream] = {}
        self.group_streams: dict[str, ray_bridge.GroupStream] = {}  # by stream name

    def info(self) -> dict[str, Any]:
        return {"shm": self.shm, "pid": os.getpid(), "node_id": _node_id()}

    def start_segment_forwarder(
        self, home: Any, stream: ray_bridge.SegmentStream, groups: list[int]
    ) -> None:
        """On a node of writers away from the stream's reader: their segments (rows
        `groups`) go to `home`, the agent of the reader's node."""
        import ray

        def ship(segments: list[ray_bridge.Segment]) -> None:
            ray.get(home.receive_segments.remote(stream.block, segments))

        self._start(ray_bridge.SegmentForwarder(self.transport, stream, groups, ship))

    def start_group_forwarder(self, home: Any, stream: ray_bridge.GroupStream) -> None:
        """On a node of writers away from the stream's reader: the groups they hand over go
        to `home`, the agent of the reader's node."""
        import ray

        def ship(rows: list[ray_bridge.Row]) -> None:
            ray.get(home.receive_groups.remote(stream.name, rows))

        self._start(ray_bridge.GroupForwarder(self.transport, stream, ship))

    def start_params_forwarder(
        self, block: str, remote_agents: list[Any], announced_on: list[str], n_params: int
    ) -> None:
        """On the publisher's node: new versions in `block` go to the agents of the other
        nodes with subscribers; `announced_on` are those subscribers' inboxes here."""
        import ray

        def ship(version: int, flat: Any) -> None:
            ref = ray.put(flat)  # stored once; each node's agent fetches it once
            ray.get([a.receive_params.remote(block, version, ref) for a in remote_agents])

        announce = [self.transport.channel(name) for name in announced_on]
        self._start(ray_bridge.ParamsForwarder(self.transport, block, n_params, announce, ship))

    def start_snapshot_forwarder(self, block: str, remote_agents: list[Any]) -> None:
        """On the league's node: new snapshots in `block` go to the agents of the nodes
        with actors."""
        import ray

        def ship(number: int, version: int, flat: Any) -> None:
            ref = ray.put(flat)
            calls = [a.receive_snapshot.remote(block, number, version, ref) for a in remote_agents]
            ray.get(calls)

        self._start(ray_bridge.SnapshotForwarder(self.transport, block, ship))

    def receive_snapshot(self, block: str, number: int, version: int, flat: Any) -> None:
        ray_bridge.write_snapshot(self.transport, block, number, version, flat)

    def serve_segments(self, stream: ray_bridge.SegmentStream) -> None:
        """On the reader's node: accept forwarded segments of `stream`."""
        self.segment_streams[stream.block] = stream

    def serve_groups(self, stream: ray_bridge.GroupStream) -> None:
        """On the reader's node: accept forwarded groups of `stream`."""
        self.group_streams[stream.name] = stream

    def serve_params(self, block: str, subscribers: list[str]) -> None:
        """On a node with subscribers but no publisher: accept forwarded versions of `block`
        and wake these workers."""
        self.subscribers[block] = [self.transport.channel(name) for name in subscribers]

    def receive_segments(self, block: str, segments: list[ray_bridge.Segment]) -> None:
        ray_bridge.write_segments(self.transport, self.segment_streams[block], segments)

    def receive_groups(self, stream: str, rows: list[ray_bridge.Row]) -> None:
        ray_bridge.write_groups(self.transport, self.group_streams[stream], rows)

    def receive_params(self, block: str, version: int, flat: Any) -> None:
        ray_bridge.publish_params(self.transport, block, self.subscribers[block], version, flat)

    def _start(self, forwarder: ray_bridge.Forwarder) -> None:
        forwarder.start()
        self.forwarders.append(forwarder)

    def status(self, slots: list[int], with_progress: bool) -> dict[str, Any]:
        """Seconds since each worker slot's last heartbeat (None: still starting), on this
        node's clock, plus the trainer's progress numbers and any forwarder failure."""
        now = time.monotonic()
        silent = {}
        for slot in slots:
            last = self.control.last_beat(slot)
            silent[slot] = None if last == 0.0 else now - last
        return {
            "silent": silent,
            "progress": self.control.progress() if with_progress else None,
            "error": next((f.error for f in self.forwarders if f.error), None),
        }

    def timing(self, slots: list[int]) -> dict[int, list[float]]:
        """CPU seconds by activity of the workers in these slots (tracking/timing.py)."""
        return {slot: self.control.timing[slot].tolist() for slot in slots}

    def reset_worker(self, slot: int) -> None:
        """A new life of a worker takes over `slot`: it is starting (no heartbeat yet)."""
        self.control.reset_worker(slot)

    def set_restarts(self, total: int) -> None:
        """On the trainer's node: restarts so far in the run, which the trainer logs."""
        self.control.set_progress(restarts=total)

    def request_stop(self, kind: int, wake: list[str] | None = None) -> None:
        self.control.request_stop(kind)
        for name in self.channels if wake is None else wake:
            with contextlib.suppress(OSError):
                self.transport.channel(name).send(WAKE)

    def close(self) -> None:
        for forwarder in self.forwarders:
            forwarder.stop()
        destroy_shm(self.shm)


class WorkerHost:
    def __init__(self, name: str, run_name: str, threads: int, nice: int = 0) -> None:
        self.name = name
        # Before the worker imports torch (OpenMP reads these once). Set here rather than
        # through a Ray runtime_env, which would rule out Ray's pre-started worker processes.
        os.environ.update(thread_env(threads))
        if nice:
            os.nice(nice)  # background work: training gets the CPU first
        with contextlib.suppress(ValueError):  # only possible on the main thread
            signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl+C is the controller's
        with contextlib.suppress(ImportError):
            import setproctitle

            setproctitle.setproctitle(f"surge {name} [{run_name}]")

    def info(self) -> dict[str, Any]:
        return {"pid": os.getpid(), "node_id": _node_id(), "host": socket.gethostname()}

    def run(
        self, graph: Graph, slot: int, ctx: RunContext, shm: ShmSpec, life: int = 0
    ) -> tuple[str, str]:
        """One life of the worker: ("finished", reason) or ("failed", its failure text)."""
        transport = ShmTransport(shm)
        try:
            spec, control, worker = start_worker(ctx, graph, slot, transport, life)
            drive(worker, control, spec, POLL_S)
            worker.close()
            return "finished", str(getattr(worker, "finish_reason", ""))
        except Exception as error:
            return "failed", failure_text(error)
