"""A board's grid in numpy (acting): the `grid_cnn` encoder's convolutions and, with
`model.grid_actions`, the logits read per cell (models/grid_actions.py is the torch side).
No torch import: policy workers and actors act through models/numpy_policy.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True)
class GridLayout:
    """The `grid_cnn` encoder (models/encoders.py `GridCNN`) as the numpy policy runs it."""

    key: str
    hwc: bool  # the field is [H, W, C] (else [C, H, W])
    prefix: str  # its parameters' names: `encoder.convs` or `encoder.inner.convs`
    channels: tuple[int, ...]
    actions: str = "none"  # `model.grid_actions`: logits read per cell (GridLogits)


class GridFeatures:
    """`GridCNN` in numpy (acting): [B, features] from the grid field [B, H, W, C] (or [B, C,
    H, W]). Each 3x3 convolution with zero padding reads a padded copy of its input (the
    buffers are kept per batch size, their borders stay zero). One row (an opponent's move)
    is one matmul over the cells' 3x3 patches (im2col); batches of `SHIFTED_FROM` rows and
    more sum nine matmuls of shifted views, which copies no patches: measured on this
    machine, 213 vs 301 us for one row and 1.4 vs 0.57 ms for 16 rows (connect four, 32 and
    32 channels)."""

    SHIFTED_FROM = 8

    def __init__(self, grid: GridLayout) -> None:
        self.grid = grid
        self._padded: dict[tuple[int, int], np.ndarray] = {}
        self.layers: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []

    def load(self, weights: dict[str, np.ndarray]) -> None:
        """Arrange a version's convolution weights: per layer, [C * 9, out] for im2col,
        [9, C, out] for the shifted sums, and the bias."""
        g = self.grid
        self.layers = []
        for i, out in enumerate(g.channels):
            w = weights[f"{g.prefix}.{i}.weight"]  # [out, C, 3, 3]
            self.layers.append(
                (
                    w.reshape(out, -1).T.copy(),
                    np.ascontiguousarray(w.transpose(2, 3, 1, 0).reshape(9, -1, out)),
                    weights[f"{g.prefix}.{i}.bias"],
                )
            )

    def __call__(self, x: Any) -> np.ndarray:
        return self.flatten(self.maps(x))

    @staticmethod
    def flatten(maps: np.ndarray) -> np.ndarray:
        """[B, features] from [B, H, W, C] maps, in the order torch flattens [B, C, H, W]."""
        return maps.transpose(0, 3, 1, 2).reshape(len(maps), -1)

    def maps(self, x: Any) -> np.ndarray:
        """The last layer's features, [B, H, W, C]."""
        x = np.asarray(x, np.float32)
        if not self.grid.hwc:
            x = x.transpose(0, 2, 3, 1)
        b, h, w, _ = x.shape
        for k, (matrix, shifted, bias) in enumerate(self.layers):
            padded = self._padded.get((b, k))
            if padded is None:
                padded = self._padded[(b, k)] = np.zeros((b, h + 2, w + 2, x.shape[-1]), np.float32)
            padded[:, 1:-1, 1:-1] = x
            if b < self.SHIFTED_FROM:
                patches = np.lib.stride_tricks.sliding_window_view(padded, (3, 3), axis=(1, 2))
                z = patches.reshape(b * h * w, -1) @ matrix  # [B*H*W, C, 3, 3]: torch's order
                z += bias
                x = np.maximum(z, 0.0, out=z).reshape(b, h, w, -1)
            else:
                z = np.empty((b, h, w, len(bias)), np.float32)
                z[:] = bias
                for j in range(9):
                    dy, dx = divmod(j, 3)
                    z += padded[:, dy : dy + h, dx : dx + w] @ shifted[j]
                x = np.maximum(z, 0.0, out=z)
        return x


class GridLogits:
    """`GridActionHead` in numpy: a 1x1 convolution of the last grid features (one score
    per cell) read at the cell each action plays, plus the action's bias."""

    def __init__(self, grid: GridLayout) -> None:
        self.grid = grid
        self.weight = np.zeros(0, np.float32)
        self.cell_bias = 0.0
        self.bias = np.zeros(0, np.float32)

    def load(self, weights: dict[str, np.ndarray]) -> None:
        self.weight = weights["grid_head.cells.weight"].reshape(-1)  # [C]
        self.cell_bias = float(weights["grid_head.cells.bias"][0])
        self.bias = weights["grid_head.bias"]

    def __call__(self, maps: np.ndarray, board: Any) -> np.ndarray:
        """Logits [B, n] from the features [B, H, W, C] and the board they came from."""
        scores = maps @ self.weight  # [B, H, W]
        scores += self.cell_bias
        b, h, w = scores.shape
        if self.grid.actions == "cells":
            return scores.reshape(b, h * w) + self.bias
        board = np.asarray(board)
        empty = ~(board != 0).any(axis=-1 if self.grid.hwc else 1)  # [B, H, W]
        rows = np.maximum(empty.sum(1) - 1, 0)  # each column's lowest empty cell
        return scores[np.arange(b)[:, None], rows, np.arange(w)] + self.bias
