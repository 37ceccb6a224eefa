"""What the acting policies of the replay-based algorithms share (models/acting.py): a
network published as one flat vector, acted in numpy for MLPs on flat observations and
through its torch module otherwise.

For an MLP, `params` lists its state-dict names and shapes in `parameters()` order (computed
without torch, so an actor or policy worker never imports it): the vector is cut into views
of those shapes, and the subclass binds them (`bind`). For any other model (a CNN encoder),
the torch module loads the vector. DQN's `QPolicy` (models/q_policy.py) and SAC's `SACPolicy`
(models/sac_policy.py) are the two; PPO's `FlatPolicy` adds observation and value statistics
to its vector and has its own numpy layout (models/numpy_policy.py).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np

from surge.envs.spaces import flatten_obs_space
from surge.models.numpy_policy import flat_fields

Params = list[tuple[str, tuple[int, ...]]]
Observations = dict[str, np.ndarray]
Outputs = tuple[np.ndarray, ...]


class PublishedNet:
    """The loaded version's vector (`flat`) and what acts from it (see the module docstring).
    `inputs`: the observation fields an MLP encodes; `make_net`: the torch module of any
    other model. A subclass sets what `bind` reads, then calls `reload()`."""

    state_size = 0
    """Floats of recurrent state per row (0: feed-forward)."""

    def __init__(
        self,
        obs_space: gym.Space[Any],
        params: Params,
        inputs: list[str],
        make_net: Callable[[], Any],
        activation: str,
        device: str,
    ) -> None:
        self.params, self.device = params, device
        self.relu = activation == "relu"
        self.net: Any = None  # the torch module of a model the numpy path does not cover
        if params:
            encoded = flat_fields(flatten_obs_space(obs_space), inputs)
            assert encoded is not None, "params are given for flat observations only"
            self.fields = encoded[0]
            size = sum(math.prod(shape) for _, shape in params)
        else:
            self.net = make_net().to(device).eval()
            size = sum(p.numel() for p in self.net.parameters())
        self.flat = np.zeros(size, np.float32)

    def reload(self) -> None:
        """Use the parameters now in `flat`."""
        if self.net is not None:
            from surge.models.weights import flat_to_model

            flat_to_model(self.flat, self.net)
            return
        views, offset = [], 0
        for _, shape in self.params:
            n = math.prod(shape)
            views.append(self.flat[offset : offset + n].reshape(shape))
            offset += n
        self.bind(views)

    def bind(self, views: list[np.ndarray]) -> None:
        """Take the MLP's parameters, one view of `flat` per entry of `params`."""
        raise NotImplementedError

    def load(self, flat: np.ndarray) -> None:
        np.copyto(self.flat, flat)
        self.reload()

    @staticmethod
    def linear_pairs(views: list[np.ndarray]) -> list[tuple[np.ndarray, np.ndarray]]:
        """(weight transposed, bias) per linear layer: h @ w.T as in nn.Linear, the weights
        transposed once per version (views, no copy)."""
        return [(views[i].T, views[i + 1]) for i in range(0, len(views), 2)]

    def mlp(self, h: np.ndarray, layers: list[tuple[np.ndarray, np.ndarray]]) -> np.ndarray:
        """The hidden layers' activations of `h` [B, F]."""
        for w, b in layers:
            h = h @ w + b
            h = np.maximum(h, 0.0) if self.relu else np.tanh(h)
        return h

    def torch_inputs(self, obs: Observations) -> dict[str, Any]:
        """The observations as torch tensors on the module's device."""
        import torch

        return {k: torch.from_numpy(v).to(self.device) for k, v in obs.items()}

    def initial_state(self, rows: int) -> np.ndarray | None:
        """The state of fresh episodes, [rows, S] zeros; None for a feed-forward policy."""
        return np.zeros((rows, self.state_size), np.float32) if self.state_size else None
