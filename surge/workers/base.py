"""What every worker shares: the run context it is built from and the poll contract.

A worker is a loop with one job. Runtimes drive it through `poll(timeout)`: do one unit of
work if there is some (waiting at most `timeout` seconds for it) and say whether work was
done. The serial runtime polls every worker in turn with timeout 0; the local runtime polls
one worker per process with a blocking timeout. Workers never know which runtime runs them.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np

from surge.config.schema import ExperimentConfig
from surge.envs.make import EnvInfo


@dataclass(frozen=True)
class RunContext:
    """Everything a worker is built from (picklable, sent to worker processes)."""

    cfg: ExperimentConfig
    env: EnvInfo
    run_dir: Path
    n_params: int
    start_version: int = 0
    """Policy version (= trainer updates done) the run starts from: 0, or a checkpoint's."""
    checkpoint: str | None = None
    """Checkpoint the trainer restores, when resuming."""
    resumes: int = 0
    """How many times this run was resumed; mixed into seeds so resumed envs differ."""


class Worker(Protocol):
    name: str
    finished: bool

    def poll(self, timeout: float) -> bool: ...

    def close(self) -> None: ...


def derive_seed(seed: int, *keys: int | str) -> int:
    """A seed for one component, independent of the others (e.g. (seed, "env", actor, k, i))."""
    words = [seed] + [
        k if isinstance(k, int) else int.from_bytes(k.encode(), "little") for k in keys
    ]
    return int(np.random.SeedSequence([w % (2**63) for w in words]).generate_state(1)[0])
