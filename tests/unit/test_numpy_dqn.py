"""The numpy DQN update (surge/algos/numpy_dqn.py) against the torch one it replaces for MLP
Q-networks: the same loss, TD errors and weights after a few Adam steps, for plain and
dueling heads, double and plain targets, Huber and squared loss, importance weights and
gradient clipping."""

from __future__ import annotations

import copy

import gymnasium as gym
import numpy as np
import pytest
import torch

from surge.algos.dqn import double_q_target, q_learning_target, td_loss
from surge.algos.numpy_dqn import NumpyQLearner, QLayout
from surge.config.schema import ModelConfig
from surge.models.q_network import QNetwork
from surge.models.q_policy import q_params
from surge.models.weights import model_to_flat

OBS, ACTIONS, B = 5, 3, 32


def _torch_steps(net: QNetwork, batches, double: bool, loss: str, clip: float | None):  # type: ignore[no-untyped-def]
    target_net = copy.deepcopy(net).requires_grad_(False)
    opt = torch.optim.Adam(net.parameters(), lr=1e-2, eps=1e-5)
    out = []
    for x, x_next, a, r, d, w in batches:
        q = net({"obs": torch.from_numpy(x)})
        q_taken = q.gather(1, torch.from_numpy(a).reshape(-1, 1)).squeeze(1)
        with torch.no_grad():
            nxt = {"obs": torch.from_numpy(x_next)}
            qn = target_net(nxt)
            r_t, d_t = torch.from_numpy(r), torch.from_numpy(d)
            y = (
                double_q_target(net(nxt), qn, r_t, d_t)
                if double
                else q_learning_target(qn, r_t, d_t)
            )
        value, td = td_loss(q_taken, y, None if w is None else torch.from_numpy(w), loss)
        opt.zero_grad()
        value.backward()
        if clip is not None:
            torch.nn.utils.clip_grad_norm_(net.parameters(), clip)
        opt.step()
        out.append((value.item(), td.numpy()))
    return out


@pytest.mark.parametrize("dueling", [False, True])
@pytest.mark.parametrize("double", [False, True])
@pytest.mark.parametrize(("loss", "weighted", "clip"), [("huber", False, None), ("mse", True, 0.5)])
def test_numpy_update_matches_torch(
    dueling: bool, double: bool, loss: str, weighted: bool, clip: float | None
) -> None:
    model = ModelConfig(hidden_sizes=[16, 8], activation="relu")
    space = gym.spaces.Box(-1, 1, (OBS,))
    torch.manual_seed(0)
    net = QNetwork(space, ACTIONS, model, dueling)
    layout = QLayout(q_params(space, ACTIONS, model, dueling), dueling, relu=True)
    learner = NumpyQLearner(layout, model_to_flat(net), 1e-2, 1e-5, double, loss, clip)
    rng = np.random.default_rng(1)
    batches = [
        (
            rng.normal(size=(B, OBS)).astype(np.float32),
            rng.normal(size=(B, OBS)).astype(np.float32),
            rng.integers(0, ACTIONS, B),
            rng.normal(size=B).astype(np.float32) * 3,
            (rng.random(B) < 0.9).astype(np.float32) * 0.99,
            rng.random(B).astype(np.float32) if weighted else None,
        )
        for _ in range(4)
    ]
    want = _torch_steps(net, batches, double, loss, clip)
    for (x, x_next, a, r, d, w), (loss_t, td_t) in zip(batches, want, strict=True):
        value, _, td = learner.update(x, x_next, a, r, d, w)
        assert value == pytest.approx(loss_t, rel=1e-5, abs=1e-6)
        np.testing.assert_allclose(td, td_t, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(learner.flat, model_to_flat(net), rtol=1e-4, atol=1e-5)


def test_target_sync_copies_or_averages() -> None:
    layout = QLayout([("head.weight", (2, 3)), ("head.bias", (2,))], False, relu=True)
    learner = NumpyQLearner(layout, np.zeros(8, np.float32), 1e-3, 1e-8, False, "mse", None)
    learner.flat[:] = 1.0
    learner.sync_target(0.25)
    np.testing.assert_allclose(learner.target, 0.25)
    learner.sync_target(1.0)
    np.testing.assert_array_equal(learner.target, learner.flat)
