"""The plumbing of `ppo.cuda_graphs` (algos/cuda_graph.py), checked on the CPU: a stand-in
for the CUDA graph that, like a real capture, runs nothing at capture time and runs the
captured step on the static inputs at every replay. The learner through it must give the
eager learner's parameters and stats exactly: the warm-up's effects on every piece of state
are undone, each minibatch reaches the step, and the running sums restart per update.
tests/cuda/test_cuda_learners.py runs the real capture on a GPU."""

from __future__ import annotations

from collections.abc import Callable

import gymnasium as gym
import numpy as np
import pytest
import torch
from torch import Tensor

import surge.algos.ppo as ppo_module
from surge.algos.cuda_graph import GraphedStep, Inputs
from surge.config.schema import APPOConfig, ModelConfig, PPOConfig
from surge.models.actor_critic import ActorCritic
from surge.models.weights import model_to_flat
from tests.unit.test_ppo_loss import OBS_SPACE, T, _batch

pytestmark = pytest.mark.numerics


class ReplayedOnTheCPU(GraphedStep):
    captures = 0

    def _warm_up(self, step: Callable[[Inputs], Tensor]) -> None:
        step(self.inputs)

    def _capture(self, step: Callable[[Inputs], Tensor]) -> Tensor:
        ReplayedOnTheCPU.captures += 1
        self.step = step
        return torch.full((5,), float("nan"))  # filled by each replay, as a graph's output

    def _replay(self) -> None:
        self.output.copy_(self.step(self.inputs))


@pytest.mark.parametrize("vtrace", [False, True])
def test_the_replayed_learner_matches_the_eager_one(
    vtrace: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    results = []
    for graphs in (False, True):
        torch.manual_seed(0)
        model = ActorCritic(OBS_SPACE, gym.spaces.Discrete(3), ModelConfig(hidden_sizes=[16, 16]))
        batch = _batch(model)
        cfg = PPOConfig(rollout_len=T, epochs=3, minibatches=4, cuda_graphs=graphs)
        appo = APPOConfig() if vtrace else None
        learner = ppo_module.PPOUpdater(model, cfg, torch.Generator().manual_seed(2), appo)
        if graphs:
            monkeypatch.setattr(ppo_module, "GraphedStep", ReplayedOnTheCPU)
            monkeypatch.setattr(learner, "_graphs_apply", lambda train: train is None)
        before = model_to_flat(model)
        stats = [learner.update(batch, 1e-3), learner.update(batch, 3e-4)]
        assert not np.array_equal(model_to_flat(model), before)
        results.append((model_to_flat(model), stats, learner))
    (eager, eager_stats, _), (replayed, replayed_stats, learner) = results
    assert len(learner.graphs) == 1 and learner.graph_error is None  # one minibatch shape
    assert ReplayedOnTheCPU.captures >= 1
    np.testing.assert_array_equal(replayed, eager)
    assert replayed_stats == eager_stats
    assert learner.optimizer.step_count.item() == 2 * 3 * 4  # the warm-up's step undone


def test_a_failed_capture_leaves_the_eager_step(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def refuse(*args: object) -> None:
        raise RuntimeError("operation not permitted when stream is capturing")

    torch.manual_seed(0)
    model = ActorCritic(OBS_SPACE, gym.spaces.Discrete(3), ModelConfig(hidden_sizes=[16, 16]))
    learner = ppo_module.PPOUpdater(
        model, PPOConfig(rollout_len=T, epochs=1, minibatches=2), torch.Generator().manual_seed(2)
    )
    monkeypatch.setattr(ppo_module, "GraphedStep", refuse)
    monkeypatch.setattr(learner, "_graphs_apply", lambda train: True)
    stats = learner.update(_batch(model), 1e-3)
    assert np.isfinite(stats["policy_loss"]) and learner.optimizer.step_count.item() == 2
    assert "operation not permitted" in (learner.graph_error or "")
    assert "ppo.cuda_graphs: capturing the minibatch step failed" in capsys.readouterr().err
