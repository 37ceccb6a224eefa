"""Image observations: their layout, and which encoder `model.encoder: auto` gives them.

Torch-free, so the numpy policy, the learner's backend choice and the controller can decide
without building a model. The rules:

- An image is a uint8 Box with three dims, the only observation field.
- Layout (`model.image_layout: auto`): `[H, W, C]` when the last dim is at most 4 and the
  first is larger (MiniGrid's (7, 7, 3), RGB frames (96, 96, 3)); otherwise `[C, H, W]`
  (Atari frame stacks (4, 84, 84), torch's convention). Set `model.image_layout` when the
  guess is wrong, e.g. an [H, W, C] image with more than 4 channels.
- Size (the smaller of H and W): at least 36 -> `nature_cnn` (Atari's 84x84); 7 to 35 ->
  `small_cnn` (MiniGrid's 7x7 view); below 7 no CNN fits: an EnvSpecError says to use
  `model.encoder=flat`.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

from surge.config.schema import ModelConfig
from surge.envs.spaces import flatten_obs_space
from surge.errors import EnvSpecError

NATURE_CNN_MIN = 36  # 8x8/4, 4x4/2, 3x3/1 convs leave 1x1 of a 36x36 image
SMALL_CNN_MIN = 7  # 2x2 conv, 2x2 max-pool, 2x2 conv, 2x2 conv leave 1x1 of a 7x7 image
MIN_SIZE = {"nature_cnn": NATURE_CNN_MIN, "small_cnn": SMALL_CNN_MIN}

SIZE_RULE = (
    f"model.encoder=auto picks nature_cnn for images of at least {NATURE_CNN_MIN}x"
    f"{NATURE_CNN_MIN} (Atari's 84x84), small_cnn for {SMALL_CNN_MIN}x{SMALL_CNN_MIN} to "
    f"{NATURE_CNN_MIN - 1}x{NATURE_CNN_MIN - 1} (MiniGrid's 7x7 view), and needs "
    "model.encoder=flat below that"
)


def is_image_space(space: gym.Space[Any]) -> bool:
    """A Box of uint8 with three dims: an image, [C, H, W] or [H, W, C]."""
    return isinstance(space, gym.spaces.Box) and space.dtype == np.uint8 and len(space.shape) == 3


def image_layout(shape: tuple[int, ...], choice: str = "auto") -> str:
    """`chw` or `hwc`: `choice` unless it is `auto`, else guessed from the shape (see above)."""
    if choice != "auto":
        return choice
    return "hwc" if shape[-1] <= 4 < shape[0] else "chw"


def chw(shape: tuple[int, ...], layout: str) -> tuple[int, int, int]:
    """The [C, H, W] sizes of an image of this shape and layout."""
    a, b, c = shape
    return (c, a, b) if layout == "hwc" else (a, b, c)


def image_field(obs_space: gym.Space[Any]) -> tuple[str, gym.spaces.Box] | None:
    """The key and space of the observation if it is one image field, else None."""
    leaves = flatten_obs_space(obs_space)
    if len(leaves) != 1:
        return None
    key, space = next(iter(leaves.items()))
    if isinstance(space, gym.spaces.Box) and is_image_space(space):
        return key, space
    return None


GRID_MIN = 3


def grid_field(obs_space: gym.Space[Any]) -> tuple[str, gym.spaces.Box] | None:
    """The key and space of the observation's one three-dimensional Box field of any dtype (a
    board game's grid), ignoring an `action_mask`; None if there is not exactly one."""
    leaves = {k: v for k, v in flatten_obs_space(obs_space).items() if k != "action_mask"}
    grids = [
        (k, v) for k, v in leaves.items() if isinstance(v, gym.spaces.Box) and len(v.shape) == 3
    ]
    return grids[0] if len(grids) == 1 and len(leaves) == 1 else None


def choose_encoder(obs_space: gym.Space[Any], cfg: ModelConfig) -> str:
    """The encoder `cfg.encoder` resolves to: `flat`, `nature_cnn` or `small_cnn`.

    `auto`: a CNN by image size for one image field, else `flat`. Raises EnvSpecError when
    the image is too small for the CNN (chosen or named)."""
    if cfg.encoder == "grid_cnn":
        grid = grid_field(obs_space)
        if grid is None:
            raise EnvSpecError(
                f"model.encoder=grid_cnn needs one grid observation (a 3-D Box, [H, W, C] or "
                f"[C, H, W], beside at most an action_mask); got {obs_space}",
                "use model.encoder=flat (or auto) for this env",
            )
        _, h, w = chw(grid[1].shape, image_layout(grid[1].shape, cfg.image_layout))
        if min(h, w) < GRID_MIN:
            raise EnvSpecError(
                f"model.encoder=grid_cnn: a {h}x{w} grid is smaller than {GRID_MIN}x{GRID_MIN}",
                "use model.encoder=flat, or model.image_layout if the layout is read wrongly",
            )
        return "grid_cnn"
    field = image_field(obs_space)
    if cfg.encoder == "flat" or (cfg.encoder == "auto" and field is None):
        return "flat"
    if field is None:  # a CNN named for a non-image observation
        raise EnvSpecError(
            f"model.encoder={cfg.encoder} needs one uint8 image observation ([C, H, W] or "
            f"[H, W, C]); got {obs_space}",
            "use model.encoder=flat (or auto) for this env, or wrap it to return uint8 images",
        )
    space = field[1]
    layout = image_layout(space.shape, cfg.image_layout)
    _, h, w = chw(space.shape, layout)
    if cfg.encoder != "auto":
        name = cfg.encoder
    elif min(h, w) >= NATURE_CNN_MIN:
        name = "nature_cnn"
    else:
        name = "small_cnn"
    if min(h, w) < MIN_SIZE[name]:
        guessed = " (guessed)" if cfg.image_layout == "auto" else ""
        raise EnvSpecError(
            f"model.encoder={cfg.encoder}: image observations of shape {space.shape}, read as "
            f"{layout.upper()}{guessed}: {h}x{w}, are too small for {name} (it needs at least "
            f"{MIN_SIZE[name]}x{MIN_SIZE[name]})",
            f"{SIZE_RULE}; set model.encoder to one that fits (flat takes any shape), or "
            "model.image_layout=hwc / chw if the layout is read wrongly",
        )
    return name
