"""Checkpoints: atomic writes, keep the newest N, safe loading, no torch needed.

A checkpoint is one safetensors file, `ckpt-<version>.safetensors`: every array of the state
(numpy arrays, and torch tensors as arrays) is a named tensor of the file, and the rest of
the state's structure (dicts, lists, tuples, numbers, strings, booleans, None) is JSON in the
file's metadata, with a placeholder where each array goes. So:

- writing and reading never import torch (a numpy-backend trainer never does;
  models/numpy_net.py), and a torch trainer's tensors come back as tensors;
- loading never runs pickled code (safetensors holds raw bytes; JSON holds plain data);
- any other object in the state is refused when writing, with its path in the state.

`ckpt-<version>.pt` files written by surge before this format (torch pickles, format 2) are
still read, with torch and `weights_only=True`.
"""

from __future__ import annotations

import contextlib
import json
import random
import re
import sys
from pathlib import Path
from typing import Any

import numpy as np

from surge.errors import UserError
from surge.tracking.files import atomic_writer

CHECKPOINT_DIR = "checkpoints"
SUFFIX = ".safetensors"
_NAME = re.compile(r"^ckpt-(\d+)\.(safetensors|pt)$")
_META_KEY = "surge_state"  # the metadata entry that holds the JSON structure


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


# --- the encoding: arrays out, structure to JSON ---------------------------------------------


def _encode(obj: Any, arrays: dict[str, np.ndarray], path: str) -> Any:
    """The JSON-able skeleton of `obj`; its arrays go into `arrays` under their path."""
    if isinstance(obj, np.ndarray) or (hasattr(obj, "detach") and hasattr(obj, "numpy")):
        tensor = not isinstance(obj, np.ndarray)
        value = obj.detach().cpu().numpy() if tensor else obj
        if value.dtype == object:
            raise TypeError(f"checkpoint state {path or '/'}: object arrays cannot be saved")
        arrays[path] = np.ascontiguousarray(value)
        return {"__tensor__" if tensor else "__array__": path}
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, dict):
        if not all(isinstance(k, str) for k in obj):
            raise TypeError(f"checkpoint state {path or '/'}: dict keys must be strings")
        return {"__dict__": {k: _encode(v, arrays, f"{path}/{k}") for k, v in obj.items()}}
    if isinstance(obj, list | tuple):
        items = [_encode(v, arrays, f"{path}/{i}") for i, v in enumerate(obj)]
        return {"__tuple__": items} if isinstance(obj, tuple) else items
    if obj is None or isinstance(obj, bool | int | float | str):
        return obj
    raise TypeError(f"checkpoint state {path or '/'}: cannot save a {type(obj).__name__}")


def _decode(node: Any, arrays: dict[str, np.ndarray]) -> Any:
    if isinstance(node, list):
        return [_decode(v, arrays) for v in node]
    if not isinstance(node, dict):
        return node
    if "__array__" in node:
        return arrays[node["__array__"]]
    if "__tensor__" in node:
        import torch  # only a state that held tensors (a torch trainer's) needs it back

        return torch.from_numpy(arrays[node["__tensor__"]])
    if "__tuple__" in node:
        return tuple(_decode(v, arrays) for v in node["__tuple__"])
    return {k: _decode(v, arrays) for k, v in node["__dict__"].items()}


# --- files -------------------------------------------------------------------------------------


def save_checkpoint(run_dir: Path, state: dict[str, Any], version: int, keep: int) -> Path:
    """Write run_dir/checkpoints/ckpt-<version>.safetensors atomically; keep only the newest
    `keep` checkpoints."""
    import safetensors.numpy

    if keep < 1:
        raise ValueError(f"keep must be >= 1, got {keep}")
    arrays: dict[str, np.ndarray] = {}
    skeleton = json.dumps(_encode(state, arrays, ""))
    data = safetensors.numpy.save(arrays, metadata={_META_KEY: skeleton})
    folder = Path(run_dir) / CHECKPOINT_DIR
    folder.mkdir(parents=True, exist_ok=True)
    final = folder / f"ckpt-{version:08d}{SUFFIX}"
    with atomic_writer(final, "wb", durable=True) as f:
        f.write(data)
    for _, old in _checkpoints(run_dir)[:-keep]:
        with contextlib.suppress(FileNotFoundError):
            old.unlink()
    return final


def latest_checkpoint(run_dir: Path) -> Path | None:
    """The checkpoint with the highest version, or None if there is none."""
    found = _checkpoints(run_dir)
    return found[-1][1] if found else None


def require_checkpoint(run_dir: Path, to: str) -> Path:
    """The checkpoint with the highest version; a UserError if there is none, saying what it
    was needed for (`to`: "resume from", "evaluate")."""
    checkpoint = latest_checkpoint(run_dir)
    if checkpoint is None:
        raise UserError(
            f"{run_dir} has no checkpoint to {to}",
            "a checkpoint is written every log.checkpoint_interval_s, at the end and on Ctrl+C",
        )
    return checkpoint


def load_checkpoint(path: Path) -> dict[str, Any]:
    """Load a checkpoint; a missing or corrupt file is a UserError."""
    path = Path(path)
    if not path.is_file():
        raise UserError(
            f"checkpoint not found: {path}",
            f"check the path; checkpoints are run_dir/{CHECKPOINT_DIR}/ckpt-<version>{SUFFIX}",
        )
    try:
        state = _load_legacy(path) if path.suffix == ".pt" else _load(path)
    except Exception as e:  # noqa: BLE001 - safetensors, json and torch raise their own errors
        raise UserError(
            f"checkpoint {path} is corrupt or unreadable: {type(e).__name__}: {e}",
            "resume from an older checkpoint in the same directory (delete this file), "
            "or start a new run",
        ) from None
    if not isinstance(state, dict):
        raise UserError(f"checkpoint {path} holds a {type(state).__name__}, not a dict")
    return state


def _load(path: Path) -> Any:
    import safetensors
    import safetensors.numpy

    data = path.read_bytes()
    arrays = safetensors.numpy.load(data)
    with safetensors.safe_open(str(path), framework="np") as f:
        metadata = f.metadata() or {}
    return _decode(json.loads(metadata[_META_KEY]), arrays)


def _load_legacy(path: Path) -> Any:
    import torch

    return torch.load(path, weights_only=True, map_location="cpu")


# --- the RNG states -------------------------------------------------------------------------------


def rng_state() -> dict[str, Any]:
    """The global RNG states: numpy's, python `random`'s, and torch's CPU generator's when
    this process has imported torch (None otherwise: a numpy trainer never draws from it)."""
    _, keys, pos, has_gauss, cached = np.random.get_state(legacy=True)
    version, internal, gauss_next = random.getstate()
    torch = sys.modules.get("torch")
    return {
        "torch": torch.get_rng_state() if torch is not None else None,
        "numpy": {
            "keys": np.asarray(keys).copy(),
            "pos": int(pos),
            "has_gauss": int(has_gauss),
            "cached_gaussian": float(cached),
        },
        "python": {
            "version": int(version),
            "internal": np.asarray(internal, dtype=np.int64),
            "gauss_next": gauss_next,
        },
    }


def restore_rng_state(state: dict[str, Any]) -> None:
    """Inverse of `rng_state` (also reads format-2 checkpoints, whose arrays are tensors)."""

    def array(x: Any) -> np.ndarray:
        return x.numpy() if hasattr(x, "numpy") else np.asarray(x)

    if state.get("torch") is not None:
        import torch

        saved = state["torch"]
        torch.set_rng_state(saved if hasattr(saved, "numpy") else torch.from_numpy(saved))
    n = state["numpy"]
    np.random.set_state(
        (
            "MT19937",
            array(n["keys"]).astype(np.uint32),
            int(n["pos"]),
            int(n["has_gauss"]),
            float(n["cached_gaussian"]),
        )
    )
    p = state["python"]
    internal = tuple(int(x) for x in array(p["internal"]).tolist())
    random.setstate((int(p["version"]), internal, p["gauss_next"]))
