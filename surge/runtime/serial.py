"""The serial runtime: every worker in this process, inline streams, a fixed polling order.

The same workers and streams as the local runtime, over in-process arrays and queues, and
the same life cycle (runtime/supervisor.py): here a worker's "life" is an object, polled
once per round with timeout 0; an exception it raises ends that life (with its traceback),
and a restart builds a new object in its slot. With a fixed seed a run is deterministic,
which makes this the runtime for debugging (a breakpoint anywhere just works) and for the
fastest tests. There are no heartbeats: a worker that never returns from `poll` blocks the
run, as it would block a debugger.
"""

from __future__ import annotations

import time
import traceback
from collections.abc import Callable

from surge.errors import UserError, WorkerFailure, failure_text
from surge.runtime.launch import start_worker, write_timing
from surge.runtime.supervisor import Exit, OneMachine, Supervisor
from surge.streams.control import CHECKPOINT_AND_STOP, Control
from surge.streams.transport import InlineTransport
from surge.workers.base import RunContext, Worker
from surge.workers.graph import Graph

TICK_S = 0.2  # how often the progress display is fed


def run_serial(ctx: RunContext, graph: Graph, on_tick: Callable[[Control], None]) -> str:
    """Run until the graph's leaders (the trainers) finish; returns the reason of the first
    to finish ("solved", "budget", "time", "interrupted")."""
    transport = InlineTransport(graph.all_layouts(), graph.channels)
    control = Control(transport)
    control.reset()
    supervisor = Supervisor(ctx.cfg, graph, ctx.run_dir)
    objects = _InProcess(ctx, graph, transport, control, supervisor, on_tick)
    try:
        return supervisor.run(objects)
    finally:
        for worker in objects.workers.values():
            worker.close()
        # One process: its CPU time (the controller row) is the total; the worker rows hold
        # the per-activity split.
        control.timing[:, -1] = 0.0
        control.note_controller_cpu()
        write_timing(ctx.run_dir, graph, control.timing)


class _InProcess(OneMachine):
    """The serial runtime for the supervisor (runtime/supervisor.py `Runtime`): a worker per
    life, polled in the graph's order, one round per `exits` call."""

    def __init__(
        self,
        ctx: RunContext,
        graph: Graph,
        transport: InlineTransport,
        control: Control,
        supervisor: Supervisor,
        on_tick: Callable[[Control], None],
    ) -> None:
        self.ctx, self.graph, self.transport = ctx, graph, transport
        self.control, self.supervisor, self.on_tick = control, supervisor, on_tick
        self.workers: dict[str, Worker] = {}  # by name, in the graph's (polling) order
        self.active: list[str] = []  # the workers still polled
        self.last_tick = 0.0

    def start(self, names: list[str]) -> None:
        for name in names:
            slot = self.supervisor.slot[name]
            life = self.supervisor.restarts[name]
            try:
                _, _, worker = start_worker(self.ctx, self.graph, slot, self.transport, life)
            except (KeyboardInterrupt, WorkerFailure):
                raise
            except UserError:
                raise
            except Exception:
                raise WorkerFailure(name, traceback.format_exc()) from None
            self.workers[name] = worker
            self.active = [w.name for w in self.graph.workers if w.name in self.workers]
            self.supervisor.started_life(name)

    def exits(self, timeout: float) -> list[Exit]:
        """One round: every active worker polled once, in the graph's order."""
        ended: list[Exit] = []
        progressed = False
        for name in self.active:
            worker = self.workers[name]
            try:
                progressed |= worker.poll(0.0)
            except (KeyboardInterrupt, WorkerFailure):
                raise
            except Exception as error:
                ended.append(Exit(name, "raised", failure_text(error)))
                continue
            if worker.finished:
                ended.append(Exit(name, "finished", str(getattr(worker, "finish_reason", ""))))
        # after the round, so the round's order stays fixed
        gone = {e.name for e in ended}
        self.active = [name for name in self.active if name not in gone]
        if not progressed and not ended:
            raise RuntimeError("serial runtime: no worker can make progress (deadlock)")
        return ended

    def silences(self) -> dict[str, float | None]:
        return {}  # one process: a worker that hangs hangs the run

    def retire(self, name: str) -> None:
        self.workers.pop(name).close()

    def ask_to_checkpoint(self, names: list[str]) -> None:
        self.control.request_stop(CHECKPOINT_AND_STOP)

    def await_finish(self, names: list[str], timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        waiting = [self.workers[name] for name in names]
        while time.monotonic() < deadline and not all(w.finished for w in waiting):
            for worker in waiting:
                if not worker.finished:
                    worker.poll(0.0)
        return all(w.finished for w in waiting)

    def tick(self, final: bool = False) -> None:
        now = time.monotonic()
        if final or now - self.last_tick > TICK_S:
            self.on_tick(self.control)
            self.last_tick = now
