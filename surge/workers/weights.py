"""Moving a model's parameters to and from the flat float32 vector the parameter service holds."""

from __future__ import annotations

import numpy as np
import torch


def count_params(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def model_to_flat(model: torch.nn.Module) -> np.ndarray:
    with torch.no_grad():
        return torch.nn.utils.parameters_to_vector(model.parameters()).to(torch.float32).numpy()


def flat_to_model(flat: np.ndarray, model: torch.nn.Module) -> None:
    with torch.no_grad():
        torch.nn.utils.vector_to_parameters(torch.from_numpy(flat), model.parameters())
