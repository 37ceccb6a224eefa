"""torch optimizer states in checkpoints: a checkpoint holds arrays under string keys
(tracking/checkpoint.py), and torch keys an optimizer's state by parameter number."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch


def optimizer_state(optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    """The optimizer's state dict with string keys, for a checkpoint."""
    state: dict[str, Any] = _string_keys(optimizer.state_dict())
    return state


def load_optimizer_state(optimizer: torch.optim.Optimizer, state: dict[str, Any]) -> None:
    """Restore what `optimizer_state` saved (its arrays as tensors, its keys as numbers)."""
    optimizer.load_state_dict(_tensors(state))


def _string_keys(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {str(k): _string_keys(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_string_keys(v) for v in obj]
    return obj


def _tensors(obj: Any) -> Any:
    """An optimizer state read back from a checkpoint: arrays as tensors."""
    if isinstance(obj, np.ndarray):
        return torch.from_numpy(obj.copy())
    if isinstance(obj, dict):
        return {
            (int(k) if isinstance(k, str) and k.isdigit() else k): _tensors(v)
            for k, v in obj.items()
        }
    if isinstance(obj, list):
        return [_tensors(v) for v in obj]
    return obj
