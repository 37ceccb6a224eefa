"""Moving a model's parameters to and from the flat float32 vector the parameter service holds.

Written out rather than with torch's parameters_to_vector: that needs `view`, which fails on
parameters stored channels-last (the Nature CNN's convolutions are, for speed on CPU).
`tensors_to_flat` and `flat_to_tensors` take any list of parameters: a LoRA run publishes its
adapters alone (surge/llm/lora.py).
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import torch


def count_params(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def model_to_flat(model: torch.nn.Module) -> np.ndarray:
    return tensors_to_flat(model.parameters())


def flat_to_model(flat: np.ndarray, model: torch.nn.Module) -> None:
    flat_to_tensors(flat, model.parameters())


def tensors_to_flat(tensors: Iterable[torch.Tensor]) -> np.ndarray:
    with torch.no_grad():
        parts = [p.detach().reshape(-1).to(torch.float32) for p in tensors]
        return torch.cat(parts).cpu().numpy()  # published from CPU memory, whatever the device


def flat_to_tensors(flat: np.ndarray, tensors: Iterable[torch.Tensor]) -> None:
    source = torch.from_numpy(flat)
    offset = 0
    with torch.no_grad():
        for p in tensors:
            n = p.numel()
            p.copy_(source[offset : offset + n].reshape(p.shape))  # copy_ keeps p's layout
            offset += n
