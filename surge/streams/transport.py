"""The two primitives every stream is built from: named array blocks and notification channels.

A stream (inference, sample, parameters) is written once against these primitives; a runtime
only chooses their backend:

- `InlineTransport` (serial runtime): blocks are plain numpy arrays in this process; channels
  are in-process queues that never block.
- `ShmTransport` (local runtime): blocks are files in a run-scoped directory on /dev/shm, mapped
  into every worker, written in place (no pickling); channels are named pipes (FIFOs) carrying
  int32 records. A reader blocks in `select` until a record arrives, so no worker ever spins.

Everything a run creates lives in one directory, so cleaning up after any crash is one
`rmtree`, and a sweep at start removes what a killed controller left behind.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import select
import shutil
import tempfile
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np

ALIGN = 64  # cache-line alignment keeps fields from sharing lines between writers
RECORD = np.dtype(np.int32)

# Channel records are slot ids (>= 0) or one of these control codes.
PARAMS_UPDATED = -1  # on a policy channel: a newer parameter version was published
WAKE = -2  # wakes the reader and means nothing else (used at shutdown)


@dataclass(frozen=True)
class Field:
    """One named array of a block: full shape (including leading slot/time dims) and dtype."""

    shape: tuple[int, ...]
    dtype: str


@dataclass(frozen=True)
class BlockLayout:
    """The arrays of one block, laid out back to back at aligned offsets."""

    fields: dict[str, Field]

    def offsets(self) -> tuple[dict[str, int], int]:
        """Each field's byte offset in the block, and the block's size in bytes (every field starts
        on a 64-byte boundary)."""
        offsets: dict[str, int] = {}
        pos = 0
        for name, f in self.fields.items():
            offsets[name] = pos
            nbytes = int(np.prod(f.shape, dtype=np.int64)) * np.dtype(f.dtype).itemsize
            pos += -(-nbytes // ALIGN) * ALIGN
        return offsets, max(pos, ALIGN)

    def views(self, buffer: Any) -> dict[str, np.ndarray]:
        """numpy arrays over `buffer` (an mmap or bytes of the block's size), one per field, without
        copying."""
        offsets, _ = self.offsets()
        out = {}
        for name, f in self.fields.items():
            count = int(np.prod(f.shape, dtype=np.int64))
            arr = np.frombuffer(buffer, dtype=f.dtype, count=count, offset=offsets[name])
            out[name] = arr.reshape(f.shape)
        return out


class Channel(Protocol):
    """A one-reader, many-writer queue of int32 records (slot ids and control codes)."""

    concurrent: bool
    """Whether its writers run beside its reader, so shared memory can change while the
    reader polls it (false where they take turns in one thread: the serial runtime)."""

    def send(self, *records: int) -> None:
        """Append `records` (slot ids or control codes); waits for room only when the channel is
        full."""

    def notify(self, code: int) -> None:
        """Send a control code that only wakes the reader (e.g. PARAMS_UPDATED): dropped if
        the channel is full, since a reader that far behind has wake-ups enough. So a
        publisher never waits for a slow or dead subscriber."""
        ...

    def recv(self, timeout: float) -> list[int]:
        """Every record available, waiting up to `timeout` seconds for the first."""
        ...


class Transport(Protocol):
    """Where a worker finds a run's blocks and channels by name (inline or shared memory)."""

    def block(self, name: str) -> dict[str, np.ndarray]:
        """The arrays of block `name`, by field."""

    def channel(self, name: str) -> Channel:
        """The channel `name` (a worker's inbox)."""


# --------------------------------------------------------------------------- inline (serial)


class InlineChannel:
    """An in-process queue of records (the serial runtime): sending never blocks."""

    concurrent = False

    def __init__(self) -> None:
        self._queue: deque[int] = deque()

    def send(self, *records: int) -> None:
        """Append `records` to the queue."""
        self._queue.extend(records)

    def notify(self, code: int) -> None:
        """Queue control code `code` unless it is already pending."""
        if code not in self._queue:  # one pending wake-up is as good as many
            self._queue.append(code)

    def recv(self, timeout: float) -> list[int]:
        """Every queued record, at once (never waits: in the serial runtime the writers run between
        polls)."""
        out = list(self._queue)
        self._queue.clear()
        return out


class InlineTransport:
    """Blocks and channels living in this process (the serial runtime)."""

    def __init__(self, layouts: dict[str, BlockLayout], channels: list[str]) -> None:
        self._blocks = {
            name: {k: np.zeros(f.shape, f.dtype) for k, f in layout.fields.items()}
            for name, layout in layouts.items()
        }
        self._channels = {name: InlineChannel() for name in channels}

    def block(self, name: str) -> dict[str, np.ndarray]:
        """The arrays of block `name`, by field."""
        return self._blocks[name]

    def channel(self, name: str) -> Channel:
        """The channel `name`."""
        return self._channels[name]


# --------------------------------------------------------------------------- shared memory


class FifoChannel:
    """A named pipe. Writes of one record are atomic (< PIPE_BUF), so many writers are safe."""

    concurrent = True

    def __init__(self, path: str) -> None:
        # O_RDWR never blocks on open and never sees EOF when a peer dies.
        self._fd = os.open(path, os.O_RDWR | os.O_NONBLOCK)

    def send(self, *records: int) -> None:
        """Write `records` to the pipe, waiting for room while it is full."""
        data = np.asarray(records, dtype=RECORD).tobytes()
        view = memoryview(data)
        while view:
            try:
                written = os.write(self._fd, view)
                view = view[written:]
            except BlockingIOError:  # pipe full: the reader is behind; wait for room
                select.select([], [self._fd], [], 1.0)

    def notify(self, code: int) -> None:
        """Write control code `code` unless the pipe is full (the reader will wake anyway)."""
        # Full of unread records: the reader will wake anyway.
        with contextlib.suppress(BlockingIOError):
            os.write(self._fd, np.asarray([code], dtype=RECORD).tobytes())

    def recv(self, timeout: float) -> list[int]:
        """Every record in the pipe, waiting up to `timeout` seconds for the first ([] if none
        came)."""
        # Read first: on a busy channel records are usually there, and one syscall is
        # cheaper than select's two.
        try:
            data = os.read(self._fd, 1 << 16)
        except BlockingIOError:
            if timeout <= 0:
                return []
            ready, _, _ = select.select([self._fd], [], [], timeout)
            if not ready:
                return []
            try:
                data = os.read(self._fd, 1 << 16)
            except BlockingIOError:
                return []
        return np.frombuffer(data, dtype=RECORD).tolist()

    def close(self) -> None:
        """Close this process's end of the pipe."""
        os.close(self._fd)


def shm_root() -> Path:
    """Where runs put their shared memory: /dev/shm when it is writable, else the temp directory."""
    root = Path("/dev/shm")
    return root if root.is_dir() and os.access(root, os.W_OK) else Path(tempfile.gettempdir())


@dataclass(frozen=True)
class ShmSpec:
    """What a worker process needs to attach to a run's shared memory (picklable)."""

    directory: str
    layouts: dict[str, BlockLayout]


def create_shm(layouts: dict[str, BlockLayout], channels: list[str]) -> ShmSpec:
    """Create every block and FIFO of a run (in the controller, before workers start)."""
    sweep_stale_shm()
    directory = tempfile.mkdtemp(prefix=f"surge-{os.getpid()}-", dir=shm_root())
    for name, layout in layouts.items():
        _, size = layout.offsets()
        fd = os.open(os.path.join(directory, f"{name}.block"), os.O_CREAT | os.O_EXCL | os.O_RDWR)
        try:
            os.ftruncate(fd, size)  # tmpfs pages are zero-filled and allocated on first touch
        finally:
            os.close(fd)
    os.mkdir(os.path.join(directory, "channels"))
    for name in channels:
        os.mkfifo(os.path.join(directory, "channels", name))
    os.mkdir(os.path.join(directory, "errors"))
    return ShmSpec(directory, layouts)


def destroy_shm(spec: ShmSpec) -> None:
    """Remove a run's shared-memory directory: every block and channel it created."""
    shutil.rmtree(spec.directory, ignore_errors=True)


def sweep_stale_shm() -> None:
    """Remove directories of runs whose controller no longer exists (killed with SIGKILL)."""
    for path in shm_root().glob("surge-*-*"):
        try:
            pid = int(path.name.split("-")[1])
        except (IndexError, ValueError):
            continue
        if not _pid_alive(pid):
            shutil.rmtree(path, ignore_errors=True)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class ShmTransport:
    """A worker's view of the run's shared memory: maps blocks on first use."""

    def __init__(self, spec: ShmSpec) -> None:
        self.spec = spec
        self._maps: dict[str, mmap.mmap] = {}
        self._blocks: dict[str, dict[str, np.ndarray]] = {}
        self._channels: dict[str, FifoChannel] = {}

    def block(self, name: str) -> dict[str, np.ndarray]:
        """The arrays of block `name`, by field, mapping its file on first use."""
        if name not in self._blocks:
            layout = self.spec.layouts[name]
            _, size = layout.offsets()
            fd = os.open(os.path.join(self.spec.directory, f"{name}.block"), os.O_RDWR)
            try:
                self._maps[name] = mmap.mmap(fd, size)
            finally:
                os.close(fd)
            self._blocks[name] = layout.views(self._maps[name])
        return self._blocks[name]

    def channel(self, name: str) -> Channel:
        """The FIFO channel `name`, opened on first use."""
        if name not in self._channels:
            path = os.path.join(self.spec.directory, "channels", name)
            self._channels[name] = FifoChannel(path)
        return self._channels[name]

    def error_path(self, worker: str) -> str:
        """The file where worker `worker` writes its traceback when it fails."""
        return os.path.join(self.spec.directory, "errors", f"{worker}.txt")
