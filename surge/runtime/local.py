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
import ctypes
import multiprocessing as mp
import os
import signal
import socket
import sys
import time
import traceback
from collections.abc import Callable
from multiprocessing.connection import wait
from multiprocessing.process import BaseProcess
from pathlib import Path

from surge.errors import WorkerFailure
from surge.runtime.control import CHECKPOINT_AND_STOP, STOP, Control
from surge.runtime.graph import Graph, WorkerSpec, build_worker, drive, write_timing
from surge.runtime.warm import WarmProcess, child_env, thread_env
from surge.streams.transport import WAKE, ShmSpec, ShmTransport, create_shm, destroy_shm
from surge.tracking.run_dir import WorkersFile
from surge.workers.base import RunContext

INTERRUPT_GRACE_S = 30.0
STARTUP_TIMEOUT_S = 300.0
CHECKPOINT_TIMEOUT_S = 30.0
TRAINER = "trainer-0"


def run_local(
    ctx: RunContext,
    graph: Graph,
    on_tick: Callable[[Control], None],
    warm: WarmProcess | None = None,
) -> str:
    """Run the graph as processes on this machine; `warm` (optional) is a process already
    started for the worker of its name (surge/runtime/warm.py)."""
    shm = create_shm(graph.layouts, graph.channels)
    transport = ShmTransport(shm)
    control = Control(transport)
    control.reset()
    spawn = mp.get_context("spawn")
    procs: dict[str, BaseProcess] = {}
    states: dict[str, str] = {}
    workers_file = WorkersFile(ctx.run_dir / "workers.json")
    host = socket.gethostname()

    restarts = {spec.name: 0 for spec in graph.workers}

    def record(name: str, state: str) -> None:
        states[name] = state
        workers_file.write(
            [
                {
                    "name": s.name,
                    "pid": procs[s.name].pid if s.name in procs else None,
                    "host": host,
                    "state": states.get(s.name, "pending"),
                    "restarts": restarts[s.name],
                }
                for s in graph.workers
            ]
        )

    def start(slot: int, spec: WorkerSpec) -> BaseProcess:
        nonlocal warm
        args = (spec, slot, ctx, shm, os.getpid(), restarts[spec.name])
        if warm is not None and warm.name == spec.name:
            proc, warm = warm.launch(args), None
        else:
            threads = _threads(ctx, spec)
            with child_env(**thread_env(threads)):
                proc = spawn.Process(target=worker_main, args=args, name=spec.name)
                proc.start()
        procs[spec.name] = proc
        record(spec.name, "running")
        return proc

    def restart(slot: int, spec: WorkerSpec, cause: str) -> BaseProcess | None:
        """Start a new life of a failed actor / policy worker, if the config allows it."""
        allowed = spec.kind != "trainer" and restarts[spec.name] < ctx.cfg.workers.max_restarts
        if not allowed:
            return None
        old = procs[spec.name]
        if old.is_alive():  # hung: it has to go before its successor takes the slot
            old.kill()
        old.join()
        Path(transport.error_path(spec.name)).unlink(missing_ok=True)
        restarts[spec.name] += 1
        control.reset_worker(slot)
        control.set_progress(restarts=sum(restarts.values()))
        print(
            f"surge: {spec.name} failed ({_first_line(cause)}); restarting it "
            f"({restarts[spec.name]}/{ctx.cfg.workers.max_restarts})",
            file=sys.stderr,
        )
        return start(slot, spec)

    try:
        for slot, spec in enumerate(graph.workers):
            start(slot, spec)
        try:
            return _watch(ctx, graph, procs, control, transport, on_tick, record, restart)
        except WorkerFailure as failure:
            if failure.worker != TRAINER and _checkpoint_now(procs[TRAINER], control, transport):
                record(TRAINER, "stopped")
                failure.detail += "\n(the trainer saved a checkpoint: `surge resume` continues)"
            raise
    finally:
        control.request_stop(STOP)
        for name in graph.channels:
            with contextlib.suppress(OSError):
                transport.channel(name).send(WAKE)
        _stop_all(procs)
        for name, proc in procs.items():
            if states.get(name) == "running":
                record(name, "stopped" if proc.exitcode == 0 else f"exited ({proc.exitcode})")
        control.note_controller_cpu()
        write_timing(ctx.run_dir, graph, control.timing)
        destroy_shm(shm)


def _watch(
    ctx: RunContext,
    graph: Graph,
    procs: dict[str, BaseProcess],
    control: Control,
    transport: ShmTransport,
    on_tick: Callable[[Control], None],
    record: Callable[[str, str], None],
    restart: Callable[[int, WorkerSpec, str], BaseProcess | None],
) -> str:
    timeout = ctx.cfg.workers.heartbeat_timeout_s
    started = {spec.name: time.monotonic() for spec in graph.workers}
    slots = {spec.name: (slot, spec) for slot, spec in enumerate(graph.workers)}
    interrupted_at: float | None = None
    by_sentinel = {p.sentinel: name for name, p in procs.items()}

    def fail_or_restart(name: str, state: str, cause: str, raised: bool) -> None:
        """Restart the worker in place if allowed, else stop the run with its failure."""
        slot, spec = slots[name]
        record(name, state)
        may = not raised or ctx.cfg.workers.restart_on_error
        old = procs[name].sentinel
        new = restart(slot, spec, cause) if may and interrupted_at is None else None
        if new is None:
            raise WorkerFailure(name, cause)
        by_sentinel.pop(old, None)
        by_sentinel[new.sentinel] = name
        started[name] = time.monotonic()

    while True:
        try:
            exited = wait(list(by_sentinel), timeout=0.25)
            for sentinel in exited:
                name = by_sentinel.pop(sentinel)  # type: ignore[arg-type]
                proc = procs[name]
                proc.join()
                if name == TRAINER and proc.exitcode == 0:
                    record(name, "finished")
                    on_tick(control)
                    return Path(transport.error_path(name)).with_suffix(".done").read_text()
                raised = Path(transport.error_path(name)).exists()
                fail_or_restart(name, "failed", _failure_detail(transport, name, proc), raised)
            now = time.monotonic()
            for slot, spec in enumerate(graph.workers):
                last = control.last_beat(slot)
                if last == 0.0:  # still starting: importing, building envs and networks
                    if now - started[spec.name] > STARTUP_TIMEOUT_S:
                        cause = f"did not finish starting in {STARTUP_TIMEOUT_S:g} s"
                        fail_or_restart(spec.name, "hung", cause, raised=False)
                    continue
                silent = now - last
                if silent > timeout:
                    cause = (
                        f"no heartbeat for {silent:.0f} s (workers.heartbeat_timeout_s="
                        f"{timeout:g}): the worker is hung, e.g. inside env.step()"
                    )
                    fail_or_restart(spec.name, "hung", cause, raised=False)
            if interrupted_at is not None and now - interrupted_at > INTERRUPT_GRACE_S:
                raise WorkerFailure(TRAINER, "did not save a checkpoint after Ctrl+C in time")
            on_tick(control)
        except KeyboardInterrupt:
            if interrupted_at is not None:
                raise  # a second Ctrl+C: stop now, without waiting for the checkpoint
            interrupted_at = time.monotonic()
            control.request_stop(CHECKPOINT_AND_STOP)
            with contextlib.suppress(OSError):
                transport.channel("trainer").send(WAKE)


def _checkpoint_now(trainer: BaseProcess, control: Control, transport: ShmTransport) -> bool:
    """Ask a healthy trainer to save a checkpoint and stop; True once it has."""
    if not trainer.is_alive():
        return False
    control.request_stop(CHECKPOINT_AND_STOP)
    with contextlib.suppress(OSError):
        transport.channel("trainer").send(WAKE)
    trainer.join(CHECKPOINT_TIMEOUT_S)
    return trainer.exitcode == 0


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


def _first_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1].strip() if lines else "unknown cause"


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


def _threads(ctx: RunContext, spec: WorkerSpec) -> int:
    w = ctx.cfg.workers
    return {"trainer": w.trainer_threads, "policy": w.policy_threads}.get(
        spec.kind, w.actor_threads
    )


# ----------------------------------------------------------------------------- in the worker


def worker_main(
    spec: WorkerSpec, slot: int, ctx: RunContext, shm: ShmSpec, parent: int, life: int = 0
) -> None:
    """Entry point of a worker process (`life` > 0: a restart in place)."""
    _become_worker(spec.name, ctx)
    transport = ShmTransport(shm)
    control = Control(transport, slot)
    try:
        worker = build_worker(spec, ctx, transport, control, life)
        drive(worker, control, spec.kind, 0.5, lambda: os.getppid() == parent)
        worker.close()
        if spec.kind == "trainer":
            done = Path(transport.error_path(spec.name)).with_suffix(".done")
            done.write_text(getattr(worker, "finish_reason", ""))
    except BaseException:
        Path(transport.error_path(spec.name)).write_text(traceback.format_exc())
        sys.stderr.flush()
        os._exit(1)


def _become_worker(name: str, ctx: RunContext) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl+C is the controller's to handle
    with contextlib.suppress(Exception):
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG: die with the controller
    with contextlib.suppress(ImportError):
        import setproctitle

        setproctitle.setproctitle(f"surge {name} [{ctx.run_dir.name}]")
