"""algos/numpy_sac.py and learners/sac_numpy.py: SAC's sampling and its hand-written
gradients against autograd through algos/sac.py's torch functions (float64), and an update
in numpy landing where the torch steps land."""

from __future__ import annotations

from collections.abc import Iterator

import gymnasium as gym
import numpy as np
import pytest
import torch

from surge.algos.numpy_sac import (
    minimum_backward,
    squashed_gaussian_backward,
    squashed_gaussian_forward,
)
from surge.algos.sac import bounded_log_std, squashed_gaussian
from surge.config.load import load_config
from surge.envs.make import probe_env
from surge.learners.sac import SACBatch, SACUpdate
from surge.models import gemm


@pytest.fixture(autouse=True)
def defaults_after() -> Iterator[None]:
    yield
    gemm.use("numpy")
    gemm.use_bfloat16(False)


@pytest.mark.numerics
def test_squashed_gaussian_and_its_gradients_match_autograd() -> None:
    """Outputs and the gradients to mean and raw log-std of a loss that reads both the action
    and logp, with raw values out to where tanh saturates and the log-std is bounded."""
    rng = np.random.default_rng(0)
    rows, dims = 64, 3
    mean = rng.normal(0, 2, (rows, dims))
    raw = rng.normal(0, 3, (rows, dims))
    noise = rng.standard_normal((rows, dims))
    scale, bias = np.array([1.0, 2.0, 0.5]), np.array([0.0, -1.0, 0.25])
    g_action = rng.standard_normal((rows, dims))
    g_logp = rng.standard_normal(rows)

    t_mean = torch.tensor(mean, requires_grad=True)
    t_raw = torch.tensor(raw, requires_grad=True)
    action, logp = squashed_gaussian(
        t_mean,
        bounded_log_std(t_raw),
        torch.tensor(scale),
        torch.tensor(bias),
        torch.tensor(noise),
    )
    ((action * torch.tensor(g_action)).sum() + (logp * torch.tensor(g_logp)).sum()).backward()

    # numpy's and torch's tanh and log differ in the last bits, which 1 - y^2 amplifies
    # where tanh saturates: hence 1e-9, not 1e-15
    n_action, n_logp, sample = squashed_gaussian_forward(mean, raw, scale, bias, noise)
    np.testing.assert_allclose(n_action, action.detach().numpy(), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(n_logp, logp.detach().numpy(), rtol=1e-9, atol=1e-9)
    g_mean, g_raw = squashed_gaussian_backward(sample, scale, g_action, g_logp)
    assert t_mean.grad is not None and t_raw.grad is not None
    np.testing.assert_allclose(g_mean, t_mean.grad.numpy(), rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(g_raw, t_raw.grad.numpy(), rtol=1e-9, atol=1e-9)
    # the log-probability alone (the temperature's and the entropy's part)
    t_mean.grad = t_raw.grad = None
    _, logp = squashed_gaussian(
        t_mean, bounded_log_std(t_raw), torch.tensor(scale), torch.tensor(bias), torch.tensor(noise)
    )
    (logp * torch.tensor(g_logp)).sum().backward()
    g_mean, g_raw = squashed_gaussian_backward(sample, scale, None, g_logp)
    np.testing.assert_allclose(g_mean, t_mean.grad.numpy(), rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(g_raw, t_raw.grad.numpy(), rtol=1e-9, atol=1e-9)


def test_minimum_backward_follows_torch_with_ties() -> None:
    a = torch.tensor([1.0, 2.0, 3.0, -1.0], dtype=torch.float64, requires_grad=True)
    b = torch.tensor([2.0, 2.0, 1.0, -1.0], dtype=torch.float64, requires_grad=True)
    grad = torch.tensor([0.5, -2.0, 3.0, 4.0], dtype=torch.float64)
    torch.minimum(a, b).backward(grad)
    ga, gb = minimum_backward(a.detach().numpy(), b.detach().numpy(), grad.numpy())
    assert a.grad is not None and b.grad is not None
    np.testing.assert_array_equal(ga, a.grad.numpy())  # [0.5, -1, 0, 2]
    np.testing.assert_array_equal(gb, b.grad.numpy())  # [0, -1, 3, 2]
    assert ga.tolist() == [0.5, -1.0, 0.0, 2.0]


def _update(numpy_steps: bool, updates: int) -> SACUpdate:
    cfg, _ = load_config("pendulum-sac", ["sac.matmul=numpy", "seed=3"])
    env = probe_env(cfg.env, cfg.seed)
    sac = SACUpdate(cfg, env.observation_space, env.action_space, torch.device("cpu"))
    assert sac.numpy_steps is not None  # an MLP on flat observations: the numpy steps fit
    if not numpy_steps:
        sac.numpy_steps = None
    rng = np.random.default_rng(0)
    space = env.action_space
    assert isinstance(space, gym.spaces.Box)
    rows = 64

    def obs() -> dict[str, torch.Tensor]:
        return {"obs": torch.from_numpy(rng.standard_normal((rows, 3), dtype=np.float32))}

    torch.manual_seed(7)  # the noise: both draw it from torch's generator in the same order
    for _ in range(updates):
        batch = SACBatch(
            obs=obs(),
            action=torch.from_numpy(rng.uniform(-2, 2, (rows, 1)).astype(np.float32)),
            next_obs=obs(),
            reward=torch.from_numpy(rng.standard_normal(rows, dtype=np.float32)),
            discount=torch.from_numpy(rng.choice([0.0, 0.99], rows).astype(np.float32)),
        )
        sac.last_stats = sac(batch)  # type: ignore[attr-defined]
    return sac


@pytest.mark.numerics
def test_an_update_in_numpy_lands_where_the_torch_steps_land() -> None:
    """Four updates (two with the actor's and temperature's steps): the actor, critics,
    target critics and temperature after them, and the last update's statistics. Both
    compute the networks' passes in the same numpy code; what differs is the rest (heads,
    sampling, losses, their gradients), so float32 rounding is all that may part them."""
    torch_sac, numpy_sac = _update(False, 4), _update(True, 4)
    for name in ("actor_flat", "critic_flat", "target_flat"):
        expected = getattr(torch_sac, name).data.numpy()
        got = getattr(numpy_sac, name).data.numpy()
        np.testing.assert_allclose(got, expected, rtol=1e-4, atol=2e-6, err_msg=name)
        assert not np.array_equal(got, getattr(_update(True, 0), name).data.numpy())
    log_alpha = float(numpy_sac.log_alpha.detach())
    assert log_alpha == pytest.approx(float(torch_sac.log_alpha.detach()), abs=1e-6)
    assert log_alpha != 0.0  # the temperature stepped
    stats_t, stats_n = torch_sac.last_stats, numpy_sac.last_stats  # type: ignore[attr-defined]
    assert stats_t.keys() == stats_n.keys()
    for key in stats_t:
        assert stats_n[key] == pytest.approx(stats_t[key], rel=1e-4, abs=1e-5), key


def test_a_cnn_encoder_takes_the_torch_steps() -> None:
    """Image observations (a small CNN encoder per critic, with weights) are not what the
    numpy steps handle: the update takes the torch steps, and they learn."""
    cfg, _ = load_config("pendulum-sac", ["model.encoder=small_cnn"])
    image = gym.spaces.Box(0, 255, (3, 16, 16), np.uint8)
    action_space = gym.spaces.Box(-2.0, 2.0, (1,), np.float32)
    sac = SACUpdate(cfg, image, action_space, torch.device("cpu"))
    assert sac.numpy_steps is None
    before = sac.actor_flat.data.clone()
    rows = 8

    def frames() -> dict[str, torch.Tensor]:
        return {"obs": torch.randint(0, 256, (rows, 3, 16, 16), dtype=torch.uint8)}

    batch = SACBatch(
        obs=frames(),
        action=torch.rand(rows, 1) * 4 - 2,
        next_obs=frames(),
        reward=torch.randn(rows),
        discount=torch.full((rows,), 0.99),
    )
    for _ in range(2):
        stats = sac(batch)
    assert "actor_loss" in stats and not torch.equal(before, sac.actor_flat.data)
