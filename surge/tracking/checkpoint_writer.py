"""Checkpoints written on a background thread, from a snapshot taken on the training thread.

Why: writing a checkpoint stalls whoever writes it: the state is serialised, written and
fsync'ed (tracking/checkpoint.py), which on a busy machine's disk can take a while, and
every update waits behind it. So the trainer copies its state (a few MB for an MLP, tens
for the Nature CNN: milliseconds) and a single writer thread does the rest, in order. A
snapshot is never shared with training: numpy arrays are copied and tensors cloned before
the trainer moves on.
"""

from __future__ import annotations

import concurrent.futures
from pathlib import Path
from typing import Any

import numpy as np


def snapshot(obj: Any) -> Any:
    """A deep copy of the arrays and tensors in `obj` (dicts, lists, tuples), so training
    can go on changing the originals while the copy is written."""
    if isinstance(obj, np.ndarray):
        return obj.copy()
    if hasattr(obj, "detach") and hasattr(obj, "clone"):  # a torch tensor
        return obj.detach().clone()
    if isinstance(obj, dict):
        return {k: snapshot(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return type(obj)(snapshot(v) for v in obj)
    return obj


def _write(run_dir: Path, state: dict[str, Any], version: int, keep: int) -> Path:
    from surge.tracking.checkpoint import save_checkpoint

    return save_checkpoint(run_dir, state, version, keep)


class CheckpointWriter:
    """Writes checkpoints on one background thread, one at a time, in submission order."""

    def __init__(self, run_dir: Path, keep: int) -> None:
        self.run_dir = Path(run_dir)
        self.keep = keep
        self._pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="checkpoint")
        self._pending: concurrent.futures.Future[Path] | None = None

    @property
    def busy(self) -> bool:
        """A checkpoint is still being written."""
        return self._pending is not None and not self._pending.done()

    def submit(self, state: dict[str, Any], version: int) -> None:
        """Write `state` (a `snapshot`) as the checkpoint of `version`. An earlier write's
        failure is raised here, on the training thread."""
        self._raise_failure()
        self._pending = self._pool.submit(_write, self.run_dir, state, version, self.keep)

    def wait(self) -> None:
        """Block until every submitted checkpoint is on disk (or raise its failure)."""
        if self._pending is not None:
            self._pending.result()

    def close(self) -> None:
        """Wait for the checkpoint being written, then stop the writer's thread."""
        self.wait()
        self._pool.shutdown()

    def _raise_failure(self) -> None:
        if self._pending is not None and self._pending.done():
            self._pending.result()  # raises what the write raised
