"""The replay's blocks: each shard's storage, and the batches the shards serve the trainer.

Storage. Shard s keeps its items in block `replay.<s>` (the arrays of its store:
algos/replay_stores.py `store_fields`), in shared memory like every stream: a replay worker
restarted in place finds its data there, committed up to where its previous life stopped.

Batches. Batch u (trained by version u) comes from shard u % S (S shards), in row
(u // S) % P of that shard's P = `replay.prefetch` rows of block `batches`. A row's state
says whose turn it is, and is written only by the row's current owner:

    FREE -> FILLED (the shard sampled batch `batch[r]` into it, when its rate limiter allowed)
         -> TRAINED (the trainer trained on it and wrote each transition's |TD error|)
         -> FREE (the shard applied those priorities; `batch[r]` moves to the row's next batch)

So the trainer reads a row only once it is whole, and the shard refills it only after the
trainer is done with it; a shard keeps up to P batches sampled ahead (prefetch). A new life of
the shard finds the rows as they were. Each row also carries the shard's counters when it was
filled (env steps, inserts, samples, size, wait times) and the episodes that finished since
its previous row, for the trainer's logs.

Checkpoints (`replay.checkpoint`). When the trainer checkpoints version v it asks the shards
to save (`save_request` = v); each shard writes its storage to
`checkpoints/replay-<s>.npz` at its next look, between two of its own writes (so the file
is consistent), and says so (`saved[s]` = v, with the seconds and bytes it took). A resumed
run's shards start from those files.
"""

from __future__ import annotations

import os
import zipfile
from pathlib import Path
from typing import Any

import numpy as np

from surge.algos.replay_stores import item_fields, store_fields
from surge.algos.transition_store import Spec
from surge.streams.transport import BlockLayout, Field, Transport

FREE, FILLED, TRAINED = 0, 1, 2
BATCHES = "batches"
EPISODES = 256
"""Episodes a row can carry; more wait for the next row."""
COUNTERS = ("steps", "inserted", "sampled", "size", "insert_wait_s", "sample_wait_s")
"""The shard's running counters each row carries: env steps in this run, and its storage's
own (cumulative over the replay's life, a restored one's included)."""


def storage_block(shard: int) -> str:
    return f"replay.{shard}"


def storage_layout(spec: Spec) -> BlockLayout:
    return BlockLayout({k: Field(shape, dtype) for k, (shape, dtype) in store_fields(spec).items()})


def batch_layout(shards: int, prefetch: int, batch: int, spec: Spec) -> BlockLayout:
    """Rows of `batch` items of the store `spec` names (algos/replay_stores.py `item_fields`:
    transitions, sequences with per-step targets and masks, or episodes), each with what the
    trainer writes back (`priority`) and the shard's counters and finished episodes."""
    rows = shards * prefetch
    fields = {"state": Field((rows,), "<i8"), "batch": Field((rows,), "<i8")}
    for name, (shape, dtype) in item_fields(spec).items():
        fields[name] = Field((rows, batch, *shape), dtype)
    # written by the trainer: |TD error| (a sequence's priority)
    fields["priority"] = Field((rows, batch), "<f4")
    for name in COUNTERS:
        fields[name] = Field((rows,), "<f8")
    fields["episodes"] = Field((rows,), "<i8")
    fields["episode_return"] = Field((rows, EPISODES), "<f4")
    fields["episode_length"] = Field((rows, EPISODES), "<i8")
    fields["base_steps"] = Field((shards,), "<i8")  # each shard's steps when the run began
    fields["save_request"] = Field((1,), "<i8")
    fields["saved"] = Field((shards,), "<i8")
    fields["save_seconds"] = Field((shards,), "<f8")
    fields["save_bytes"] = Field((shards,), "<f8")
    return BlockLayout(fields)


def saved_replay(run_dir: Path, shard: int) -> Path:
    """Where shard `shard` keeps its replay beside the run's checkpoints."""
    return run_dir / "checkpoints" / f"replay-{shard}.npz"


def save_storage(arrays: dict[str, np.ndarray], path: Path) -> int:
    """Write a shard's storage arrays to `path` (a new file, then renamed over the old one,
    so a crash leaves the previous file whole); the bytes written."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    fields: dict[str, Any] = dict(arrays)  # counters first: see `ReplayStore`'s commits
    with open(partial, "wb") as f:
        np.savez(f, **fields)
        f.flush()
        os.fsync(f.fileno())
    os.replace(partial, path)
    return path.stat().st_size


def stored_layout(path: Path) -> dict[str, tuple[tuple[int, ...], str]]:
    """The fields of a saved replay (shape and dtype of each), read from the file's array
    headers without loading the arrays; {} when there is no readable file."""
    try:
        with zipfile.ZipFile(path) as archive:
            layout = {}
            for name in archive.namelist():
                with archive.open(name) as f:
                    fmt = np.lib.format
                    if fmt.read_magic(f) == (1, 0):
                        shape, _, dtype = fmt.read_array_header_1_0(f)
                    else:
                        shape, _, dtype = fmt.read_array_header_2_0(f)
                layout[name.removesuffix(".npy")] = (tuple(shape), dtype.str)
            return layout
    except (OSError, ValueError, zipfile.BadZipFile):
        return {}


def load_storage(arrays: dict[str, np.ndarray], path: Path) -> bool:
    """Fill a shard's storage arrays from `path`; False (nothing changed) when the file holds
    another layout (the replay's size or the env changed since it was saved)."""
    with np.load(path) as saved:
        if set(saved.files) != set(arrays) or any(
            saved[k].shape != v.shape or saved[k].dtype != v.dtype for k, v in arrays.items()
        ):
            return False
        for k, v in arrays.items():
            v[...] = saved[k]
    return True


class BatchRows:
    """A view of the batches block: which row holds batch u, and the rows' states."""

    def __init__(self, transport: Transport, block: str, shards: int, prefetch: int) -> None:
        self.a = transport.block(block)
        self.shards, self.prefetch = shards, prefetch

    def shard_of(self, batch: int) -> int:
        return batch % self.shards

    def row_of(self, batch: int) -> int:
        shard = batch % self.shards
        return shard * self.prefetch + (batch // self.shards) % self.prefetch

    def rows_of(self, shard: int) -> range:
        return range(shard * self.prefetch, (shard + 1) * self.prefetch)

    def first_batches(self, shard: int, start: int) -> None:
        """Give each of the shard's rows the first batch at or after `start` it serves."""
        for row in self.rows_of(shard):
            u = start
            while self.row_of(u) != row:
                u += 1
            self.a["batch"][row] = u
            self.a["state"][row] = FREE

    def ready(self, batch: int) -> bool:
        """Batch `batch` is sampled into its row."""
        row = self.row_of(batch)
        return bool(self.a["state"][row] == FILLED and self.a["batch"][row] == batch)

    def in_state(self, shard: int, state: int) -> list[int]:
        """The shard's rows in `state`, in the order of the batches they hold."""
        rows = [r for r in self.rows_of(shard) if self.a["state"][r] == state]
        return sorted(rows, key=lambda r: int(self.a["batch"][r]))

    def set_state(self, row: int, state: int) -> None:
        self.a["state"][row] = state

    def fields(self, row: int) -> dict[str, np.ndarray]:
        """Views of one row's per-transition fields."""
        return {k: v[row] for k, v in self.a.items() if v.ndim >= 2 and k[:7] != "episode"}

    def request_save(self, version: int) -> None:
        """Ask every shard to save its replay for the checkpoint of `version`."""
        self.a["save_request"][0] = version

    def all_saved(self, version: int) -> bool:
        return bool((self.a["saved"] >= version).all())
