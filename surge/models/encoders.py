"""Encoders: the seam between an observation dict and the MLP torsos.

An encoder maps `dict[str, Tensor]` (keys from `flatten_obs_space`, leading batch dim) to one
flat float32 feature tensor [B, out_dim]. `FlatEncoder` handles vector and discrete fields
with no parameters; image fields will get a CNN encoder later, passed to `ActorCritic` through
its `encoder` argument, without touching the torsos or heads.
"""

from __future__ import annotations

import math
from typing import Any

import gymnasium as gym
import torch
from torch import Tensor, nn

from surge.envs.spaces import flatten_obs_space


class Encoder(nn.Module):
    """Base class: `forward(obs) -> Tensor [B, out_dim]` in float32."""

    out_dim: int

    def forward(self, obs: dict[str, Tensor]) -> Tensor:
        raise NotImplementedError


class FlatEncoder(Encoder):
    """Casts each field to float32, flattens it per row, and concatenates the fields.

    Box fields (any dtype, including uint8; no rescaling) are flattened; Discrete fields
    (int64 [B]) become one-hot vectors of size n (the space's `start` is subtracted first).
    Fields are concatenated in sorted key order so the feature layout does not depend on the
    order in which a Dict space lists its keys.
    """

    def __init__(self, obs_space: gym.Space[Any]) -> None:
        super().__init__()
        leaves = flatten_obs_space(obs_space)
        # (key, one-hot size or 0 for Box, discrete start): precomputed for the hot path.
        self._fields: list[tuple[str, int, int]] = []
        dim = 0
        for key in sorted(leaves):
            space = leaves[key]
            if isinstance(space, gym.spaces.Discrete):
                self._fields.append((key, int(space.n), int(space.start)))
                dim += int(space.n)
            else:
                assert isinstance(space, gym.spaces.Box)
                self._fields.append((key, 0, 0))
                dim += math.prod(space.shape)
        self.out_dim = dim

    def forward(self, obs: dict[str, Tensor]) -> Tensor:
        parts = [self._encode(obs[key], n, start) for key, n, start in self._fields]
        return parts[0] if len(parts) == 1 else torch.cat(parts, dim=-1)

    @staticmethod
    def _encode(x: Tensor, n: int, start: int) -> Tensor:
        if n:
            idx = x.long() - start if start else x.long()
            return nn.functional.one_hot(idx.reshape(x.shape[0]), n).to(torch.float32)
        x = x.reshape(x.shape[0], -1)
        return x if x.dtype == torch.float32 else x.to(torch.float32)
