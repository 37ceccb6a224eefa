"""The local runtime: one OS process per worker, streams over shared memory.

The controller (this process) creates the run's shared memory, starts every worker, and then
only watches: process exits, heartbeats, the trainer's progress. An actor or policy worker
that dies or hangs is restarted in place (same slot, same shared memory, a new `life`) up to
`workers.max_restarts` times; the streams keep their state in shared memory, so the new
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

from surge.errors import WorkerFailure
from surge.runtime.launch import write_timing
from surge.runtime.supervisor import Supervisor
from surge.runtime.warm import WarmProcess, child_env, thread_env
from surge.runtime.worker_process import worker_main
from surge.streams.control import CHECKPOINT_AND_STOP, STOP, Control
from surge.streams.params import ParameterService
from surge.streams.transport import WAKE, ShmSpec, ShmTransport, create_shm, destroy_shm
from surge.workers.base import RunContext
from surge.workers.graph import Graph, WorkerSpec

CHECKPOINT_TIMEOUT_S = 30.0


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
    workers = _Processes(ctx, graph, shm, supervisor, warm)
    leaders = [spec.name for spec in graph.leaders]
    try:
        for spec in graph.workers:
            workers.start(spec)
        try:
            return _watch(graph, workers, supervisor, control, transport, on_tick)
        except WorkerFailure as failure:
            if failure.worker not in leaders and _checkpoint_now(
                {n: workers.procs[n] for n in leaders if supervisor.running(n)}, control, transport
            ):
                for name in leaders:
                    supervisor.record(name, "stopped")
                failure.detail += "\n(the trainer saved a checkpoint: `surge resume` continues)"
            raise
    finally:
        control.request_stop(STOP)
        for name in graph.channels:
            with contextlib.suppress(OSError):
                transport.channel(name).send(WAKE)
        _stop_all(workers.procs)
        for name, proc in workers.procs.items():
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


class _Processes:
    """Starts, and restarts in place, the worker processes of a run."""

    def __init__(
        self,
        ctx: RunContext,
        graph: Graph,
        shm: ShmSpec,
        supervisor: Supervisor,
        warm: WarmProcess | None,
    ) -> None:
        self.ctx, self.graph, self.shm = ctx, graph, shm
        self.supervisor, self.warm = supervisor, warm
        self.context = start_context(graph)
        self.procs: dict[str, BaseProcess] = {}
        self.host = socket.gethostname()

    def start(self, spec: WorkerSpec) -> BaseProcess:
        sup = self.supervisor
        slot = sup.slot[spec.name]
        args = (self.graph, slot, self.ctx, self.shm, os.getpid(), sup.restarts[spec.name])
        if self.warm is not None and self.warm.name == spec.name:
            proc, self.warm = self.warm.launch(args), None
        else:
            with child_env(**thread_env(spec.threads)):
                proc = self.context.Process(target=worker_main, args=args, name=spec.name)
                proc.start()
        self.procs[spec.name] = proc
        sup.started_life(spec.name, pid=proc.pid, host=self.host)
        return proc

    def restart(
        self, name: str, cause: str, raised: bool, control: Control, transport: ShmTransport
    ) -> BaseProcess | None:
        """A new life for a failed worker if the supervisor allows it, else None."""
        sup = self.supervisor
        if not sup.may_restart(name, raised):
            return None
        old = self.procs[name]
        if old.is_alive():  # hung: it has to go before its successor takes the slot
            old.kill()
        old.join()
        Path(transport.error_path(name)).unlink(missing_ok=True)
        sup.restarting(name, cause)
        control.reset_worker(sup.slot[name])
        control.set_progress(restarts=sup.total_restarts)
        return self.start(sup.specs[name])


def _watch(
    graph: Graph,
    workers: _Processes,
    supervisor: Supervisor,
    control: Control,
    transport: ShmTransport,
    on_tick: Callable[[Control], None],
) -> str:
    procs = workers.procs
    by_sentinel = {p.sentinel: name for name, p in procs.items()}
    leaders = [spec.name for spec in graph.leaders]
    finished: dict[str, str] = {}  # leader -> its finish reason, in the order they finished

    def fail_or_restart(name: str, state: str, cause: str, raised: bool) -> None:
        """Restart the worker in place if allowed, else stop the run with its failure."""
        supervisor.record(name, state)
        old = procs[name].sentinel
        new = workers.restart(name, cause, raised, control, transport)
        if new is None:
            raise WorkerFailure(name, cause)
        by_sentinel.pop(old, None)
        by_sentinel[new.sentinel] = name

    while True:
        try:
            exited = wait(list(by_sentinel), timeout=0.25)
            for sentinel in exited:
                name = by_sentinel.pop(sentinel)  # type: ignore[arg-type]
                proc = procs[name]
                proc.join()
                if name in leaders and proc.exitcode == 0:
                    supervisor.record(name, "finished")
                    done = Path(transport.error_path(name)).with_suffix(".done")
                    finished[name] = done.read_text()
                    if len(finished) == len(leaders):
                        on_tick(control)
                        return next(iter(finished.values()))  # the first to finish
                    # One trainer is done: the others save a checkpoint and finish too.
                    _wake_to_stop([n for n in leaders if n not in finished], control, transport)
                    continue
                raised = Path(transport.error_path(name)).exists()
                fail_or_restart(name, "failed", _failure_detail(transport, name, proc), raised)
            now = time.monotonic()
            for slot, spec in enumerate(graph.workers):
                last = control.last_beat(slot)
                # 0.0: still starting (importing, building envs and networks)
                cause = supervisor.silence(spec.name, now - last if last else None, now)
                if cause is not None:
                    fail_or_restart(spec.name, "hung", cause, raised=False)
            supervisor.check_interrupt(now)
            on_tick(control)
        except KeyboardInterrupt:
            if not supervisor.interrupt():
                raise  # a second Ctrl+C: stop now, without waiting for the checkpoint
            _wake_to_stop([n for n in leaders if n not in finished], control, transport)


def _wake_to_stop(names: list[str], control: Control, transport: ShmTransport) -> None:
    """Ask the trainers `names` to save a checkpoint and finish."""
    control.request_stop(CHECKPOINT_AND_STOP)
    for name in names:
        with contextlib.suppress(OSError):
            transport.channel(name).send(WAKE)


def _checkpoint_now(
    trainers: dict[str, BaseProcess], control: Control, transport: ShmTransport
) -> bool:
    """Ask healthy trainers to save a checkpoint and stop; True once all have."""
    if not trainers or not all(t.is_alive() for t in trainers.values()):
        return False
    _wake_to_stop(list(trainers), control, transport)
    deadline = time.monotonic() + CHECKPOINT_TIMEOUT_S
    for trainer in trainers.values():
        trainer.join(max(0.0, deadline - time.monotonic()))
    return all(t.exitcode == 0 for t in trainers.values())


def _failure_detail(transport: ShmTransport, name: str, proc: BaseProcess) -> str:
    path = Path(transport.error_path(name))
    if path.exists():
        return path.read_text()
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
