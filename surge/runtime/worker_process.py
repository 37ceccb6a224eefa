"""The entry point of a worker process of the local runtime: it becomes the worker (title,
signals, niceness, dies with the controller), builds it on the run's shared memory and drives
its loop; a failure leaves its traceback where the controller looks for it.
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import os
import signal
import sys
from pathlib import Path

from surge.errors import failure_text
from surge.runtime.launch import drive, start_worker
from surge.streams.transport import ShmSpec, ShmTransport
from surge.workers.base import RunContext
from surge.workers.graph import Graph, WorkerSpec


def worker_main(
    graph: Graph, slot: int, ctx: RunContext, shm: ShmSpec, parent: int, life: int = 0
) -> None:
    """Entry point of a worker process (`life` > 0: a restart in place)."""
    spec = graph.workers[slot]
    _become_worker(spec, ctx)
    # The process this one dies with: the controller (`parent`), or the fork server, which
    # exits when the controller does (start_context).
    watched = os.getppid()
    if watched != parent and not _alive(parent):
        return  # the controller died while this process started
    transport = ShmTransport(shm)
    try:
        spec, control, worker = start_worker(ctx, graph, slot, transport, life)
        gc.freeze()  # what the worker built lives for the run: later collections skip it
        drive(worker, control, spec, 0.5, lambda: os.getppid() == watched)
        worker.close()
        if spec.ends_run:
            done = Path(transport.error_path(spec.name)).with_suffix(".done")
            done.write_text(getattr(worker, "finish_reason", ""))
    except BaseException as error:
        Path(transport.error_path(spec.name)).write_text(failure_text(error))
        sys.stderr.flush()
        os._exit(1)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _become_worker(spec: WorkerSpec, ctx: RunContext) -> None:
    # A forked worker shares the fork server's Python objects; a full collection would write
    # to every one of them and copy their pages (~60 MB per LLM worker, minutes into a run).
    gc.freeze()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl+C is the controller's to handle
    if spec.nice:
        os.nice(spec.nice)  # background work: training gets the CPU first
    with contextlib.suppress(Exception):
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG: die with the controller
    with contextlib.suppress(ImportError):
        import setproctitle

        setproctitle.setproctitle(f"surge {spec.name} [{ctx.run_dir.name}]")
