"""The dataflow graph of an experiment, built from its config in one readable place.

    actor-i  --(inference stream: obs -> actions)-->  policy-(i % P)   (or inline in actor-i)
    actor-i  --(sample stream: segments)----------->  trainer-0
    trainer-0 --(parameter service: versions)------>  policy-*

Every runtime takes this graph as it is: it decides only where workers run and which
transport backs the blocks and channels.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
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
    kind: str  # "trainer" | "policy" | "actor"
    index: int

    @property
    def name(self) -> str:
        return f"{self.kind}-{self.index}"


@dataclass(frozen=True)
class Graph:
    workers: list[WorkerSpec]
    """In start order: the trainer publishes version 0 before anyone asks for it."""
    layouts: dict[str, BlockLayout]
    channels: list[str]


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
        [WorkerSpec("trainer", 0)]
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
    return Graph(workers, layouts, channels)


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
    kind: str,
    poll_s: float,
    parent_alive: Callable[[], bool] = lambda: True,
) -> None:
    """The loop of a worker process, on every runtime: heartbeat, stop checks, one poll."""
    while not worker.finished:
        control.beat()
        if not parent_alive():
            break  # the controller is gone: never outlive it
        if kind != "trainer" and control.stop_request == STOP:
            break
        worker.poll(poll_s)


def build_worker(
    spec: WorkerSpec, ctx: RunContext, transport: Transport, control: Control, life: int = 0
) -> Worker:
    """Construct one worker inside the process (or thread) that will run it. `life` counts
    the restarts of this worker in the run (0: first start)."""
    # Imported here so that actor processes never import torch.
    if spec.kind == "trainer":
        from surge.workers.trainer import TrainerWorker

        return TrainerWorker(ctx, transport, control)
    if spec.kind == "policy":
        from surge.workers.policy import PolicyWorker

        return PolicyWorker(ctx, spec.index, transport, control.timers)
    if spec.kind == "actor":
        from surge.workers.actor import ActorWorker

        return ActorWorker(ctx, spec.index, transport, control.timers, life)
    raise ValueError(f"unknown worker kind {spec.kind!r}")
