"""A worker process started before its work is known, so its imports overlap the controller's.

A trainer cannot publish the first parameters before its imports are done, and on a small
run that is a large part of the time to solve. `surge train` therefore starts the trainer's
process first thing, importing the trainer chassis, while the controller loads the config,
probes the env and lays out shared memory. Once the config names the algorithm, the process
is told to import its learner's module too (`preload`: the algorithm's `warm_module`), and
`run_local` then hands it its worker's arguments through a pipe. A run that does not use it
(serial or Ray runtime, a bad config, an algorithm without one) closes it, and it exits.

With `model.backend` numpy (the default for MLP models) PPO's trainer never imports torch;
the warm process then saves the imports of numpy, the streams and the learner.
"""

from __future__ import annotations

import contextlib
import importlib
import multiprocessing as mp
import os
import signal
from collections.abc import Iterator
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from typing import Any


def warm_trainer() -> WarmProcess:
    """The trainer's process (worker `trainer-0`), importing the trainer chassis."""
    return WarmProcess("trainer-0", preload="surge.workers.trainer")


@contextlib.contextmanager
def child_env(**values: str) -> Iterator[None]:
    """Set environment variables for the processes started inside (spawn copies
    os.environ), and restore this process's own afterwards."""
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def thread_env(threads: int) -> dict[str, str]:
    """The OpenMP / MKL settings a worker process starts with (read once, when torch loads
    them): its thread count, and OpenMP threads that sleep while they wait for work
    (`OMP_WAIT_POLICY=PASSIVE`, unless the user's environment sets the policy). With the
    default policy, GNU OpenMP's threads spin for a while at every barrier, so a trainer on
    2 threads burns CPU whenever one of them is descheduled: on our 2-core machine, busy
    with other jobs, a 2-thread Nature CNN minibatch step (256 frames) took 0.41-0.50 s of
    CPU and 0.62-0.74 s of wall time with the default policy, 0.23-0.28 s and 0.35-0.47 s
    with PASSIVE (one thread: 0.21 s of CPU). Workers block, they do not spin."""
    n = str(threads)
    policy = os.environ.get("OMP_WAIT_POLICY", "PASSIVE")
    return {"OMP_NUM_THREADS": n, "MKL_NUM_THREADS": n, "OMP_WAIT_POLICY": policy}


class WarmProcess:
    """A spawned process that imports `preload` (and calls its `warm_up()` if it has one),
    then more modules as it is told (`preload`), until it gets a worker's arguments."""

    def __init__(self, name: str, preload: str) -> None:
        spawn = mp.get_context("spawn")
        reader, self._writer = spawn.Pipe(duplex=False)
        # One thread until the worker knows its count (torch.set_num_threads raises it).
        with child_env(**thread_env(1)):
            # daemon: a process nobody used must not hold up the controller's exit
            self.process: BaseProcess | None = spawn.Process(
                target=_warm_main, args=(reader, preload), name=name, daemon=True
            )
            self.process.start()
        reader.close()
        self.name = name

    def preload(self, module: str) -> None:
        """Import `module` too (and call its `warm_up()`), while the run is prepared."""
        if self.process is not None:
            self._writer.send(("preload", module))

    def launch(self, args: tuple[Any, ...]) -> BaseProcess:
        """Run `surge.runtime.worker_process.worker_main(*args)` in the process; returns it."""
        process = self.process
        if process is None:
            raise RuntimeError(f"the warm process for {self.name} was already used or closed")
        self._writer.send(("launch", args))
        self._writer.close()
        self.process = None
        return process

    def close(self) -> None:
        """Discard the process if it was not launched."""
        if self.process is None:
            return
        with contextlib.suppress(OSError):
            self._writer.close()
        self.process.kill()
        self.process.join()
        self.process = None


def _warm_main(reader: Connection, preload: str) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl+C is the controller's to handle
    _import(preload)
    while True:
        try:
            what, payload = reader.recv()
        except EOFError:
            return  # the run did not need this process
        if what == "preload":
            _import(payload)
            continue
        from surge.runtime.worker_process import worker_main

        worker_main(*payload)
        return


def _import(name: str) -> None:
    module = importlib.import_module(name)
    if hasattr(module, "warm_up"):
        module.warm_up()
