"""A learner's batch on its device, copied once per update.

On the CPU a batch is the sample stream's shared memory itself: `torch.from_numpy` views,
no copy. On a CUDA device each array is copied once per update, first into a page-locked
(pinned) host buffer kept from update to update, then to the device without blocking, so
the copies of a batch's arrays queue on the copy engine while the host goes on issuing
them. A pinned buffer is rewritten only by the next update's copy, after that update has
read a metric off the device (every update does), so its previous transfer has finished.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor


class DeviceStaging:
    """Call `begin()` before each batch, then the instance on each of its arrays, in the
    same order every batch (a batch's layout is fixed): array k of a batch reuses the
    pinned buffer of array k of the last one."""

    def __init__(self, device: torch.device | str) -> None:
        self.device = torch.device(device)
        self._pinned: list[Tensor] = []
        self._next = 0

    def begin(self) -> None:
        self._next = 0

    def __call__(self, array: np.ndarray) -> Tensor:
        host = torch.from_numpy(array)
        if self.device.type == "cpu":
            return host  # shares the stream's memory, as the learner always read it
        k = self._next
        self._next += 1
        if k == len(self._pinned):
            self._pinned.append(torch.empty(0, dtype=host.dtype).pin_memory())
        buffer = self._pinned[k]
        if buffer.shape != host.shape or buffer.dtype != host.dtype:
            buffer = self._pinned[k] = torch.empty(host.shape, dtype=host.dtype).pin_memory()
        buffer.copy_(host)
        return buffer.to(self.device, non_blocking=True)
