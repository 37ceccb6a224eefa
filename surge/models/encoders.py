"""Encoders: the seam between an observation dict and the MLP torsos.

An encoder maps `dict[str, Tensor]` (keys from `flatten_obs_space`, leading batch dim) to one
flat float32 feature tensor [B, out_dim]. `FlatEncoder` handles vector and discrete fields
with no parameters; `NatureCNN` handles one uint8 image field [C, H, W] (Atari frame stacks).
`make_encoder` picks one from `model.encoder`.
"""

from __future__ import annotations

import functools
import math
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from torch import Tensor, nn

from surge.config.schema import ModelConfig
from surge.envs.spaces import flatten_obs_space
from surge.errors import EnvSpecError


class Encoder(nn.Module):
    """Base class: `forward(obs) -> Tensor [B, out_dim]` in float32.

    `is_torso`: the features are already deep (a CNN's), so the heads sit on them directly
    and `ActorCritic` builds no MLP torso."""

    out_dim: int
    is_torso: bool = False

    def forward(self, obs: dict[str, Tensor]) -> Tensor:
        raise NotImplementedError

    def prepare(self, obs: dict[str, Tensor]) -> dict[str, Tensor]:
        """The same observations in the memory layout `forward` reads fastest. A learner
        calls it once per batch, before it draws minibatches of rows (layout-preserving, as
        `ppo.gather_rows`), so that the rearrangement is not repeated for every minibatch of
        every epoch. Default: unchanged."""
        return obs


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


class NatureCNN(Encoder):
    """The DQN Nature CNN (Mnih et al. 2015) as in CleanRL's ppo_atari: conv 32 8x8/4, conv 64
    4x4/2, conv 64 3x3/1, linear 512, ReLU after each; orthogonal init with gain sqrt(2).

    Input: one uint8 field [B, C, H, W] (values 0..255), scaled by 1/255. The scale is folded
    into the first conv's weights at run time (conv(x / 255, W) == conv(x, W / 255)), which
    saves a full float pass over the batch of frames; the parameters are CleanRL's.

    `channels_last` runs the convolutions in NHWC, the layout oneDNN's CPU kernels prefer
    (no reorder of activations and gradients around every conv): the same maths, a PPO
    update about 30% cheaper on CPU. `bf16` runs the trunk under CPU bfloat16 autocast
    (oneDNN uses AVX512-BF16 where the CPU has it); parameters, gradients and the returned
    features stay float32. benchmarks/learner_speed.py measures both.
    """

    def __init__(
        self,
        obs_space: gym.Space[Any],
        *,
        features: int = 512,
        channels_last: bool = True,
        bf16: bool = False,
    ) -> None:
        super().__init__()
        self.key, shape = _image_field(obs_space)
        c, h, w = shape
        self.conv1 = _orthogonal_conv(c, 32, 8, 4)
        self.conv2 = _orthogonal_conv(32, 64, 4, 2)
        self.conv3 = _orthogonal_conv(64, 64, 3, 1)
        for kernel, stride in ((8, 4), (4, 2), (3, 1)):
            h, w = (h - kernel) // stride + 1, (w - kernel) // stride + 1
        if h < 1 or w < 1:
            raise EnvSpecError(
                f"image observations of shape {shape} are too small for the Nature CNN",
                "use images of at least 36x36 (Atari preprocessing gives 84x84), "
                "or model.encoder=flat",
            )
        self.fc = nn.Linear(64 * h * w, features)
        nn.init.orthogonal_(self.fc.weight, math.sqrt(2.0))
        nn.init.constant_(self.fc.bias, 0.0)
        self.out_dim = features
        self.is_torso = True
        self.channels_last = channels_last
        self.bf16 = bf16
        if channels_last:
            self.to(memory_format=torch.channels_last)  # type: ignore[call-overload]

    def prepare(self, obs: dict[str, Tensor]) -> dict[str, Tensor]:
        if not self.channels_last:
            return obs
        return {**obs, self.key: obs[self.key].contiguous(memory_format=torch.channels_last)}

    def forward(self, obs: dict[str, Tensor]) -> Tensor:
        x = obs[self.key]
        if self.channels_last:  # a no-op for frames from `prepare`
            x = x.contiguous(memory_format=torch.channels_last)
        if not self.bf16:
            return self._trunk(x.to(torch.float32))
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out = self._trunk(x.to(torch.bfloat16))
        return out.to(torch.float32)

    def _trunk(self, x: Tensor) -> Tensor:
        relu = nn.functional.relu
        w1 = self.conv1.weight * (1.0 / 255.0)
        x = relu(nn.functional.conv2d(x, w1, self.conv1.bias, stride=self.conv1.stride))
        x = relu(self.conv2(x))
        x = relu(self.conv3(x))
        out: Tensor = relu(self.fc(x.flatten(1)))
        return out


def _orthogonal_conv(c_in: int, c_out: int, kernel: int, stride: int) -> nn.Conv2d:
    conv = nn.Conv2d(c_in, c_out, kernel, stride)
    nn.init.orthogonal_(conv.weight, math.sqrt(2.0))
    assert conv.bias is not None
    nn.init.constant_(conv.bias, 0.0)
    return conv


def _image_field(obs_space: gym.Space[Any]) -> tuple[str, tuple[int, int, int]]:
    """The key and [C, H, W] shape of the one uint8 image field a CNN can encode."""
    leaves = flatten_obs_space(obs_space)
    if len(leaves) == 1:
        key, space = next(iter(leaves.items()))
        if is_image_space(space):
            c, h, w = space.shape  # type: ignore[misc]
            return key, (c, h, w)
    raise EnvSpecError(
        f"model.encoder=nature_cnn needs one uint8 image observation [C, H, W]; got {obs_space}",
        "use model.encoder=flat (or auto) for this env, or wrap it to return uint8 frame stacks",
    )


def is_image_space(space: gym.Space[Any]) -> bool:
    """A Box of uint8 with three dims [C, H, W]: what `auto` gives the Nature CNN."""
    return isinstance(space, gym.spaces.Box) and space.dtype == np.uint8 and len(space.shape) == 3


def make_encoder(obs_space: gym.Space[Any], cfg: ModelConfig) -> Encoder:
    """The encoder `cfg.encoder` names; `auto` is the Nature CNN for one uint8 image field
    [C, H, W], else the flat encoder."""
    name = cfg.encoder
    if name == "auto":
        leaves = list(flatten_obs_space(obs_space).values())
        name = "nature_cnn" if len(leaves) == 1 and is_image_space(leaves[0]) else "flat"
    if name == "nature_cnn":
        bf16 = cfg.precision == "bfloat16" or (cfg.precision == "auto" and native_bf16())
        return NatureCNN(obs_space, bf16=bf16)
    return FlatEncoder(obs_space)


@functools.cache
def native_bf16() -> bool:
    """Whether this CPU computes bfloat16 dot products natively (AVX512-BF16 or AMX), where
    oneDNN's bf16 kernels are about twice as fast as float32 (Linux: from /proc/cpuinfo)."""
    try:
        flags = Path("/proc/cpuinfo").read_text().split()
    except OSError:
        return False
    return "avx512_bf16" in flags or "amx_bf16" in flags
