"""What the algorithm plug-ins share about their checkpoints: whether a saved model fits the
one a config builds, and the flat vector a saved torch model publishes.

MLPs are compared by parameter names and shapes, without importing torch (the controller
stays small); a CNN's `load_state_dict` says what differs.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from surge.errors import UserError


def params_misfit(want: Iterable[tuple[str, tuple[int, ...]]], saved: dict[str, Any]) -> str:
    """Why `saved` (a state dict) does not hold the parameters `want` lists (name, shape):
    the first few that differ, or "" when it does."""
    wanted = dict(want)
    have = {name: tuple(np.shape(value)) for name, value in saved.items()}
    if wanted == have:
        return ""
    diff = sorted(set(wanted.items()) ^ set(have.items()))
    return f"parameters differ: {', '.join(f'{n} {s}' for n, s in diff[:6])}"


def require_fit(checkpoint: Path | str, what: str, problem: str) -> None:
    """A UserError when `problem` (a misfit) is not "": the checkpoint does not fit `what`."""
    if problem:
        raise UserError(
            f"{checkpoint} does not fit the {what} this config builds: {problem}",
            "resume with the env and model settings the run was trained with",
        )


def torch_flat(net: Any, saved: dict[str, Any]) -> np.ndarray:
    """The flat vector (models/weights.py order) of torch module `net` holding `saved`."""
    import torch

    from surge.models.weights import model_to_flat

    net.load_state_dict({k: torch.as_tensor(v) for k, v in saved.items()})
    return model_to_flat(net)
