"""The weights a learner publishes are the weights its actors act with: `FlatParameters`
keeps channels-last convolution weights in memory order, and what reaches the parameter
service must still be `parameters()` order, each tensor row-major (models/weights.py)."""

from __future__ import annotations

from pathlib import Path

import gymnasium as gym
import numpy as np
import torch

from surge.algos.flat_params import FlatParameters
from surge.config.load import load_config
from surge.envs.spaces import EnvInfo
from surge.learners.q_backends import TorchQ
from surge.models.q_network import QNetwork
from surge.models.q_policy import QPolicy
from surge.models.weights import flat_to_model, model_to_flat
from surge.workers.base import RunContext

FRAMES = gym.spaces.Dict({"obs": gym.spaces.Box(0, 255, (4, 84, 84), np.uint8)})


def test_published_is_the_logical_layout_and_a_view_when_nothing_is_channels_last() -> None:
    cfg, _ = load_config("breakout-apex", ["model.precision=float32"])
    torch.manual_seed(0)
    cnn = QNetwork(FRAMES, 4, cfg.model, dueling=True)
    assert not cnn.encoder.conv1.weight.is_contiguous()  # channels-last, as oneDNN likes
    flat = FlatParameters(cnn)
    with torch.no_grad():
        flat.data.add_(0.01 * torch.randn_like(flat.data))  # not the initial weights
    np.testing.assert_array_equal(flat.published().numpy(), model_to_flat(cnn))
    assert not np.array_equal(flat.data.numpy(), model_to_flat(cnn))  # memory order differs

    mlp = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Tanh(), torch.nn.Linear(4, 2))
    flat_mlp = FlatParameters(mlp)
    assert flat_mlp.published().data_ptr() == flat_mlp.data.data_ptr()  # no copy


def test_dqn_actors_act_on_the_torch_learners_q_values(tmp_path: Path) -> None:
    cfg, _ = load_config("breakout-apex", ["model.precision=float32"])
    env = EnvInfo(FRAMES, gym.spaces.Discrete(4))
    learner = TorchQ(RunContext(cfg, env, tmp_path, 0))
    with torch.no_grad():
        learner.flat.data.add_(0.01 * torch.randn_like(learner.flat.data))
    actor = QPolicy(FRAMES, env.action_space, cfg, seed=0)
    actor.load(learner.parameters())
    frames = np.random.default_rng(0).integers(0, 256, (8, 4, 84, 84), dtype=np.uint8)
    acted, _ = actor.q_values({"obs": frames})
    with torch.no_grad():
        learned = learner.q({"obs": torch.from_numpy(frames)}).numpy()
    np.testing.assert_allclose(acted, learned, rtol=1e-5, atol=1e-5)
    # and a network built from the published vector is the learner's
    copy = QNetwork(FRAMES, 4, cfg.model, dueling=True)
    flat_to_model(learner.parameters(), copy)
    for a, b in zip(copy.parameters(), learner.q.parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
