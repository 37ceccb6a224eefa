"""The dataflow graph of an experiment, built from its config in one readable place.

    actor-i  --(inference stream: obs -> actions)-->  policy-(i % P)   (or inline in actor-i)
    actor-i  --(sample stream: segments)----------->  trainer-0
    trainer-0 --(parameter service: versions)------>  policy-*

Every runtime takes this graph as it is: it decides only where workers run and which
transport backs the blocks and channels.
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from surge.config.schema import ExperimentConfig
from surge.envs.make import EnvInfo
from surge.runtime.control import STOP, Control, control_layout
from surge.streams import inference, params, sample
from surge.streams.transport import BlockLayout, Transport
from surge.tracking import timing
from surge.tracking.files import atomic_writer
from surge.workers.base import RunContext, Worker


@dataclass(frozen=True)
class WorkerSpec:
    kind: str
    """A key of `WORKER_KINDS`: "trainer" | "policy" | "actor" | a registered kind."""
    index: int
    restartable: bool = True
    """May be restarted in place after it died or hung (runtime/supervisor.py)."""
    ends_run: bool = False
    """Its finishing ends the run, and a stop request is its to act on (the trainer saves a
    checkpoint first); every other worker leaves at once when asked to stop."""

    @property
    def name(self) -> str:
        return f"{self.kind}-{self.index}"


@dataclass(frozen=True)
class StreamSpec:
    """A named stream between workers: who writes, who reads, and its flow policy."""

    name: str
    kind: str
    """What moves on it: `request/response`, `segments`, `versions`."""
    edges: tuple[tuple[str, str], ...]
    """(writer, reader) worker names; a request/response stream's answers go back."""
    block: str
    """The shared-memory block (graph.layouts) that holds its data."""
    flow: str = ""
    """Its flow policy, in words (e.g. how far writers may run ahead of readers)."""


@dataclass(frozen=True)
class Graph:
    workers: list[WorkerSpec]
    """In start order: the trainer publishes version 0 before anyone asks for it."""
    layouts: dict[str, BlockLayout]
    channels: list[str]
    streams: list[StreamSpec] = field(default_factory=list)

    @property
    def leader(self) -> WorkerSpec:
        """The worker whose finishing ends the run (the trainer)."""
        return next(spec for spec in self.workers if spec.ends_run)


@dataclass(frozen=True)
class WorkerKind:
    """How to build a kind of worker inside its own process (or thread, or Ray actor)."""

    factory: str
    """`module:function` with the signature of `build_worker`: an import path, so every
    process (spawned, or a Ray actor on another node) finds the kind the same way."""
    threads: str
    """The `workers.*` field that sets its torch / OpenMP thread count."""


WORKER_KINDS: dict[str, WorkerKind] = {
    "trainer": WorkerKind("surge.runtime.graph:_trainer", "trainer_threads"),
    "policy": WorkerKind("surge.runtime.graph:_policy", "policy_threads"),
    "actor": WorkerKind("surge.runtime.graph:_actor", "actor_threads"),
}
"""Every kind of worker a graph may hold; the runtimes launch any of them."""


def worker_threads(cfg: ExperimentConfig, kind: str) -> int:
    return int(getattr(cfg.workers, WORKER_KINDS[kind].threads))


def policy_worker_count(cfg: ExperimentConfig) -> int:
    """Policy worker processes: none when actors run their policy inline."""
    return cfg.workers.policy_workers if cfg.workers.inference == "remote" else 0


def param_subscribers(cfg: ExperimentConfig) -> list[str]:
    """Channels the trainer notifies on every publish: whoever runs the policy."""
    if cfg.workers.inference == "inline":
        return [inference.inline_channel(a) for a in range(cfg.workers.actors)]
    return [inference.policy_channel(p) for p in range(cfg.workers.policy_workers)]


def build_graph(cfg: ExperimentConfig, env: EnvInfo, n_params: int) -> Graph:
    w = cfg.workers
    workers = (
        [WorkerSpec("trainer", 0, restartable=False, ends_run=True)]
        + [WorkerSpec("policy", p) for p in range(policy_worker_count(cfg))]
        + [WorkerSpec("actor", a) for a in range(w.actors)]
    )
    layouts = {
        inference.BLOCK: inference.inference_layout(
            env.obs, env.action, groups=cfg.total_groups, group_size=w.envs_per_group
        ),
        sample.BLOCK: sample.sample_layout(
            env.obs,
            env.action,
            depth=cfg.max_policy_lag + 1,
            steps=cfg.ppo.rollout_len,
            envs=cfg.total_envs,
            groups=cfg.total_groups,
        ),
        params.BLOCK: params.params_layout(n_params),
        "control": control_layout(len(workers)),
    }
    channels = (
        [sample.CHANNEL]
        + [inference.policy_channel(p) for p in range(policy_worker_count(cfg))]
        + [inference.actor_channel(a) for a in range(w.actors)]
    )
    return Graph(workers, layouts, channels, _streams(cfg, n_params))


def _streams(cfg: ExperimentConfig, n_params: int) -> list[StreamSpec]:
    """The edges of the PPO / APPO graph, as data (what `surge graph` draws)."""
    w = cfg.workers
    actors = [f"actor-{a}" for a in range(w.actors)]
    remote = policy_worker_count(cfg) > 0
    server = {a: f"policy-{i % w.policy_workers}" if remote else a for i, a in enumerate(actors)}
    lag = cfg.max_policy_lag
    group = f"{w.envs_per_group} envs"
    return [
        StreamSpec(
            "inference",
            "request/response",
            tuple((a, server[a]) for a in actors),
            inference.BLOCK,
            f"a slot per env group ({cfg.total_groups} of {group}); the acting policy is at "
            f"most {lag} version(s) behind the trainer",
        ),
        StreamSpec(
            "samples",
            "segments",
            tuple((a, "trainer-0") for a in actors),
            sample.BLOCK,
            f"segments of {cfg.ppo.rollout_len} steps x {group}, each step stamped with its "
            f"policy version; {lag + 1} slot(s) per group (max_policy_lag {lag})",
        ),
        StreamSpec(
            "parameters",
            "versions",
            tuple(("trainer-0", s) for s in sorted(set(server.values()))),
            params.BLOCK,
            f"the latest version, {n_params:,} float32 values, announced on each publish",
        ),
    ]


def describe(graph: Graph, cfg: ExperimentConfig) -> list[str]:
    """The graph as text: its workers, then its streams and their edges."""
    lines = ["workers"]
    width = max(len(spec.name) for spec in graph.workers)
    for spec in graph.workers:
        role = "ends the run" if spec.ends_run else "restarted in place if it fails"
        if not spec.ends_run and not spec.restartable:
            role = "never restarted"
        threads = worker_threads(cfg, spec.kind)
        lines.append(f"  {spec.name:<{width}}  {spec.kind:<8} {threads} thread(s), {role}")
    lines.append("streams")
    for stream in graph.streams:
        arrow = "<->" if stream.kind == "request/response" else "-->"
        lines.append(f"  {stream.name} ({stream.kind}, block '{stream.block}')")
        readers: dict[str, list[str]] = {}
        for writer, reader in stream.edges:
            readers.setdefault(reader, []).append(writer)
        for reader, writers in readers.items():
            if writers == [reader]:
                lines.append(f"    {reader} answers its own requests (workers.inference: inline)")
                continue
            left = ", ".join(writers) if len(writers) <= 3 else f"{writers[0]} .. {writers[-1]}"
            lines.append(f"    {left} {arrow} {reader}")
        if stream.flow:
            lines.append(f"    {stream.flow}")
    return lines


def write_timing(run_dir: Path, graph: Graph, rows: np.ndarray) -> None:
    """timing.json: CPU seconds by activity per process, totals and the overhead share."""
    names = [spec.name for spec in graph.workers] + ["controller"]
    record = {
        "processes": {
            name: dict(zip(timing.FIELDS, map(float, rows[i]), strict=True))
            for i, name in enumerate(names)
        },
        "total": timing.summarize(rows),
    }
    with atomic_writer(run_dir / "timing.json") as f:
        json.dump(record, f, indent=1)


def drive(
    worker: Worker,
    control: Control,
    spec: WorkerSpec,
    poll_s: float,
    parent_alive: Callable[[], bool] = lambda: True,
) -> None:
    """The loop of a worker process, on every runtime: heartbeat, stop checks, one poll."""
    while not worker.finished:
        control.beat()
        if not parent_alive():
            break  # the controller is gone: never outlive it
        if not spec.ends_run and control.stop_request == STOP:
            break
        worker.poll(poll_s)


def build_worker(
    spec: WorkerSpec, ctx: RunContext, transport: Transport, control: Control, life: int = 0
) -> Worker:
    """Construct one worker inside the process (or thread) that will run it. `life` counts
    the restarts of this worker in the run (0: first start)."""
    kind = WORKER_KINDS.get(spec.kind)
    if kind is None:
        raise ValueError(f"unknown worker kind {spec.kind!r}; known: {sorted(WORKER_KINDS)}")
    module, _, function = kind.factory.partition(":")
    factory = getattr(importlib.import_module(module), function)
    worker: Worker = factory(spec, ctx, transport, control, life)
    return worker


# The built-in kinds. Each imports its worker where it is built: actor processes never
# import torch.


def _trainer(
    spec: WorkerSpec, ctx: RunContext, transport: Transport, control: Control, life: int
) -> Worker:
    from surge.workers.trainer import TrainerWorker

    return TrainerWorker(ctx, transport, control)


def _policy(
    spec: WorkerSpec, ctx: RunContext, transport: Transport, control: Control, life: int
) -> Worker:
    from surge.workers.policy import PolicyWorker

    return PolicyWorker(ctx, spec.index, transport, control.timers)


def _actor(
    spec: WorkerSpec, ctx: RunContext, transport: Transport, control: Control, life: int
) -> Worker:
    from surge.workers.actor import ActorWorker

    return ActorWorker(ctx, spec.index, transport, control.timers, life)
