"""The local runtime: one OS process per worker, streams over shared memory.

The controller (this process) creates the run's shared memory, starts every worker, and then
only watches: process exits, heartbeats, the trainer's progress. What happens then is the
supervisor's (runtime/supervisor.py); this module starts, kills and observes processes for
it. An actor or policy worker that dies or hangs is restarted in place (same slot, same
shared memory, a new `life`); the streams keep their state in shared memory, so the new
process picks up where the old one stopped (see streams/sample.py and streams/inference.py).
Any other failure stops the run within a second with that worker's name and original
traceback; whatever happens, every process is stopped and the shared memory removed before
`run_local` returns.
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import signal
import socket
import time
from collections.abc import Callable
from multiprocessing import forkserver
from multiprocessing.connection import wait
from multiprocessing.context import ForkServerContext, SpawnContext
from multiprocessing.process import BaseProcess
from pathlib import Path

from surge.runtime.launch import write_timing
from surge.runtime.supervisor import Exit, OneMachine, Supervisor
from surge.runtime.warm import WarmProcess, child_env, thread_env
from surge.runtime.worker_process import worker_main
from surge.streams.control import CHECKPOINT_AND_STOP, STOP, Control
from surge.streams.params import ParameterService
from surge.streams.transport import WAKE, ShmSpec, ShmTransport, create_shm, destroy_shm
from surge.workers.base import RunContext
from surge.workers.graph import Graph


def run_local(
    ctx: RunContext,
    graph: Graph,
    on_tick: Callable[[Control], None],
    warm: WarmProcess | None = None,
) -> str:
    """Run the graph as processes on this machine; `warm` (optional) is a process already
    started for the worker of its name (surge/runtime/warm.py)."""
    shm = create_shm(graph.all_layouts(), graph.channels)
    transport = ShmTransport(shm)
    control = Control(transport)
    control.reset()
    # An unwritten parameter block reads as version 0 of all-zero weights: mark it empty
    # before any worker starts (as the Ray runtime's node agents do), or a policy worker that
    # starts before the trainer has published acts on zeros as "version 0".
    for block in (s.block for s in graph.streams if s.kind == "versions"):
        ParameterService(transport, block).reset()
    supervisor = Supervisor(ctx.cfg, graph, ctx.run_dir)
    processes = _Processes(ctx, graph, shm, supervisor, warm, on_tick)
    try:
        return supervisor.run(processes)
    finally:
        control.request_stop(STOP)
        for name in graph.channels:
            with contextlib.suppress(OSError):
                transport.channel(name).send(WAKE)
        _stop_all(processes.procs)
        for name, proc in processes.procs.items():
            if supervisor.running(name):
                state = "stopped" if proc.exitcode == 0 else f"exited ({proc.exitcode})"
                supervisor.record(name, state)
        control.note_controller_cpu()
        write_timing(ctx.run_dir, graph, control.timing)
        destroy_shm(shm)


def start_context(graph: Graph) -> SpawnContext | ForkServerContext:
    """How worker processes start: spawned, each a fresh interpreter with its own thread
    environment (thread_env), or, for a graph with `shared_imports`, forked from a fork
    server that imported them once. A forked worker shares those pages with its siblings
    (4 LLM workers: 0.5 GB of memory instead of 1 GB) and sets its thread count itself
    (`limit_torch_threads`); the server starts with one OpenMP thread that waits passively."""
    if not graph.shared_imports:
        return mp.get_context("spawn")
    context = mp.get_context("forkserver")
    context.set_forkserver_preload(list(graph.shared_imports))
    with child_env(**thread_env(1)):
        forkserver.ensure_running()  # started with this environment (a no-op if running)
    return context


class _Processes(OneMachine):
    """The local runtime for the supervisor (runtime/supervisor.py `Runtime`): a process per
    worker life, started (spawned, forked from the fork server, or the warm process),
    watched by its exit sentinel and its heartbeat, killed when it must go."""

    def __init__(
        self,
        ctx: RunContext,
        graph: Graph,
        shm: ShmSpec,
        supervisor: Supervisor,
        warm: WarmProcess | None,
        on_tick: Callable[[Control], None],
    ) -> None:
        self.ctx, self.graph, self.shm = ctx, graph, shm
        self.supervisor, self.warm, self.on_tick = supervisor, warm, on_tick
        self.transport = ShmTransport(shm)
        self.control = Control(self.transport)
        self.context = start_context(graph)
        self.procs: dict[str, BaseProcess] = {}
        self.by_sentinel: dict[int, str] = {}  # the sentinel of each running life
        self.host = socket.gethostname()

    def start(self, names: list[str]) -> None:
        for name in names:
            sup = self.supervisor
            spec = sup.specs[name]
            args = (self.graph, sup.slot[name], self.ctx, self.shm, os.getpid(), sup.restarts[name])
            if self.warm is not None and self.warm.name == name:
                proc, self.warm = self.warm.launch(args), None
            else:
                with child_env(**thread_env(spec.threads)):
                    proc = self.context.Process(target=worker_main, args=args, name=name)
                    proc.start()
            self.procs[name] = proc
            self.by_sentinel[proc.sentinel] = name
            sup.started_life(name, pid=proc.pid, host=self.host)

    def exits(self, timeout: float) -> list[Exit]:
        ended = []
        for sentinel in wait(list(self.by_sentinel), timeout=timeout):
            name = self.by_sentinel.pop(sentinel)  # type: ignore[arg-type]
            proc = self.procs[name]
            proc.join()
            error = Path(self.transport.error_path(name))
            if name in self.supervisor.leaders and proc.exitcode == 0:
                ended.append(Exit(name, "finished", error.with_suffix(".done").read_text()))
            elif error.exists():
                ended.append(Exit(name, "raised", error.read_text()))
            else:
                ended.append(Exit(name, "died", _failure_detail(proc)))
        return ended

    def silences(self) -> dict[str, float | None]:
        now = time.monotonic()
        silent: dict[str, float | None] = {}
        for slot, spec in enumerate(self.graph.workers):
            last = self.control.last_beat(slot)
            silent[spec.name] = now - last if last else None  # 0.0: still starting
        return silent

    def retire(self, name: str) -> None:
        old = self.procs[name]
        if old.is_alive():  # hung: it has to go before its successor takes the slot
            old.kill()
        old.join()
        self.by_sentinel.pop(old.sentinel, None)
        Path(self.transport.error_path(name)).unlink(missing_ok=True)

    def ask_to_checkpoint(self, names: list[str]) -> None:
        self.control.request_stop(CHECKPOINT_AND_STOP)
        for name in names:
            with contextlib.suppress(OSError):
                self.transport.channel(name).send(WAKE)

    def await_finish(self, names: list[str], timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        for name in names:
            self.procs[name].join(max(0.0, deadline - time.monotonic()))
        return all(self.procs[name].exitcode == 0 for name in names)

    def tick(self, final: bool = False) -> None:
        self.on_tick(self.control)


def _failure_detail(proc: BaseProcess) -> str:
    """What an exit without a traceback says about a worker process."""
    code = proc.exitcode
    if code is not None and code < 0:
        return f"process {proc.pid} was killed by signal {signal.Signals(-code).name}"
    return (
        f"process {proc.pid} exited with code {code} before it could report an error. If surge "
        'was started from a Python script, put the call under `if __name__ == "__main__":`: '
        "worker processes are started with spawn and import the main module again."
    )


def _stop_all(procs: dict[str, BaseProcess]) -> None:
    deadline = time.monotonic() + 5.0
    for proc in procs.values():
        proc.join(max(0.0, deadline - time.monotonic()))
    for proc in procs.values():
        if proc.is_alive():
            proc.terminate()
    for proc in procs.values():
        proc.join(2.0)
        if proc.is_alive():
            proc.kill()
            proc.join()
