"""A learner's batch on its device (surge/algos/staging.py). On the CPU: the stream's own
memory, no copy (what the learners always read). The CUDA copy is tests/cuda/."""

from __future__ import annotations

import numpy as np
import torch

from surge.algos.staging import DeviceStaging
from surge.learners.ppo import slot_batch


def test_on_the_cpu_a_batch_is_the_streams_memory() -> None:
    staging = DeviceStaging("cpu")
    arrays = {
        "obs/obs": np.arange(5 * 2 * 3, dtype=np.float32).reshape(5, 2, 3),
        "action": np.zeros((4, 2), np.int64),
        "logp": np.zeros((4, 2), np.float32),
        "value": np.zeros((4, 2), np.float32),
        "reward": np.ones((4, 2), np.float32),
        "terminated": np.zeros((4, 2), bool),
        "truncated": np.zeros((4, 2), bool),
    }
    staging.begin()
    batch = slot_batch(arrays, 4, staging)
    assert batch.obs["obs"].shape == (4, 2, 3) and batch.last_obs["obs"].shape == (2, 3)
    assert batch.rewards.device == torch.device("cpu")
    arrays["reward"][1, 1] = 7.0  # a write to the stream is seen: the same memory
    arrays["obs/obs"][4, 0, 0] = -1.0
    assert float(batch.rewards[1, 1]) == 7.0 and float(batch.last_obs["obs"][0, 0]) == -1.0
