"""A worker process started before its work is known, so its imports overlap the controller's.

Importing torch takes about 1.3-2 s of CPU on a small machine, and the trainer cannot
publish the first parameters before it has: on a CartPole run that is half of the time to
solve. `surge train` therefore starts the trainer's process first thing, while the
controller loads the config, probes the env and lays out shared memory; `run_local` then
hands it its worker's arguments through a pipe. A run that does not use it (serial or Ray
runtime, a bad config) closes it, and it exits.

When torch's files are not in the page cache (the first run after a while, or after a run
that used the memory), the import also waits on the disk: the dynamic loader faults in the
pages of libtorch_cpu.so (414 MB) one small read at a time. `prefetch_package` first asks
the kernel to read torch's libraries ahead (posix_fadvise WILLNEED, asynchronous), so the
reads are large, sequential and already under way. With the page cache dropped before each
run, the trainer was ready 2.44-2.79 s after launch with it and 2.53-2.95 s without (four
runs each, alternating); with a warm cache it costs a few microseconds.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import multiprocessing as mp
import os
import signal
import threading
from collections.abc import Iterator
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import Any


def warm_trainer() -> WarmProcess:
    """The trainer's process (worker `trainer-0`), importing the trainer and torch."""
    threading.Thread(target=prefetch_package, args=("torch",), daemon=True).start()
    return WarmProcess("trainer-0", preload="surge.workers.trainer")


def prefetch_package(name: str) -> int:
    """Start the kernel reading an installed package's shared libraries into the page cache,
    largest first, without importing the package; returns the number of files. Does nothing
    where posix_fadvise does not exist."""
    advise = getattr(os, "posix_fadvise", None)
    spec = importlib.util.find_spec(name)
    if advise is None or spec is None or not spec.submodule_search_locations:
        return 0
    root = Path(next(iter(spec.submodule_search_locations)))
    libraries = [*root.glob("*.so"), *root.glob("lib/*.so*")]
    libraries.sort(key=lambda path: -path.stat().st_size)
    files = 0
    for path in libraries:
        with contextlib.suppress(OSError):
            fd = os.open(path, os.O_RDONLY)
            try:
                advise(fd, 0, 0, os.POSIX_FADV_WILLNEED)
                files += 1
            finally:
                os.close(fd)
    return files


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


class WarmProcess:
    """A spawned process that imports `preload`, calls its `warm_up()` if it has one, and
    waits for a worker's arguments."""

    def __init__(self, name: str, preload: str) -> None:
        spawn = mp.get_context("spawn")
        reader, self._writer = spawn.Pipe(duplex=False)
        # One thread until the worker knows its count (torch.set_num_threads raises it).
        with child_env(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1"):
            # daemon: a process nobody used must not hold up the controller's exit
            self.process: BaseProcess | None = spawn.Process(
                target=_warm_main, args=(reader, preload), name=name, daemon=True
            )
            self.process.start()
        reader.close()
        self.name = name

    def launch(self, args: tuple[Any, ...]) -> BaseProcess:
        """Run `surge.runtime.local.worker_main(*args)` in the process; returns it."""
        process = self.process
        if process is None:
            raise RuntimeError(f"the warm process for {self.name} was already used or closed")
        self._writer.send(args)
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
    module = importlib.import_module(preload)
    if hasattr(module, "warm_up"):
        module.warm_up()
    try:
        args = reader.recv()
    except EOFError:
        return  # the run did not need this process
    from surge.runtime.local import worker_main

    worker_main(*args)
