"""The dataflow graph of an experiment, as data: workers (nodes) and named streams (edges).

A recipe (surge/recipes/) builds the graph from the config; every runtime takes it as it is
and decides only where workers run and which transport backs the blocks and channels. Nothing
here knows a worker kind or a stream kind:

- a `WorkerSpec` names its kind's factory (an import path), its threads, resources and
  placement pod, whether it may be restarted in place and whether its finishing ends the run;
- a `StreamSpec` names its shared-memory block, its edges (writer -> reader, with the rows of
  the block each edge carries) and its flow policy;
- each worker receives its `Port`s (surge/streams/ports.py), computed from the edges, and
  its inbox: the one channel it waits on, named after it. A worker never derives a channel
  name or a routing rule; it reads them from its ports.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from surge.streams.control import Control, control_layout
from surge.streams.flow import FlowPolicy
from surge.streams.ports import Port
from surge.streams.transport import BlockLayout, Transport
from surge.workers.base import Binding, RunContext, Worker

WORKER_KINDS: dict[str, str] = {
    "policy": "surge.workers.policy:build",
    "actor": "surge.workers.actor:build",
    "evaluator": "surge.workers.evaluation:build",
    "league": "surge.workers.league:build",
    "generator": "surge.workers.generator:build",
    "rewarder": "surge.workers.rewarder:build",
    "reference": "surge.workers.reference:build",
    "llm-evaluator": "surge.workers.llm_evaluator:build",
    "replay": "surge.workers.replay_shard:build",
    "reward-model": "surge.workers.reward_model:build",
}
"""Worker kind -> `module:function` that builds one inside its process (`Factory`). An import
path, so every process (spawned, or a Ray actor on another node) finds the kind the same way.
`register_worker_kind` adds one; no runtime changes for it."""

Factory = Callable[[RunContext, Binding], Worker]


def register_worker_kind(kind: str, factory: str) -> None:
    """Make `kind` available to recipes. `factory` is `module:function`, importable in every
    worker process (the module is imported there, not here)."""
    module, sep, function = factory.partition(":")
    if not sep or not module or not function:
        raise ValueError(f"worker kind {kind!r}: factory {factory!r} is not 'module:function'")
    WORKER_KINDS[kind] = factory


@dataclass(frozen=True)
class WorkerSpec:
    """One worker of a graph: its kind and index (its name is `kind-index`), the factory that builds
    it, and where and how it runs."""

    kind: str
    index: int
    factory: str
    """`module:function` with the `Factory` signature (from `WORKER_KINDS`)."""
    threads: int = 1
    """torch / OpenMP threads of its process."""
    restartable: bool = True
    """May be restarted in place after it died or hung, or raised with
    `workers.restart_on_error` (runtime/supervisor.py)."""
    ends_run: bool = False
    """Its finishing ends the run, and a stop request is its to act on (the trainer saves a
    checkpoint first); every other worker leaves at once when asked to stop."""
    cpus: float = 1.0
    gpus: float = 0.0
    """What it declares to a Ray cluster."""
    pod: str = ""
    """Workers with the same non-empty pod run on one node (streams between them stay in
    shared memory); "" is a pod of its own."""
    nice: int = 0
    """Raise its OS scheduling niceness by this much: background work (evaluation) yields the
    CPU to training."""
    policy: str = ""
    """The policy it serves, for a trainer or policy worker of a run with several policies
    (its `Binding.policy`); "" otherwise."""

    @property
    def name(self) -> str:
        """The worker's name, `kind-index` (e.g. `actor-0`)."""
        return f"{self.kind}-{self.index}"


def worker(kind: str, index: int, factory: str | None = None, **options: Any) -> WorkerSpec:
    """A spec for a registered kind, or for one its `factory` (`module:function`) builds: a
    trainer is built by its algorithm's learner module, the trainer chassis around the
    algorithm's learner (surge/workers/trainer.py)."""
    factory = factory or WORKER_KINDS.get(kind)
    if factory is None:
        raise ValueError(f"unknown worker kind {kind!r}; registered: {sorted(WORKER_KINDS)}")
    return WorkerSpec(kind, index, factory, **options)


@dataclass(frozen=True)
class Edge:
    """One edge of a stream: from worker `source` to worker `target`, over the block's rows
    `slots`."""

    source: str
    target: str
    slots: tuple[int, ...] = ()
    """Rows of the stream's block this edge carries (e.g. the env groups of an actor)."""
    wake: bool = True
    """The writer wakes the reader's inbox on each write. False: the reader looks on its own
    clock (an evaluator checks for new versions twice a second; waking it on every publish
    would cost the busy cores a context switch per version)."""


@dataclass(frozen=True)
class StreamSpec:
    """A named stream between workers: its block, its edges, and its flow policy."""

    name: str
    kind: str
    """What moves on it: `request/response`, `segments`, `versions`, `results`."""
    block: str
    """The shared-memory block (`Graph.layouts`) that holds its data."""
    edges: tuple[Edge, ...]
    flow: FlowPolicy | None = None
    note: str = ""
    """What a reader of `surge graph` should know about it, in words."""
    policy: str = ""
    """The policy whose data it carries (runs with several policies); "" otherwise."""


@dataclass(frozen=True)
class Graph:
    """A run as data: its workers in start order, the streams between them and their blocks'
    layouts. Every runtime launches it as it is."""

    workers: list[WorkerSpec]
    """In start order: the trainer publishes version 0 before anyone asks for it."""
    layouts: dict[str, BlockLayout]
    streams: list[StreamSpec] = field(default_factory=list)
    shared_imports: tuple[str, ...] = ()
    """Modules the local runtime imports once, in a fork server its worker processes are
    forked from, so that their memory is shared instead of loaded by each worker (torch and
    transformers: about 250 MB per process). Empty: every worker is a fresh (spawned)
    interpreter that reads its thread settings from its own environment."""

    @property
    def leader(self) -> WorkerSpec:
        """The first of `leaders` (the first policy's trainer): the run's progress and result
        are its."""
        return self.leaders[0]

    @property
    def leaders(self) -> list[WorkerSpec]:
        """The workers whose finishing ends the run (the trainers, one per policy): the run
        ends once all have finished; when one finishes, the runtime asks the others to save a
        checkpoint and finish too."""
        return [spec for spec in self.workers if spec.ends_run]

    @property
    def channels(self) -> list[str]:
        """One inbox per worker, named after it."""
        return [spec.name for spec in self.workers]

    def ports(self, name: str) -> dict[str, Port]:
        """The ports of worker `name`, by stream name: whom it sends to and hears from."""
        ports = {}
        for s in self.streams:
            out = [e for e in s.edges if e.source == name]
            into = [e for e in s.edges if e.target == name]
            if not out and not into:
                continue
            ports[s.name] = Port(
                stream=s.name,
                kind=s.kind,
                block=s.block,
                sends_to=tuple(dict.fromkeys(e.target for e in out)),
                wakes=tuple(dict.fromkeys(e.target for e in out if e.wake)),
                hears_from=tuple(dict.fromkeys(e.source for e in into)),
                slots=tuple(sorted({k for e in out + into for k in e.slots})),
                peer_slots=tuple(
                    (e.target if e.source == name else e.source, e.slots) for e in out + into
                ),
                flow=s.flow,
                policy=s.policy,
            )
        return ports

    def binding(
        self, spec: WorkerSpec, transport: Transport, control: Control, life: int
    ) -> Binding:
        """What worker `spec` is built with: its ports on the graph's streams, the transport and
        control block, and its life (restarts so far)."""
        ports = self.ports(spec.name)
        return Binding(spec.name, spec.index, ports, transport, control, life, spec.policy)

    def with_worker(self, spec: WorkerSpec, edges: dict[str, list[Edge]]) -> Graph:
        """This graph plus a worker and its edges on existing streams (a test or a user adds a
        kind this way, without touching a recipe)."""
        streams = [replace(s, edges=s.edges + tuple(edges.get(s.name, ()))) for s in self.streams]
        unknown = set(edges) - {s.name for s in self.streams}
        if unknown:
            raise ValueError(f"no stream named {sorted(unknown)} in this graph")
        return replace(self, workers=self.workers + [spec], streams=streams)

    def with_stream(self, stream: StreamSpec, layout: BlockLayout) -> Graph:
        """This graph with stream `stream` added, its block laid out as `layout`."""
        layouts = {**self.layouts, stream.block: layout}
        return replace(self, layouts=layouts, streams=self.streams + [stream])

    def all_layouts(self) -> dict[str, BlockLayout]:
        """The streams' blocks and the control block."""
        return {**self.layouts, "control": control_layout(len(self.workers))}


def describe(graph: Graph) -> list[str]:
    """The graph as text: its workers, then its streams and their edges."""
    lines = ["workers"]
    width = max(len(spec.name) for spec in graph.workers)
    kind_width = max(len(spec.kind) for spec in graph.workers)
    for spec in graph.workers:
        role = "ends the run" if spec.ends_run else "restarted in place if it fails"
        if not spec.ends_run and not spec.restartable:
            role = "never restarted"
        extra = f", niceness +{spec.nice}" if spec.nice else ""
        if spec.policy:
            extra = f", policy {spec.policy}{extra}"
        lines.append(
            f"  {spec.name:<{width}}  {spec.kind:<{kind_width}}  {spec.threads} thread(s), "
            f"{role}{extra}"
        )
    lines.append("streams")
    for stream in graph.streams:
        arrow = "<->" if stream.kind == "request/response" else "-->"
        lines.append(f"  {stream.name} ({stream.kind}, block '{stream.block}')")
        lines += [f"    {line}" for line in _edge_lines(stream, arrow)]
        if stream.note:
            lines.append(f"    {stream.note}")
    return lines


def _edge_lines(stream: StreamSpec, arrow: str) -> list[str]:
    """A stream's edges, fanned in (writers -> a reader) or fanned out (a writer -> readers),
    whichever takes fewer lines."""

    def names(workers: list[str]) -> str:
        return ", ".join(workers) if len(workers) <= 3 else f"{workers[0]} .. {workers[-1]}"

    into: dict[str, list[str]] = {}
    out: dict[str, list[str]] = {}
    for e in stream.edges:
        into.setdefault(e.target, []).append(e.source)
        out.setdefault(e.source, []).append(e.target)
    if len(out) < len(into):
        return [f"{source} {arrow} {names(targets)}" for source, targets in out.items()]
    lines = []
    for target, sources in into.items():
        if sources == [target] and stream.kind == "request/response":
            lines.append(f"{target} answers its own requests (workers.inference: inline)")
        elif sources == [target]:
            lines.append(f"kept by {target}")
        else:
            lines.append(f"{names(sources)} {arrow} {target}")
    return lines
