"""The serial runtime: every worker in this process, inline streams, a fixed polling order.

The same workers and streams as the local runtime, over in-process arrays and queues. With a
fixed seed a run is deterministic, which makes this the runtime for debugging (a breakpoint
anywhere just works) and for the fastest tests.
"""

from __future__ import annotations

import time
import traceback
from collections.abc import Callable
from typing import TypeVar

from surge.errors import WorkerFailure
from surge.runtime.launch import start_worker, write_timing
from surge.streams.control import CHECKPOINT_AND_STOP, Control
from surge.streams.transport import InlineTransport
from surge.workers.base import RunContext, Worker
from surge.workers.graph import Graph

T = TypeVar("T")


def run_serial(ctx: RunContext, graph: Graph, on_tick: Callable[[Control], None]) -> str:
    """Run until the graph's leaders (the trainers) finish; returns the reason of the first
    to finish ("solved", "budget", "interrupted"). When one finishes, the others are asked
    to save a checkpoint and finish too."""
    transport = InlineTransport(graph.all_layouts(), graph.channels)
    control = Control(transport)
    control.reset()
    workers: list[Worker] = []
    try:
        for slot, spec in enumerate(graph.workers):
            _, _, worker = _guarded(spec.name, start_worker, ctx, graph, slot, transport)
            workers.append(worker)
        trainers = [workers[graph.workers.index(spec)] for spec in graph.leaders]
        first: Worker | None = None  # the leader that finished first: the run's reason
        leaders_left = len(trainers)
        active = list(workers)  # polled in this order, each once per round, until it finishes
        finished: list[Worker] = []  # in this round (a worker finishes in a poll)
        last_tick = 0.0
        try:
            while leaders_left:
                progressed = False
                for worker in active:
                    progressed |= _guarded(worker.name, worker.poll, 0.0)
                    if worker.finished:
                        finished.append(worker)
                if finished:  # after the round, so the round's order stays fixed
                    progressed = True
                    ended = [w for w in finished if w in trainers]
                    active = [w for w in active if w not in finished]
                    finished.clear()
                    leaders_left -= len(ended)
                    if ended and first is None:
                        first = ended[0]  # leaders that finished with it keep their reason
                        if leaders_left:  # the others are asked to save and finish too
                            control.request_stop(CHECKPOINT_AND_STOP)
                if not progressed:
                    raise RuntimeError("serial runtime: no worker can make progress (deadlock)")
                now = time.monotonic()
                if now - last_tick > 0.2:
                    on_tick(control)
                    last_tick = now
        except KeyboardInterrupt:
            control.request_stop(CHECKPOINT_AND_STOP)
            for trainer in trainers:
                if not trainer.finished:
                    trainer.poll(0.0)
        except WorkerFailure as failure:
            if failure.worker not in {t.name for t in trainers}:  # the trainers are fine
                control.request_stop(CHECKPOINT_AND_STOP)
                for trainer in trainers:
                    if not trainer.finished:
                        trainer.poll(0.0)
                failure.detail += "\n(the trainer saved a checkpoint: `surge resume` continues)"
            raise
        on_tick(control)
        return str(getattr(first or trainers[0], "finish_reason", ""))
    finally:
        for worker in workers:
            worker.close()
        # One process: its CPU time (the controller row) is the total; the worker rows hold
        # the per-activity split.
        control.timing[:, -1] = 0.0
        control.note_controller_cpu()
        write_timing(ctx.run_dir, graph, control.timing)


def _guarded(name: str, fn: Callable[..., T], *args: object) -> T:
    """Call into a worker; a failure carries the worker's name and original traceback."""
    try:
        return fn(*args)
    except (KeyboardInterrupt, WorkerFailure):
        raise
    except Exception:
        raise WorkerFailure(name, traceback.format_exc()) from None
