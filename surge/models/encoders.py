"""Encoders: the seam between an observation dict and the MLP torsos.

An encoder maps `dict[str, Tensor]` (keys from `flatten_obs_space`, leading batch dim) to one
flat float32 feature tensor [B, out_dim]. `FlatEncoder` handles vector and discrete fields
with no parameters; `NatureCNN` handles one uint8 image field [C, H, W] of at least 36x36
(Atari frame stacks), `SmallCNN` smaller ones from 7x7 (MiniGrid). `make_encoder` picks one
from `model.encoder`; surge.models.images has the rules for `auto`.
"""

from __future__ import annotations

import math
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from torch import Tensor, nn

from surge.config.schema import ModelConfig
from surge.devices import cpu_bfloat16
from surge.envs.spaces import OBS_KEY, flatten_obs_space
from surge.errors import EnvSpecError
from surge.models.images import SIZE_RULE, choose_encoder, grid_field, image_field, image_layout
from surge.models.images import is_image_space as is_image_space  # re-exported


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
    """Casts each field to float32 (the module's dtype: a float64 copy, made by `.double()`,
    serves as a reference in the tests), flattens it per row, and concatenates the fields.

    Box fields (any dtype, including uint8; no rescaling) are flattened; Discrete fields
    (int64 [B]) become one-hot vectors of size n (the space's `start` is subtracted first).
    Fields are concatenated in sorted key order so the feature layout does not depend on the
    order in which a Dict space lists its keys.
    """

    def __init__(self, obs_space: gym.Space[Any]) -> None:
        super().__init__()
        leaves = flatten_obs_space(obs_space)
        self.dtype = torch.get_default_dtype()
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

    def _apply(self, fn: Any, recurse: bool = True) -> FlatEncoder:
        # .double() / .to(dtype) convert parameters; this encoder has none, so it follows
        # the conversion by applying it to a probe tensor
        self.dtype = fn(torch.empty(0, dtype=self.dtype)).dtype
        return super()._apply(fn, recurse)  # type: ignore[no-any-return]

    def forward(self, obs: dict[str, Tensor]) -> Tensor:
        parts = [self._encode(obs[key], n, start) for key, n, start in self._fields]
        return parts[0] if len(parts) == 1 else torch.cat(parts, dim=-1)

    def _encode(self, x: Tensor, n: int, start: int) -> Tensor:
        if n:
            idx = x.long() - start if start else x.long()
            return nn.functional.one_hot(idx.reshape(x.shape[0]), n).to(self.dtype)
        x = x.reshape(x.shape[0], -1)
        return x if x.dtype == self.dtype else x.to(self.dtype)


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
    features stay float32. benchmarks/learner_speed.py measures both. On a CUDA device the
    trunk runs under CUDA bfloat16 autocast instead by `cuda_precision` (`auto`: where the
    GPU computes bf16, asked when the first frames arrive there, so that building the model
    never initialises CUDA in a process that forks workers).
    """

    def __init__(
        self,
        obs_space: gym.Space[Any],
        *,
        features: int = 512,
        channels_last: bool = True,
        bf16: bool = False,
        cuda_precision: str = "float32",
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
        self.cuda_precision = cuda_precision
        self._cuda_bf16: bool | None = None
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
        bf16 = self.bf16 if x.is_cpu else self._on_cuda_bf16()
        if not bf16:
            return self._trunk(x.to(torch.float32))
        with torch.autocast(x.device.type, dtype=torch.bfloat16):
            out = self._trunk(x.to(torch.bfloat16))
        return out.to(torch.float32)

    def _on_cuda_bf16(self) -> bool:
        if self._cuda_bf16 is None:
            auto = self.cuda_precision == "auto" and torch.cuda.is_bf16_supported()
            self._cuda_bf16 = self.cuda_precision == "bfloat16" or auto
        return self._cuda_bf16

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


def _image_field(
    obs_space: gym.Space[Any], name: str = "nature_cnn"
) -> tuple[str, tuple[int, int, int]]:
    """The key and [C, H, W] shape of the one uint8 image field [C, H, W] a CNN can encode
    (make_encoder gives it [H, W, C] images through `ChannelsFirst`)."""
    field = image_field(obs_space)
    if field is not None:
        c, h, w = field[1].shape
        return field[0], (c, h, w)
    raise EnvSpecError(
        f"model.encoder={name} needs one uint8 image observation [C, H, W]; got {obs_space}",
        "use model.encoder=flat (or auto) for this env, or wrap it to return uint8 images",
    )


class SmallCNN(Encoder):
    """MiniGrid's baseline CNN (rl-starter-files' ACModel, the minigrid docs' training
    example) for small images, 7x7 up to 35x35: conv 16 2x2, ReLU, max-pool 2x2, conv 32
    2x2, ReLU, conv 64 2x2, ReLU, flattened (64 features for MiniGrid's 7x7 view). Not a
    torso: `ActorCritic` puts the MLP torso(s) of `model.hidden_sizes` on its features, as
    the baseline puts a 64-unit tanh layer under each head. Orthogonal init with gain
    sqrt(2), as the Nature CNN.

    Input: one uint8 field [B, C, H, W], cast to float32 and multiplied by `scale`, by
    default 1: raw values, as the baseline. Small images in RL are mostly symbolic grids:
    MiniGrid's channels are object, colour and state indices (0-10, 0-5, 0-2), and dividing
    them by 255 as pixels would shrink them to about 0.04; on MiniGrid-Empty-8x8 the raw
    values learn faster (docs/environments.md has the measurement). For small pixel images
    pass `scale=1/255`.
    """

    def __init__(self, obs_space: gym.Space[Any], *, scale: float = 1.0) -> None:
        super().__init__()
        self.key, shape = _image_field(obs_space, "small_cnn")
        c, h, w = shape
        h, w = (h - 1) // 2 - 2, (w - 1) // 2 - 2
        if h < 1 or w < 1:
            raise EnvSpecError(
                f"image observations of shape {shape} are too small for small_cnn",
                f"{SIZE_RULE}; use model.encoder=flat for smaller images",
            )
        self.conv1 = _orthogonal_conv(c, 16, 2, 1)
        self.conv2 = _orthogonal_conv(16, 32, 2, 1)
        self.conv3 = _orthogonal_conv(32, 64, 2, 1)
        self.scale = scale
        self.out_dim = 64 * h * w

    def forward(self, obs: dict[str, Tensor]) -> Tensor:
        relu = nn.functional.relu
        x = obs[self.key].to(torch.float32)
        if self.scale != 1.0:
            x = x * self.scale
        x = nn.functional.max_pool2d(relu(self.conv1(x)), 2)
        x = relu(self.conv3(relu(self.conv2(x))))
        return x.flatten(1)


class GridCNN(Encoder):
    """A board game's grid (`model.encoder: grid_cnn`): 3x3 convolutions with zero padding of
    one, so every layer keeps the grid's size and each cell sees its neighbours (rows,
    columns and diagonals alike), ReLU after each, flattened. Not a torso: the MLP torso(s)
    sit on its features. Input: one field [B, C, H, W] of any dtype, cast to float32 (raw
    values: boards are 0/1 planes or small piece codes). Orthogonal init with gain sqrt(2).
    """

    def __init__(self, obs_space: gym.Space[Any], channels: list[int]) -> None:
        super().__init__()
        field = grid_field(obs_space)
        assert field is not None  # choose_encoder checked it
        self.key = field[0]
        c, h, w = field[1].shape
        convs = []
        for out in channels:
            conv = nn.Conv2d(c, out, 3, 1, padding=1)
            nn.init.orthogonal_(conv.weight, math.sqrt(2.0))
            assert conv.bias is not None
            nn.init.constant_(conv.bias, 0.0)
            convs.append(conv)
            c = out
        self.convs = nn.ModuleList(convs)
        self.out_dim = c * h * w
        self.grid_shape = (c, h, w)
        """[C, H, W] of the features before flattening (the output is their `flatten(1)`)."""

    def grid_input(self, obs: dict[str, Tensor]) -> Tensor:
        """The board it reads, [B, C, H, W]."""
        return obs[self.key]

    def forward(self, obs: dict[str, Tensor]) -> Tensor:
        dtype = next(self.parameters()).dtype  # float32 (float64 in reference tests)
        x = self.grid_input(obs).to(dtype)
        for conv in self.convs:
            x = nn.functional.relu(conv(x))
        return x.flatten(1)


class ChannelsFirst(Encoder):
    """Runs a [C, H, W] image encoder on an [H, W, C] field: permutes the field to [B, C, H,
    W] (a view, no copy; an NHWC batch viewed so is already in channels_last memory format).
    `inner` is built on the transposed Box alone, so it reads the field as `obs`."""

    def __init__(self, inner: Encoder, key: str) -> None:
        super().__init__()
        self.inner = inner
        self.key = key
        self.out_dim = inner.out_dim
        self.is_torso = inner.is_torso

    def grid_input(self, obs: dict[str, Tensor]) -> Tensor:
        """The [B, C, H, W] view of the field (for a `GridCNN` inside)."""
        return obs[self.key].permute(0, 3, 1, 2)

    def forward(self, obs: dict[str, Tensor]) -> Tensor:
        return self.inner({OBS_KEY: self.grid_input(obs)})


def make_encoder(obs_space: gym.Space[Any], cfg: ModelConfig) -> Encoder:
    """The encoder `cfg.encoder` names; `auto` picks one from the observation
    (`surge.models.images`: a CNN by image size for one uint8 image field, else flat).
    [H, W, C] images (`model.image_layout`) reach the CNN through `ChannelsFirst`."""
    name = choose_encoder(obs_space, cfg)
    if name == "flat":
        return FlatEncoder(obs_space)
    if name == "grid_cnn":
        grid = grid_field(obs_space)
        assert grid is not None
        key, space = grid
        if image_layout(space.shape, cfg.image_layout) == "hwc":
            t = (2, 0, 1)
            low, high = space.low.transpose(t), space.high.transpose(t)
            chw_space = gym.spaces.Box(low, high, None, space.dtype)  # type: ignore[arg-type]
            return ChannelsFirst(GridCNN(chw_space, cfg.grid_channels), key)
        return GridCNN(gym.spaces.Dict({key: space}), cfg.grid_channels)
    field = image_field(obs_space)
    assert field is not None  # choose_encoder checked it
    key, space = field
    hwc = image_layout(space.shape, cfg.image_layout) == "hwc"
    if hwc:
        t = (2, 0, 1)
        obs_space = gym.spaces.Box(space.low.transpose(t), space.high.transpose(t), None, np.uint8)
    encoder: Encoder
    if name == "nature_cnn":
        bf16 = cpu_bfloat16(cfg.precision)
        encoder = NatureCNN(obs_space, bf16=bf16, cuda_precision=cfg.precision)
    else:
        encoder = SmallCNN(obs_space)
    return ChannelsFirst(encoder, key) if hwc else encoder
