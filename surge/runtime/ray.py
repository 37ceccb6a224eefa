"""The Ray runtime: every worker a Ray actor on a Ray cluster, streams in each node's shared memory.

The controller (this process, Ray's driver) connects to `ray.address` or starts a Ray instance
on this machine, decides placement (surge/runtime/placement.py), starts one `NodeAgent` per
node used (shared memory and the cross-node forwarders) and one `WorkerHost` per worker
(surge/runtime/ray_actors.py), and then watches as the local runtime does: worker exits,
heartbeats, the trainer's progress. What happens then is the supervisor's
(runtime/supervisor.py), as in `local`: an actor or policy worker that dies or hangs is
restarted in place (a new Ray actor on the same node takes over its slot in that node's
shared memory, with a new `life`), up to `workers.max_restarts` times. Any other failure stops
the run with that worker's name and traceback (or, for a process that died, Ray's account of
why); whatever happens, every actor is stopped and every node's shared memory removed before
`run_ray` returns.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import sys
from collections.abc import Callable
from typing import Any

from surge.errors import UserError, WorkerFailure
from surge.runtime.launch import write_timing
from surge.runtime.placement import NodeInfo, Placement, demands, place
from surge.runtime.ray_actors import NodeAgent, WorkerHost
from surge.runtime.supervisor import STARTUP_TIMEOUT_S, Exit, Supervisor
from surge.streams.control import CHECKPOINT_AND_STOP, STOP, Control, control_layout
from surge.streams.ray_bridge import HANDED_OVER, GroupStream, SegmentStream
from surge.streams.sample import PROGRESS
from surge.streams.transport import InlineTransport
from surge.workers.base import RunContext
from surge.workers.graph import Graph, StreamSpec, WorkerSpec

STATUS_TIMEOUT_S = 30.0

# For a Ray instance surge starts itself: keep all of Ray's traffic on 127.0.0.1 (without
# this Ray advertises the machine's outward address), no usage reporting, no token auth.
LOCAL_RAY_ENV = {
    "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
    "RAY_USAGE_STATS_ENABLED": "0",
    "RAY_AUTH_MODE": "disabled",
}


def run_ray(ctx: RunContext, graph: Graph, on_tick: Callable[[Control], None]) -> str:
    if ctx.cfg.ray.address is None:
        for key, value in LOCAL_RAY_ENV.items():
            os.environ.setdefault(key, value)  # before `import ray`, which reads them
    try:
        import ray
    except ImportError:
        raise UserError(
            "runtime=ray needs Ray, which is not installed",
            "install it with `pip install 'surge-rl[ray]'` (on every node of the cluster)",
        ) from None

    connected_here = not ray.is_initialized()
    if connected_here:
        _connect(ctx, graph)
    try:
        run = _Run(ctx, graph, on_tick)
        try:
            return run.start_nodes_and_run()
        finally:
            run.stop_all()
    finally:
        if connected_here:
            ray.shutdown()


def _connect(ctx: RunContext, graph: Graph) -> None:
    import ray

    address = ctx.cfg.ray.address
    quiet = {"logging_level": logging.WARNING, "include_dashboard": False}
    if address is None:
        # Ray CPUs are a scheduling budget. Like `local`, a run on one machine may declare
        # more than it has cores; it then shares them.
        declared = sum(d.cpus for d in demands(graph.workers).values())
        cpus = max(os.cpu_count() or 1, math.ceil(declared))
        # "local": a new instance even if this machine is part of a cluster (ray.init()
        # alone would join it).
        ray.init(address="local", num_cpus=cpus, **quiet)  # type: ignore[arg-type]
        return
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    try:
        ray.init(address=address, **quiet)  # type: ignore[arg-type]
    except (ConnectionError, RuntimeError, ValueError) as e:
        raise UserError(
            f"cannot connect to the Ray cluster at ray.address={address}: {e}",
            "start it first (`ray start --head`, docs/scaling.md) and pass its GCS address "
            "HOST:PORT, or leave ray.address unset to start Ray on this machine",
        ) from None


def cluster_nodes() -> list[NodeInfo]:
    """The alive nodes of the connected cluster, with their total CPUs and GPUs."""
    import ray

    here = ray.get_runtime_context().get_node_id()
    return [
        NodeInfo(
            node_id=n["NodeID"],
            address=n["NodeManagerAddress"],
            cpus=float(n["Resources"].get("CPU", 0.0)),
            gpus=float(n["Resources"].get("GPU", 0.0)),
            is_controller_node=n["NodeID"] == here,
        )
        for n in ray.nodes()
        if n["Alive"]
    ]


class _Run:
    """One run on the cluster, and the Ray runtime for the supervisor (runtime/supervisor.py
    `Runtime`): a Ray actor per worker life. Every Ray call of the controller is here."""

    def __init__(self, ctx: RunContext, graph: Graph, on_tick: Callable[[Control], None]) -> None:
        self.ctx, self.graph, self.on_tick = ctx, graph, on_tick
        self.placement: Placement = place(ctx.cfg, graph.workers, cluster_nodes())
        self.agents: dict[str, Any] = {}  # node id -> NodeAgent handle
        self.shm: dict[str, Any] = {}  # node id -> ShmSpec
        self.hosts: dict[str, Any] = {}  # worker name -> WorkerHost handle
        self.runs: dict[Any, str] = {}  # ObjectRef of WorkerHost.run -> worker name
        self.info: dict[str, Any] = {}  # worker name -> its pending `info` call
        self.supervisor = Supervisor(ctx.cfg, graph, ctx.run_dir)
        self.leader = graph.leader.name
        self.leaders = [spec.name for spec in graph.leaders]  # one trainer per policy
        self.trainer_node = self.placement.node_of[self.leader]
        # The controller's copy of the control block: the trainer's progress for `on_tick`,
        # the workers' timing rows at the end.
        mirror = InlineTransport({"control": control_layout(len(graph.workers))}, [])
        self.mirror = Control(mirror)
        self.mirror.reset()

    # ------------------------------------------------------------------ start

    def start_nodes_and_run(self) -> str:
        print("  placement:", file=sys.stderr)
        for line in self.placement.describe():
            print(f"    {line}", file=sys.stderr)
        self._start_agents()
        return self.supervisor.run(self)

    def _on_node(self, actor_class: Any, node_id: str, **options: Any) -> Any:
        import ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        strategy = NodeAffinitySchedulingStrategy(node_id=node_id, soft=False)
        return (
            ray.remote(actor_class)
            .options(scheduling_strategy=strategy, max_restarts=0, **options)
            .remote
        )

    def _start_agents(self) -> None:
        import ray

        g = self.graph
        for node in self.placement.used_nodes:
            self.agents[node.node_id] = self._on_node(NodeAgent, node.node_id, num_cpus=0)(
                g.all_layouts(), g.channels, [s.block for s in g.streams if s.kind == "versions"]
            )
        infos = ray.get([a.info.remote() for a in self.agents.values()], timeout=STARTUP_TIMEOUT_S)
        for node_id, info in zip(self.agents, infos, strict=True):
            self.shm[node_id] = info["shm"]
        self._wire_bridges()

    def _wire_bridges(self) -> None:
        """Forwarders for every stream edge that crosses nodes (surge/streams/ray_bridge.py):
        segments and finished groups go to their reader's node, parameter versions to the
        nodes of subscribers elsewhere. Other streams must stay inside a node (placement
        pods)."""
        import ray

        bridges = {
            "segments": self._bridge_segments,
            "versions": self._bridge_versions,
            "groups": self._bridge_groups,
            "snapshots": self._bridge_snapshots,
        }
        calls = []
        for stream in self.graph.streams:
            crossing = [e for e in stream.edges if self._node(e.source) != self._node(e.target)]
            if not crossing:
                continue
            bridge = bridges.get(stream.kind)
            if bridge is None:
                raise self._cannot_cross(stream)
            calls += bridge(stream)
        ray.get(calls, timeout=STARTUP_TIMEOUT_S)

    def _cannot_cross(self, stream: StreamSpec) -> RuntimeError:
        """A recipe bug: the workers of a stream no bridge carries must share a pod."""
        edge = next(e for e in stream.edges if self._node(e.source) != self._node(e.target))
        return RuntimeError(
            f"stream {stream.name!r} ({stream.kind}) cannot cross nodes, but "
            f"{edge.source} and {edge.target} were placed on different nodes"
        )

    def _node(self, worker: str) -> str:
        return self.placement.node_of[worker]

    def _bridge_segments(self, stream: StreamSpec) -> list[Any]:
        """On each node of writers away from the reader: a forwarder of their rows."""
        (reader,) = {e.target for e in stream.edges}
        layout = self.graph.layouts[stream.block]
        groups = layout.fields[PROGRESS].shape[0]
        assert stream.flow is not None, "a segment stream has a version bound"
        spec = SegmentStream(
            block=stream.block,
            reader=reader,
            depth=stream.flow.depth,
            group_size=layout.fields["version"].shape[2] // groups,
            first=self.ctx.for_policy(stream.policy).start_version,
        )
        home = self.agents[self._node(reader)]
        calls = [home.serve_segments.remote(spec)]
        rows: dict[str, list[int]] = {}
        for e in stream.edges:
            if self._node(e.source) != self._node(reader):
                rows.setdefault(self._node(e.source), []).extend(e.slots)
        for node_id, slots in rows.items():
            calls.append(
                self.agents[node_id].start_segment_forwarder.remote(home, spec, sorted(slots))
            )
        return calls

    def _bridge_groups(self, stream: StreamSpec) -> list[Any]:
        """On each node of writers away from the reader: a forwarder of the groups they hand
        over (their rows, whole) to the reader's node."""
        (reader,) = {e.target for e in stream.edges}
        if stream.name not in HANDED_OVER:
            raise self._cannot_cross(stream)  # its rows' hand-over state is unknown
        spec = GroupStream(stream.name, stream.block, reader, HANDED_OVER[stream.name])
        home_node = self._node(reader)
        home = self.agents[home_node]
        away = sorted({self._node(e.source) for e in stream.edges} - {home_node})
        calls = [home.serve_groups.remote(spec)]
        calls += [self.agents[n].start_group_forwarder.remote(home, spec) for n in away]
        return calls

    def _bridge_snapshots(self, stream: StreamSpec) -> list[Any]:
        """On the league's node: a forwarder of its new snapshots to the nodes of the actors
        elsewhere."""
        (league,) = {e.source for e in stream.edges}
        home = self._node(league)
        away = sorted({self._node(e.target) for e in stream.edges} - {home})
        remote = [self.agents[n] for n in away]
        return [self.agents[home].start_snapshot_forwarder.remote(stream.block, remote)]

    def _bridge_versions(self, stream: StreamSpec) -> list[Any]:
        """On the publisher's node: a forwarder of new versions to every node with
        subscribers, where an agent publishes them and wakes those subscribers."""
        (publisher,) = {e.source for e in stream.edges}
        home_node = self._node(publisher)
        away: dict[str, list[str]] = {}
        for e in stream.edges:
            if self._node(e.target) != home_node:
                away.setdefault(self._node(e.target), []).append(e.target)
        calls = [self.agents[n].serve_params.remote(stream.block, subs) for n, subs in away.items()]
        remote_agents = [self.agents[n] for n in away]
        # The forwarder waits on the first of these inboxes (then drains the others), so a
        # subscriber the publisher wakes goes first; without one it checks every 0.5 s.
        woken = {e.target for e in stream.edges if e.wake}
        announced_on = sorted(
            (n for subs in away.values() for n in subs), key=lambda n: n not in woken
        )
        calls.append(
            self.agents[home_node].start_params_forwarder.remote(
                stream.block, remote_agents, announced_on, self.ctx.n_params
            )
        )
        return calls

    # ------------------------------------------------------------------ the supervisor's calls

    def start(self, names: list[str]) -> None:
        """Start every worker's actor first, then wait for each: they start in parallel."""
        for name in names:
            self._start_worker(self.supervisor.slot[name], self.supervisor.specs[name])
        for name in names:
            self._await_start(name)

    def exits(self, timeout: float) -> list[Exit]:
        import ray

        ended = []
        ready, _ = ray.wait(list(self.runs), num_returns=1, timeout=timeout)
        for ref in ready:
            name = self.runs.pop(ref)
            ended.append(self._outcome(ref, name))
        return ended

    def silences(self) -> dict[str, float | None]:
        """Heartbeats from every node (silences measured on each node's own clock), forwarder
        failures, and the trainer's progress for the display."""
        import ray

        node_ids = list(self.agents)
        refs = [
            self.agents[n].status.remote(
                [self.supervisor.slot[w] for w in self.placement.workers_on(n)],
                n == self.trainer_node,
            )
            for n in node_ids
        ]
        try:
            statuses = ray.get(refs, timeout=STATUS_TIMEOUT_S)
        except (ray.exceptions.RayActorError, ray.exceptions.GetTimeoutError) as e:
            raise self._node_lost(node_ids, refs, e) from None
        silent: dict[str, float | None] = {}
        for node_id, status in zip(node_ids, statuses, strict=True):
            if status["error"]:
                names = ", ".join(self.placement.workers_on(node_id))
                where = f"stream bridge on node {node_id[:8]} ({names})"
                raise WorkerFailure(where, status["error"])
            if status["progress"] is not None:
                self.mirror.set_progress(**status["progress"])
                self.mirror.set_progress(restarts=self.supervisor.total_restarts)
            for slot, seconds in status["silent"].items():
                # None while still starting (importing, building envs and networks)
                silent[self.graph.workers[int(slot)].name] = seconds
        return silent

    def retire(self, name: str) -> None:
        """The old life must be gone before the new one takes the slot (a hung one is
        killed)."""
        import ray

        ray.kill(self.hosts[name])
        old = [ref for ref, n in self.runs.items() if n == name]
        if old:
            ray.wait(old, timeout=10.0)
            for ref in old:
                del self.runs[ref]

    def where(self, name: str) -> str:
        return f" on node {self.placement.node_of[name][:8]}"

    def reset(self, name: str, restarts: int) -> None:
        import ray

        node_id = self.placement.node_of[name]
        # The trainer logs `restarts` from its own node's control block, not the controller's.
        calls = [
            self.agents[node_id].reset_worker.remote(self.supervisor.slot[name]),
            self.agents[self.trainer_node].set_restarts.remote(restarts),
        ]
        ray.get(calls, timeout=STATUS_TIMEOUT_S)

    def ask_to_checkpoint(self, names: list[str]) -> None:
        """Ask these trainers to save a checkpoint and finish (on their nodes)."""
        for name in names:
            with contextlib.suppress(Exception):
                node = self.agents[self.placement.node_of[name]]
                node.request_stop.remote(CHECKPOINT_AND_STOP, [name])

    def await_finish(self, names: list[str], timeout: float) -> bool:
        import ray

        refs = {ref: name for ref, name in self.runs.items() if name in names}
        if len(refs) < len(names):
            return False  # a trainer is gone
        ready, _ = ray.wait(list(refs), num_returns=len(refs), timeout=timeout)
        saved = len(ready) == len(refs)
        for ref in ready:
            del self.runs[ref]
            try:
                saved &= ray.get(ref)[0] == "finished"
            except ray.exceptions.RayError:
                saved = False
        return saved

    def tick(self, final: bool = False) -> None:
        if final:
            self.silences()  # the trainer's last progress, for the display
        self.on_tick(self.mirror)

    def _outcome(self, ref: Any, name: str) -> Exit:
        """How a worker's `run` call ended: its own report, or Ray's account of its death."""
        import ray

        try:
            outcome, detail = ray.get(ref)
        except ray.exceptions.RayActorError as e:
            info = self.supervisor.columns.get(name, {})
            where = f"pid {info.get('pid')} on node {str(info.get('node_id', '?'))[:8]}"
            return Exit(name, "died", f"its Ray actor ({where}) died: {e}")
        return Exit(name, "finished" if outcome == "finished" else "raised", detail)

    def _node_lost(self, node_ids: list[str], refs: list[Any], error: Exception) -> WorkerFailure:
        import ray

        for node_id, ref in zip(node_ids, refs, strict=True):
            try:
                ray.get(ref, timeout=0)
            except Exception:
                names = self.placement.workers_on(node_id)
                return WorkerFailure(
                    names[0],
                    f"lost contact with node {node_id[:8]} (hosting {', '.join(names)}): {error}",
                )
        return WorkerFailure(self.leader, f"lost contact with the cluster: {error}")

    def _start_worker(self, slot: int, spec: WorkerSpec) -> None:
        """Start one life of a worker: a Ray actor on its node, then its `run` call."""
        node_id = self.placement.node_of[spec.name]
        need = self.placement.demands[spec.name]
        host = self._on_node(WorkerHost, node_id, num_cpus=need.cpus, num_gpus=need.gpus)(
            spec.name, self.ctx.run_dir.name, spec.threads, spec.nice
        )
        self.hosts[spec.name] = host
        self.info[spec.name] = host.info.remote()  # queued before `run`: answered first
        life = self.supervisor.restarts[spec.name]
        shm = self.shm[node_id]
        self.runs[host.run.remote(self.graph, slot, self.ctx, shm, life)] = spec.name
        self.supervisor.started_life(spec.name, "starting", node_id=node_id)

    def _await_start(self, name: str) -> None:
        """Wait until Ray has started the worker's process, and record its pid."""
        import ray

        try:
            info = ray.get(self.info[name], timeout=STARTUP_TIMEOUT_S)
        except ray.exceptions.GetTimeoutError:
            self.supervisor.record(name, "hung")
            raise WorkerFailure(
                name, f"Ray did not start its actor within {STARTUP_TIMEOUT_S:g} s"
            ) from None
        except ray.exceptions.RayActorError as e:
            self.supervisor.record(name, "failed")
            raise WorkerFailure(name, f"its Ray actor could not start: {e}") from None
        self.supervisor.record(name, "running", **info)

    # ------------------------------------------------------------------ stop

    def stop_all(self) -> None:
        import ray

        for agent in self.agents.values():
            with contextlib.suppress(Exception):
                agent.request_stop.remote(STOP)
        if self.runs:
            done, _ = ray.wait(list(self.runs), num_returns=len(self.runs), timeout=5.0)
            for ref in done:
                name = self.runs[ref]
                if self.supervisor.running(name):
                    with contextlib.suppress(Exception):
                        ended = "stopped" if ray.get(ref)[0] == "finished" else "failed"
                        self.supervisor.record(name, ended)
        for name, host in self.hosts.items():
            with contextlib.suppress(Exception):
                ray.kill(host)
            if self.supervisor.states.get(name) in ("running", "starting"):
                self.supervisor.record(name, "stopped")
        with contextlib.suppress(Exception):
            self._write_timing()
        closing = [agent.close.remote() for agent in self.agents.values()]
        with contextlib.suppress(Exception):
            ray.wait(closing, num_returns=len(closing), timeout=10.0)
        for agent in self.agents.values():
            with contextlib.suppress(Exception):
                ray.kill(agent)

    def _write_timing(self) -> None:
        """timing.json as in `local`: each node's agent holds the rows of its workers."""
        import ray

        refs = [
            agent.timing.remote(
                [self.supervisor.slot[w] for w in self.placement.workers_on(node_id)]
            )
            for node_id, agent in self.agents.items()
        ]
        for rows in ray.get(refs, timeout=STATUS_TIMEOUT_S):
            for slot, row in rows.items():
                self.mirror.timing[int(slot)] = row
        self.mirror.note_controller_cpu()
        write_timing(self.ctx.run_dir, self.graph, self.mirror.timing)
