"""Checkpoints: atomic writes, keep the newest N, safe (weights_only) loading.

A checkpoint `state` may hold tensors, dicts, lists, tuples, ints, floats, str, bool and None
only, so `torch.load(weights_only=True)` can read it without running pickled code.
"""

from __future__ import annotations

import contextlib
import random
import re
from pathlib import Path
from typing import Any

import numpy as np
import torch

from surge.errors import UserError
from surge.tracking.files import atomic_writer

CHECKPOINT_DIR = "checkpoints"
_NAME = re.compile(r"^ckpt-(\d+)\.pt$")


def _checkpoints(run_dir: Path) -> list[tuple[int, Path]]:
    folder = Path(run_dir) / CHECKPOINT_DIR
    if not folder.is_dir():
        return []
    found = []
    for p in folder.iterdir():
        m = _NAME.match(p.name)
        if m:
            found.append((int(m.group(1)), p))
    return sorted(found)


def save_checkpoint(run_dir: Path, state: dict[str, Any], version: int, keep: int) -> Path:
    """Write run_dir/checkpoints/ckpt-<version>.pt atomically; keep only the newest `keep`."""
    if keep < 1:
        raise ValueError(f"keep must be >= 1, got {keep}")
    folder = Path(run_dir) / CHECKPOINT_DIR
    folder.mkdir(parents=True, exist_ok=True)
    final = folder / f"ckpt-{version:08d}.pt"
    with atomic_writer(final, "wb", durable=True) as f:
        torch.save(state, f)
    for _, old in _checkpoints(run_dir)[:-keep]:
        with contextlib.suppress(FileNotFoundError):
            old.unlink()
    return final


def latest_checkpoint(run_dir: Path) -> Path | None:
    """The checkpoint with the highest version, or None if there is none."""
    found = _checkpoints(run_dir)
    return found[-1][1] if found else None


def load_checkpoint(path: Path) -> dict[str, Any]:
    """Load a checkpoint onto the CPU; a missing or corrupt file is a UserError."""
    path = Path(path)
    if not path.is_file():
        raise UserError(
            f"checkpoint not found: {path}",
            "check the path; checkpoints are run_dir/checkpoints/ckpt-<version>.pt",
        )
    try:
        state = torch.load(path, weights_only=True, map_location="cpu")
    except Exception as e:  # noqa: BLE001 - torch raises RuntimeError, UnpicklingError, EOFError...
        raise UserError(
            f"checkpoint {path} is corrupt or unreadable: {type(e).__name__}: {e}",
            "resume from an older checkpoint in the same directory (delete this file), "
            "or start a new run",
        ) from None
    if not isinstance(state, dict):
        raise UserError(f"checkpoint {path} holds a {type(state).__name__}, not a dict")
    return state


def rng_state_to_tensors() -> dict[str, Any]:
    """torch CPU, numpy global and python `random` RNG states in a weights_only-safe form."""
    _, keys, pos, has_gauss, cached = np.random.get_state(legacy=True)
    version, internal, gauss_next = random.getstate()
    return {
        "torch": torch.get_rng_state(),
        # MT19937 keys are uint32; int64 holds them exactly and loads everywhere.
        "numpy": {
            "keys": torch.from_numpy(np.asarray(keys).astype(np.int64)),
            "pos": int(pos),
            "has_gauss": int(has_gauss),
            "cached_gaussian": float(cached),
        },
        "python": {
            "version": int(version),
            "internal": torch.tensor(internal, dtype=torch.int64),
            "gauss_next": gauss_next,
        },
    }


def restore_rng_state(state: dict[str, Any]) -> None:
    """Inverse of `rng_state_to_tensors`."""
    torch.set_rng_state(state["torch"])
    n = state["numpy"]
    np.random.set_state(
        (
            "MT19937",
            n["keys"].numpy().astype(np.uint32),
            n["pos"],
            n["has_gauss"],
            n["cached_gaussian"],
        )
    )
    p = state["python"]
    random.setstate((p["version"], tuple(int(x) for x in p["internal"].tolist()), p["gauss_next"]))


def as_tensors(obj: Any) -> Any:
    """`obj` with every numpy array or scalar inside (dicts, lists, tuples) turned into a
    torch tensor, so a numpy learner's state saves in the weights_only-safe form."""
    if isinstance(obj, np.ndarray):
        return torch.from_numpy(obj.copy())
    if isinstance(obj, np.generic):
        return torch.tensor(obj.item(), dtype=torch.from_numpy(np.asarray(obj)).dtype)
    if isinstance(obj, dict):
        return {k: as_tensors(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return type(obj)(as_tensors(v) for v in obj)
    return obj
