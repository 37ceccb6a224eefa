"""PPO loss terms against hand-computed numbers, and the learner on small synthetic batches."""

from __future__ import annotations

import copy
import math
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch

from surge.algos.losses import clipped_surrogate_loss, explained_variance, value_loss
from surge.algos.ppo import PPOUpdater, RolloutBatch, bootstrap_next_values, gather_rows
from surge.config.schema import ModelConfig, PPOConfig
from surge.errors import ConfigError
from surge.models.actor_critic import ActorCritic
from surge.tracking.checkpoint import load_checkpoint, save_checkpoint

pytestmark = pytest.mark.numerics  # also run under the narrowest kernels (tests/numerics.py)

# --- pure losses ----------------------------------------------------------------------------


def test_clipped_surrogate_hand_computed() -> None:
    # ratios 1.5, 0.5, 1.1 with advantages 1, 1, -2 and clip 0.2:
    #   r=1.5, A=1:  max(-1.5, -1.2) = -1.2   (clipped: no credit beyond 1.2)
    #   r=0.5, A=1:  max(-0.5, -0.8) = -0.5   (pessimistic: the unclipped term)
    #   r=1.1, A=-2: max( 2.2,  2.2) =  2.2
    # loss = (-1.2 - 0.5 + 2.2) / 3 = 1/6; clipfrac = 2/3 (1.5 and 0.5 are outside [0.8, 1.2])
    # approx_kl = mean((r - 1) - log r) = (0.1 - log(1.5 * 0.5 * 1.1)) / 3
    ratios = torch.tensor([1.5, 0.5, 1.1], dtype=torch.float64)
    old = torch.tensor([-1.0, -2.0, -0.5], dtype=torch.float64)
    new = old + ratios.log()
    adv = torch.tensor([1.0, 1.0, -2.0], dtype=torch.float64)

    loss, clipfrac, kl = clipped_surrogate_loss(new, old, adv, 0.2)

    assert loss.item() == pytest.approx(1.0 / 6.0)
    assert clipfrac.item() == pytest.approx(2.0 / 3.0)
    assert kl.item() == pytest.approx((0.1 - math.log(0.825)) / 3.0)


def test_clipped_surrogate_gradient_vanishes_where_clipped() -> None:
    new = torch.tensor([math.log(1.5), math.log(1.1)], requires_grad=True)
    loss, clipfrac, kl = clipped_surrogate_loss(new, torch.zeros(2), torch.ones(2), 0.2)
    torch.autograd.backward(loss)
    assert new.grad is not None
    assert new.grad[0].item() == 0.0  # ratio 1.5 > 1.2 with A > 0: clipped, no gradient
    assert new.grad[1].item() == pytest.approx(-1.1 / 2)  # d(-r/2)/dlogr = -r/2
    assert not clipfrac.requires_grad and not kl.requires_grad


def test_value_loss_hand_computed() -> None:
    # old 1.0, clip 0.2: new 1.5 -> clipped 1.2; new 0.0 -> clipped 0.8.
    # unclipped sq: (1.5-2)^2 = 0.25, (0-0.5)^2 = 0.25; clipped sq: (1.2-2)^2 = 0.64, (0.8-0.5)^2
    # = 0.09. Clipped loss: 0.5 * mean(0.64, 0.25) = 0.2225; unclipped: 0.5 * 0.25 = 0.125.
    new = torch.tensor([1.5, 0.0], dtype=torch.float64)
    old = torch.tensor([1.0, 1.0], dtype=torch.float64)
    ret = torch.tensor([2.0, 0.5], dtype=torch.float64)
    assert value_loss(new, old, ret, 0.2, clip=True).item() == pytest.approx(0.2225)
    assert value_loss(new, old, ret, 0.2, clip=False).item() == pytest.approx(0.125)


def test_explained_variance() -> None:
    target = torch.tensor([1.0, 2.0, 3.0, 4.0])
    assert explained_variance(target, target).item() == pytest.approx(1.0)
    assert explained_variance(torch.full((4,), 2.5), target).item() == pytest.approx(0.0)
    # residual [1, 0, 0, -1]: var 0.5; target var 1.25 -> 1 - 0.4 = 0.6
    pred = torch.tensor([0.0, 2.0, 3.0, 5.0])
    assert explained_variance(pred, target).item() == pytest.approx(0.6)
    assert math.isnan(explained_variance(target, torch.ones(4)).item())


# --- the learner ----------------------------------------------------------------------------

OBS_SPACE = gym.spaces.Dict(
    {"pos": gym.spaces.Box(-1.0, 1.0, (3,), np.float32), "mode": gym.spaces.Discrete(3)}
)
ACTION_SPACES: dict[str, gym.Space[Any]] = {
    "discrete": gym.spaces.Discrete(4),
    "multidiscrete": gym.spaces.MultiDiscrete([3, 2]),
    "box": gym.spaces.Box(-1.0, 1.0, (2,), np.float32),
}
T, N = 8, 4


def _obs(g: torch.Generator, *lead: int) -> dict[str, torch.Tensor]:
    return {
        "pos": torch.rand((*lead, 3), generator=g) * 2 - 1,
        "mode": torch.randint(0, 3, lead, generator=g),
    }


def _model(action_space: gym.Space[Any], seed: int = 0) -> ActorCritic:
    torch.manual_seed(seed)
    return ActorCritic(OBS_SPACE, action_space, ModelConfig(hidden_sizes=[16, 16]))


def _batch(model: ActorCritic, seed: int = 1) -> RolloutBatch:
    g = torch.Generator().manual_seed(seed)
    obs = _obs(g, T, N)
    flat = {k: v.reshape(T * N, *v.shape[2:]) for k, v in obs.items()}
    actions, logp, values = model.act(flat, generator=g)
    terminated = torch.zeros(T, N, dtype=torch.bool)
    truncated = torch.zeros(T, N, dtype=torch.bool)
    terminated[2, 0] = True
    truncated[5, 1] = True
    truncated[T - 1, 3] = True
    return RolloutBatch(
        obs=obs,
        last_obs=_obs(g, N),
        final_obs=_obs(g, T, N),
        actions=actions.reshape(T, N, *actions.shape[1:]),
        logp=logp.reshape(T, N),
        values=values.reshape(T, N),
        rewards=torch.randn(T, N, generator=g),
        terminated=terminated,
        truncated=truncated,
    )


def _cfg(**kw: Any) -> PPOConfig:
    return PPOConfig(**{"epochs": 2, "minibatches": 4, **kw})


@pytest.mark.parametrize("kind", list(ACTION_SPACES))
def test_update_runs_returns_finite_stats_and_changes_params(kind: str) -> None:
    model = _model(ACTION_SPACES[kind])
    before = copy.deepcopy(model.state_dict())
    learner = PPOUpdater(model, _cfg(), torch.Generator().manual_seed(0))

    stats = learner.update(_batch(model), lr=1e-3)

    keys = ("policy_loss", "value_loss", "entropy", "approx_kl", "clipfrac")
    assert set(stats) == {*keys, "explained_variance", "grad_norm", "lr"}
    assert all(isinstance(v, float) and math.isfinite(v) for v in stats.values()), stats
    assert stats["lr"] == 1e-3
    changed = [k for k, v in model.state_dict().items() if not torch.equal(v, before[k])]
    assert "value_head.weight" in changed and "action_head.linear.weight" in changed
    if kind == "box":
        assert "action_head.log_std" in changed


def test_update_is_reproducible_with_a_fixed_generator() -> None:
    a = _model(ACTION_SPACES["box"], seed=3)
    b = copy.deepcopy(a)
    batch = _batch(a)
    la = PPOUpdater(a, _cfg(), torch.Generator().manual_seed(7))
    lb = PPOUpdater(b, _cfg(), torch.Generator().manual_seed(7))
    for _ in range(2):
        sa, sb = la.update(batch, 1e-3), lb.update(batch, 1e-3)
        assert sa == sb
    for (name, pa), pb in zip(a.state_dict().items(), b.state_dict().values(), strict=True):
        assert torch.equal(pa, pb), name


def test_update_sets_learning_rate() -> None:
    model = _model(ACTION_SPACES["discrete"])
    learner = PPOUpdater(model, _cfg(), torch.Generator().manual_seed(0))
    learner.update(_batch(model), lr=1.25e-4)
    assert learner.optimizer.lr == 1.25e-4
    assert learner.optimizer.eps == _cfg().adam_eps


def test_target_kl_stops_after_the_first_epoch() -> None:
    model = _model(ACTION_SPACES["discrete"])
    learner = PPOUpdater(model, _cfg(epochs=5, target_kl=-1.0), torch.Generator().manual_seed(0))
    learner.update(_batch(model), lr=1e-3)
    # one epoch of 4 minibatches, then the KL check stops it
    assert int(learner.optimizer.step_count) == 4


def test_minibatches_must_divide_the_batch() -> None:
    model = _model(ACTION_SPACES["discrete"])
    learner = PPOUpdater(model, _cfg(minibatches=5), torch.Generator().manual_seed(0))
    with pytest.raises(ConfigError, match="minibatches=5"):
        learner.update(_batch(model), lr=1e-3)


def test_bootstrap_uses_final_obs_at_truncations_and_last_obs_at_the_end() -> None:
    model = _model(ACTION_SPACES["discrete"])
    batch = _batch(model)
    nv = bootstrap_next_values(model, batch)
    with torch.no_grad():
        v_last = model.value(batch.last_obs)
        v_final_51 = model.value({k: v[5, 1:2] for k, v in batch.final_obs.items()})
        v_final_end = model.value({k: v[T - 1, 3:4] for k, v in batch.final_obs.items()})
    torch.testing.assert_close(nv[: T - 1, 0], batch.values[1:, 0])
    torch.testing.assert_close(nv[T - 1, :3], v_last[:3])
    torch.testing.assert_close(nv[5, 1], v_final_51[0])
    torch.testing.assert_close(nv[T - 1, 3], v_final_end[0])
    torch.testing.assert_close(nv[4, 1], batch.values[5, 1])
    assert not nv.requires_grad


def test_learner_state_round_trips_through_a_checkpoint(tmp_path: Path) -> None:
    model = _model(ACTION_SPACES["box"])
    learner = PPOUpdater(model, _cfg(), torch.Generator().manual_seed(0))
    batch = _batch(model)
    learner.update(batch, lr=1e-3)
    state = {"model": model.state_dict(), "learner": learner.state_dict()}
    ckpt = load_checkpoint(save_checkpoint(tmp_path, state, version=1, keep=1))

    clone = _model(ACTION_SPACES["box"], seed=99)
    clone.load_state_dict(ckpt["model"])
    clone_learner = PPOUpdater(clone, _cfg(), torch.Generator().manual_seed(123))
    clone_learner.load_state_dict(ckpt["learner"])

    # Resumed and original continue identically (same Adam moments, same shuffles).
    assert learner.update(batch, 1e-3) == clone_learner.update(batch, 1e-3)
    for pa, pb in zip(model.parameters(), clone.parameters(), strict=True):
        assert torch.equal(pa, pb)


@pytest.mark.parametrize("layout", ["contiguous", "channels_last", "strided", "vector"])
def test_gather_rows_is_indexing_in_the_same_layout(layout: str) -> None:
    g = torch.Generator().manual_seed(0)
    x = torch.randint(0, 256, (10, 3, 5, 4), generator=g, dtype=torch.uint8)
    if layout == "channels_last":
        x = x.contiguous(memory_format=torch.channels_last)
    elif layout == "strided":
        x = x[:, :, ::2]
    elif layout == "vector":
        x = torch.randn(10, generator=g)
    idx = torch.randperm(10, generator=g)[:7]
    out = gather_rows(x, idx)
    assert torch.equal(out, x[idx])
    if layout == "channels_last":
        assert out.is_contiguous(memory_format=torch.channels_last)


def test_thread_schedule_is_asked_before_the_update_and_every_minibatch() -> None:
    model = _model(ACTION_SPACES["discrete"])
    learner = PPOUpdater(model, _cfg(), torch.Generator().manual_seed(0))
    asked: list[int] = []
    answers = [1, 1, 2, 2, 2, 2, 2, 2, 2]  # the start, then 2 epochs x 4 minibatches

    def threads() -> int:
        asked.append(torch.get_num_threads())
        return answers[len(asked) - 1]

    learner.threads = threads
    before = torch.get_num_threads()
    try:
        stats = learner.update(_batch(model), lr=1e-3)
        assert len(asked) == 9
        assert asked[3] == 2 and torch.get_num_threads() == 2  # switched when asked
        assert stats["learner_threads"] == (1 + 7 * 2) / 8  # mean over the minibatches
    finally:
        torch.set_num_threads(before)


def test_cnn_update_is_unchanged_by_the_prepared_layout() -> None:
    """The learner's once-per-batch channels-last frames and row gathers train exactly as
    plain indexing of the stored [T, N, C, H, W] frames does."""
    frames = gym.spaces.Box(0, 255, (4, 36, 36), np.uint8)
    g = torch.Generator().manual_seed(0)
    torch.manual_seed(0)
    model = ActorCritic(frames, gym.spaces.Discrete(3), ModelConfig())
    plain = copy.deepcopy(model)
    plain.encoder.prepare = lambda obs: obs  # type: ignore[method-assign]
    obs = {"obs": torch.randint(0, 256, (T, N, 4, 36, 36), generator=g, dtype=torch.uint8)}
    batch = RolloutBatch(
        obs=obs,
        last_obs={"obs": obs["obs"][-1]},
        final_obs={"obs": torch.zeros_like(obs["obs"])},
        actions=torch.randint(0, 3, (T, N), generator=g),
        logp=torch.full((T, N), -math.log(3)),
        values=torch.randn(T, N, generator=g),
        rewards=torch.randn(T, N, generator=g),
        terminated=torch.zeros(T, N, dtype=torch.bool),
        truncated=torch.zeros(T, N, dtype=torch.bool),
    )
    fast = PPOUpdater(model, _cfg(), torch.Generator().manual_seed(5))
    ref = PPOUpdater(plain, _cfg(), torch.Generator().manual_seed(5))
    with pytest.MonkeyPatch.context() as mp:
        assert fast.update(batch, 1e-3)  # the learner's own path
        mp.setattr("surge.algos.ppo.gather_rows", lambda x, idx: x[idx])
        ref.update(batch, 1e-3)
    # Every kernel sees bitwise the same inputs either way.
    for (name, a), b in zip(model.state_dict().items(), plain.state_dict().values(), strict=True):
        assert torch.equal(a, b), name
