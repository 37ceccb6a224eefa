"""What every runtime does with a worker inside the process (or thread) that runs it: build it
from its spec, drive its poll loop, and account the run's CPU time at the end.
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Callable
from pathlib import Path

import numpy as np

from surge.streams.control import STOP, Control
from surge.streams.transport import Transport
from surge.tracking import timing
from surge.tracking.files import atomic_writer
from surge.workers.base import Binding, RunContext, Worker
from surge.workers.graph import Factory, Graph, WorkerSpec


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


def build_worker(ctx: RunContext, spec: WorkerSpec, binding: Binding) -> Worker:
    """Construct one worker inside the process (or thread) that will run it."""
    module, _, function = spec.factory.partition(":")
    factory: Factory = getattr(importlib.import_module(module), function)
    return factory(ctx, binding)


def start_worker(
    ctx: RunContext, graph: Graph, slot: int, transport: Transport, life: int = 0
) -> tuple[WorkerSpec, Control, Worker]:
    """Bind and build the worker of `slot` (`life` counts its restarts in the run)."""
    spec = graph.workers[slot]
    control = Control(transport, slot)
    worker = build_worker(ctx, spec, graph.binding(spec, transport, control, life))
    return spec, control, worker
