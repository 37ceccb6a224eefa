"""The settings channel: new values of a running trainer's mutable settings, and a
checkpoint for it to load, in one small JSON file of its run directory.

    run_dir/hyperparams.json   {"seq": 3, "values": {"ppo.lr": 0.001}, "load": "path" | null}

A writer (a population's controller, or a person with an editor) replaces the file
atomically with a higher `seq`; the trainer looks at it between two updates (a `stat`, so it
costs nothing when nothing changed) and takes what is new. A file fits every runtime: the
trainer already writes its metrics and checkpoints into the run directory, so wherever it
runs it sees that directory, and no stream layout or worker kind changes. The file stays
after the run, so a resumed run trains with the values in force when it stopped.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from surge.tracking.files import atomic_writer

HYPERPARAMS_FILE = "hyperparams.json"


@dataclass(frozen=True)
class SettingsRequest:
    """One message of the channel."""

    seq: int
    """Increases with every message; the trainer takes each one once."""
    values: dict[str, float] = field(default_factory=dict)
    """Setting key -> its new value (keys the algorithm declares mutable)."""
    load: str | None = None
    """A checkpoint whose learner state (weights, optimiser, normalisation) the trainer
    loads before its next version, keeping its own counters; None: none."""


def write_request(run_dir: Path, request: SettingsRequest) -> None:
    """Replace the run's channel file with `request` (atomically: a reader sees the old
    message or the new one)."""
    data = {"seq": request.seq, "values": request.values, "load": request.load}
    with atomic_writer(Path(run_dir) / HYPERPARAMS_FILE) as f:
        f.write(json.dumps(data) + "\n")


def read_request(run_dir: Path) -> SettingsRequest | None:
    """The channel file's message, or None when there is none."""
    try:
        data: Any = json.loads((Path(run_dir) / HYPERPARAMS_FILE).read_text())
    except FileNotFoundError:
        return None
    if not isinstance(data, dict) or not isinstance(data.get("values", {}), dict):
        raise ValueError(f"{Path(run_dir) / HYPERPARAMS_FILE}: not a settings message")
    return SettingsRequest(int(data.get("seq", 0)), dict(data.get("values", {})), data.get("load"))


class SettingsWatch:
    """The trainer's side: `new()` returns a message it has not taken yet, else None."""

    def __init__(self, run_dir: Path, taken: int = 0) -> None:
        self.path = Path(run_dir) / HYPERPARAMS_FILE
        self.taken = taken
        """The `seq` of the last message taken (saved with checkpoints)."""
        self._stamp: tuple[int, int] | None = None  # (mtime_ns, inode): unchanged, unread

    def new(self) -> SettingsRequest | None:
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return None
        stamp = (st.st_mtime_ns, st.st_ino)  # atomic replaces give a new inode
        if stamp == self._stamp:
            return None
        self._stamp = stamp
        request = read_request(self.path.parent)
        if request is None or request.seq <= self.taken:
            return None
        self.taken = request.seq
        return request
