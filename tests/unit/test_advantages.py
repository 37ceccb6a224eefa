"""GAE and normalisation against numbers worked out by hand."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from surge.algos.advantages import gae, normalize, vtrace

pytestmark = pytest.mark.numerics  # also run under the narrowest kernels (tests/numerics.py)

F64 = torch.float64


def _t(rows: list[list[float]]) -> torch.Tensor:
    return torch.tensor(rows, dtype=F64)


def _b(rows: list[list[int]]) -> torch.Tensor:
    return torch.tensor(rows, dtype=torch.bool)


def test_gae_hand_computed_termination_truncation_and_no_done() -> None:
    # gamma = 0.9, lam = 0.5, so gamma * lam = 0.45. T = 3 steps (rows), N = 2 envs (cols).
    # env 0: terminates at t=1 (its next_value 100.0 is garbage and must be ignored), a new
    #        episode starts at t=2 and runs past the end (bootstrap from next_value 2.0).
    #   delta = [1 + 0.9*1.0 - 0.5, 2 + 0 - 1.0, 3 + 0.9*2.0 - 1.5] = [1.4, 1.0, 3.3]
    #   A2 = 3.3; A1 = 1.0 (cut by done); A0 = 1.4 + 0.45*1.0 = 1.85
    # env 1: truncated at t=0 with V(final obs) = 4.0, then no done.
    #   delta = [0.5 + 0.9*4.0 - 2.0, -1 + 0.9*1.0 - 0.0, 0 + 0.9*0.5 - 1.0] = [2.1, -0.1, -0.55]
    #   A2 = -0.55; A1 = -0.1 + 0.45*(-0.55) = -0.3475; A0 = 2.1 (cut by done)
    rewards = _t([[1.0, 0.5], [2.0, -1.0], [3.0, 0.0]])
    values = _t([[0.5, 2.0], [1.0, 0.0], [1.5, 1.0]])
    next_values = _t([[1.0, 4.0], [100.0, 1.0], [2.0, 0.5]])
    terminated = _b([[0, 0], [1, 0], [0, 0]])
    truncated = _b([[0, 1], [0, 0], [0, 0]])

    adv, ret = gae(rewards, values, next_values, terminated, terminated | truncated, 0.9, 0.5)

    expected_adv = _t([[1.85, 2.1], [1.0, -0.3475], [3.3, -0.55]])
    torch.testing.assert_close(adv, expected_adv, rtol=0, atol=1e-12)
    torch.testing.assert_close(ret, expected_adv + values, rtol=0, atol=1e-12)
    torch.testing.assert_close(
        ret, _t([[2.35, 4.1], [2.0, -0.3475], [4.8, 0.45]]), rtol=0, atol=1e-12
    )


def test_truncation_bootstraps_and_termination_does_not() -> None:
    rewards, values, next_values = _t([[1.0]]), _t([[0.0]]), _t([[10.0]])
    ended = _b([[1]])
    not_terminal = _b([[0]])

    adv_trunc, _ = gae(rewards, values, next_values, not_terminal, ended, 0.9, 0.95)
    adv_term, _ = gae(rewards, values, next_values, ended, ended, 0.9, 0.95)

    assert adv_trunc.item() == pytest.approx(1.0 + 0.9 * 10.0)
    assert adv_term.item() == pytest.approx(1.0)


def test_done_cuts_the_recursion_but_not_the_bootstrap() -> None:
    # A truncation at t=0 must not let A_1 leak into A_0, even though V(final) is used.
    rewards, values = _t([[0.0], [5.0]]), _t([[0.0], [0.0]])
    next_values = _t([[1.0], [0.0]])
    truncated = _b([[1], [0]])
    adv, _ = gae(rewards, values, next_values, _b([[0], [0]]), truncated, 0.5, 1.0)
    assert adv[0, 0].item() == pytest.approx(0.5)  # 0 + 0.5 * 1.0, nothing from A_1 = 5
    assert adv[1, 0].item() == pytest.approx(5.0)


def test_lambda_one_gives_discounted_returns_and_lambda_zero_td_errors() -> None:
    rewards = _t([[1.0], [2.0], [3.0]])
    values = _t([[0.5], [0.25], [2.0]])
    next_values = _t([[0.25], [2.0], [4.0]])
    no = _b([[0], [0], [0]])
    g = 0.5
    _, ret1 = gae(rewards, values, next_values, no, no, g, 1.0)
    # Monte Carlo with a bootstrap at the end: G_2 = 3 + 0.5*4 = 5; G_1 = 2 + 2.5; G_0 = 1 + 2.25
    torch.testing.assert_close(ret1, _t([[3.25], [4.5], [5.0]]), rtol=0, atol=1e-12)
    adv0, _ = gae(rewards, values, next_values, no, no, g, 0.0)
    torch.testing.assert_close(adv0, rewards + g * next_values - values, rtol=0, atol=1e-12)


def test_gae_keeps_dtype_and_rejects_mismatched_shapes() -> None:
    r = torch.zeros(4, 3)
    b = torch.zeros(4, 3, dtype=torch.bool)
    adv, ret = gae(r, r, r, b, b, 0.99, 0.95)
    assert adv.dtype == torch.float32 and ret.shape == (4, 3)
    with pytest.raises(ValueError, match="next_values"):
        gae(r, r, torch.zeros(3, 3), b, b, 0.99, 0.95)


def test_normalize() -> None:
    from surge.algos.losses import normalize as normalize_tensor

    x = np.array([1.0, 2.0, 3.0, 4.0], np.float32)
    out = normalize(x)
    # mean 2.5, unbiased std sqrt(5/3)
    expected = (x - 2.5) / (np.sqrt(5.0 / 3.0) + 1e-8)
    np.testing.assert_allclose(out, expected, rtol=1e-6)
    assert out.dtype == np.float32 and abs(out.mean()) < 1e-6
    assert normalize(np.array([3.0], np.float32)).item() == 0.0
    # the tensor version (any device) is the same function
    torch.testing.assert_close(normalize_tensor(torch.from_numpy(x)), torch.from_numpy(out))
    assert normalize_tensor(torch.tensor([3.0])).item() == 0.0


def test_gae_and_vtrace_take_numpy_arrays_and_tensors_alike() -> None:
    rng = np.random.default_rng(0)
    r, v, nv, lr = (rng.standard_normal((5, 3)).astype(np.float32) for _ in range(4))
    term = rng.random((5, 3)) < 0.2
    done = term | (rng.random((5, 3)) < 0.2)
    for fn, extra in ((gae, ()), (vtrace, (lr,))):
        a_np, t_np = fn(r, v, nv, term, done, *extra, 0.9, 0.8)
        a_t, t_t = fn(*(torch.from_numpy(x) for x in (r, v, nv, term, done, *extra)), 0.9, 0.8)
        assert isinstance(a_np, np.ndarray) and isinstance(a_t, torch.Tensor)
        assert a_np.dtype == np.float32 and t_np.dtype == np.float32
        np.testing.assert_array_equal(a_np, a_t.numpy())
        np.testing.assert_array_equal(t_np, t_t.numpy())


def test_vtrace_hand_computed_off_policy() -> None:
    # T=2, N=1; rhos 2 (clipped to 1) and 0.5; gamma .9, lambda 1, no episode end.
    rewards = torch.tensor([[1.0], [2.0]])
    values = torch.tensor([[0.5], [1.0]])
    next_values = torch.tensor([[1.0], [3.0]])
    no = torch.zeros(2, 1, dtype=torch.bool)
    log_rhos = torch.log(torch.tensor([[2.0], [0.5]]))
    adv, targets = vtrace(rewards, values, next_values, no, no, log_rhos, 0.9)
    # D1 = .5 * (2 + .9 * 3 - 1) = 1.85; D0 = 1 * (1 + .9 * 1 - .5) + .9 * 1 * D1 = 3.065
    assert torch.allclose(targets, torch.tensor([[3.565], [2.85]]))
    # A0 uses the next state's target 1 + 1.85; A1 the plain bootstrap 3.
    assert torch.allclose(adv, torch.tensor([[1 + 0.9 * 2.85 - 0.5], [2 + 0.9 * 3 - 1.0]]))


def test_vtrace_on_policy_equals_gae_with_episode_ends() -> None:
    g = torch.Generator().manual_seed(0)
    T, N = 16, 3
    rewards = torch.randn(T, N, generator=g)
    values = torch.randn(T, N, generator=g)
    next_values = torch.randn(T, N, generator=g)
    terminated = torch.rand(T, N, generator=g) < 0.1
    truncated = (torch.rand(T, N, generator=g) < 0.1) & ~terminated
    dones = terminated | truncated
    assert terminated.any() and truncated.any()
    adv_g, ret_g = gae(rewards, values, next_values, terminated, dones, 0.97, 0.9)
    zeros = torch.zeros(T, N)
    adv_v, ret_v = vtrace(rewards, values, next_values, terminated, dones, zeros, 0.97, 0.9)
    assert torch.allclose(ret_v, ret_g, atol=1e-5)
    # GAE's advantage is the lambda-return minus V; V-trace's is the one-step advantage on the
    # next target, which with lambda = 1 is the same thing.
    adv_g1, _ = gae(rewards, values, next_values, terminated, dones, 0.97, 1.0)
    adv_v1, _ = vtrace(rewards, values, next_values, terminated, dones, zeros, 0.97, 1.0)
    assert torch.allclose(adv_v1, adv_g1, atol=1e-5)
    assert not torch.allclose(adv_v, adv_g, atol=1e-3)  # lambda < 1: they differ, as they should


def test_vtrace_cuts_traces_at_small_rhos() -> None:
    # With rho -> 0 at t=1, nothing after t=1 reaches the target of t=0.
    rewards = torch.tensor([[0.0], [5.0], [7.0]])
    values = torch.zeros(3, 1)
    next_values = torch.zeros(3, 1)
    no = torch.zeros(3, 1, dtype=torch.bool)
    log_rhos = torch.tensor([[0.0], [-50.0], [0.0]])
    _, targets = vtrace(rewards, values, next_values, no, no, log_rhos, 1.0)
    assert abs(targets[0, 0].item()) < 1e-6 and abs(targets[1, 0].item()) < 1e-6
    assert targets[2, 0].item() == 7.0
