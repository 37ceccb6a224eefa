"""Soft actor-critic's maths (surge/algos/sac.py) against hand-computed numbers."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from surge.algos.sac import (
    LOG_STD_MAX,
    LOG_STD_MIN,
    actor_loss,
    bounded_log_std,
    critic_loss,
    critic_target,
    default_target_entropy,
    squashed_gaussian,
    temperature_loss,
)

F64 = torch.float64


def _t(values: list[float] | list[list[float]]) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.float32)


def _close(
    actual: torch.Tensor,
    expected: torch.Tensor | list[float] | list[list[float]] | float,
    rtol: float = 1e-6,
    atol: float = 1e-7,
) -> None:
    # numpy's check: torch.testing.assert_close costs ~1 s of imports on its first call.
    want = expected.detach().numpy() if isinstance(expected, torch.Tensor) else expected
    np.testing.assert_allclose(actual.detach().numpy(), want, rtol=rtol, atol=atol)


def test_bounded_log_std() -> None:
    # -5 + 3.5 * (tanh(raw) + 1): raw -inf -> -5, 0 -> -1.5, +inf -> 2
    out = bounded_log_std(_t([-math.inf, 0.0, math.inf]))
    _close(out, _t([-5.0, -1.5, 2.0]))
    assert (LOG_STD_MIN, LOG_STD_MAX) == (-5.0, 2.0)


def test_squashed_gaussian_one_dimensional_hand_example() -> None:
    # mean 0, log_std 0, noise 0, scale 2, bias 0.5: u = 0, y = 0, action = 0.5,
    #   logp = log N(0; 0, 1) - log(2 * (1 - 0) + 1e-6) = -0.5 log(2 pi) - log(2.000001)
    zero = torch.zeros(1, 1, dtype=F64)
    scale, bias = torch.tensor([2.0], dtype=F64), torch.tensor([0.5], dtype=F64)
    action, logp = squashed_gaussian(zero, zero, scale, bias, zero)
    _close(action, torch.tensor([[0.5]], dtype=F64))
    expected = -0.5 * math.log(2 * math.pi) - math.log(2.000001)  # = -1.6120872
    assert logp.shape == (1,)
    assert logp.item() == pytest.approx(expected, rel=1e-12)
    assert expected == pytest.approx(-1.6120872, rel=1e-6)


def test_squashed_gaussian_deterministic_path() -> None:
    # noise None: u = mean. action = tanh(mean) * scale + bias:
    #   [tanh(0.5) * 1 + 0, tanh(-1) * 2 + 1] = [0.46211716, 1 - 1.52318831 = -0.52318831]
    mean, log_std = _t([[0.5, -1.0]]), _t([[0.3, -0.7]])
    scale, bias = _t([1.0, 2.0]), _t([0.0, 1.0])
    action, logp = squashed_gaussian(mean, log_std, scale, bias, None)
    _close(action, _t([[0.46211716, -0.52318831]]))
    _, logp_zero_noise = squashed_gaussian(mean, log_std, scale, bias, torch.zeros(1, 2))
    _close(logp, logp_zero_noise)
    # logp = sum over dims of [-log_std - 0.5 log(2 pi) - log(scale (1 - y^2) + 1e-6)]
    y = torch.tanh(mean)
    hand = (-log_std - 0.5 * math.log(2 * math.pi) - torch.log(scale * (1 - y**2) + 1e-6)).sum()
    assert logp.item() == pytest.approx(hand.item(), rel=1e-6)


@pytest.mark.numerics
def test_squashed_gaussian_matches_torch_distributions() -> None:
    # Reference: Normal(mean, std).log_prob(u) and the tanh correction computed separately,
    # as CleanRL's get_action does, in float64 (values and gradients).
    g = torch.Generator().manual_seed(0)
    mean = torch.randn(6, 3, generator=g, dtype=F64).requires_grad_()
    log_std = bounded_log_std(torch.randn(6, 3, generator=g, dtype=F64)).detach().requires_grad_()
    noise = torch.randn(6, 3, generator=g, dtype=F64)
    scale = torch.tensor([1.0, 2.0, 0.5], dtype=F64)
    bias = torch.tensor([0.0, -1.0, 0.25], dtype=F64)

    action, logp = squashed_gaussian(mean, log_std, scale, bias, noise)
    grads = torch.autograd.grad(logp.sum() + action.sum(), [mean, log_std])

    std = log_std.exp()
    u = mean + std * noise
    y = torch.tanh(u)
    ref_action = y * scale + bias
    ref_logp = torch.distributions.Normal(mean, std).log_prob(u)
    ref_logp = (ref_logp - torch.log(scale * (1 - y.pow(2)) + 1e-6)).sum(1)
    ref_grads = torch.autograd.grad(ref_logp.sum() + ref_action.sum(), [mean, log_std])

    assert logp.shape == (6,)
    _close(action, ref_action, rtol=1e-12, atol=1e-12)
    _close(logp, ref_logp, rtol=1e-10, atol=1e-10)
    for got, want in zip(grads, ref_grads, strict=True):
        _close(got, want, rtol=1e-10, atol=1e-10)


def test_critic_target_hand_values() -> None:
    # alpha 0.2. Row 0: 1 + 0.9 * (min(3, 4) - 0.2 * -1) = 1 + 0.9 * 3.2 = 3.88
    #            Row 1: discount 0 ignores the next values: 2
    q1_next = _t([3.0, 100.0]).requires_grad_()
    alpha = torch.tensor(0.2, requires_grad=True)
    args = (_t([1.0, 2.0]), _t([0.9, 0.0]), q1_next, _t([4.0, -100.0]), _t([-1.0, 5.0]))
    target = critic_target(*args, alpha)
    _close(target, _t([3.88, 2.0]))
    assert not target.requires_grad
    _close(critic_target(*args, 0.2), _t([3.88, 2.0]))


def test_critic_loss_hand_values() -> None:
    # mse([1, 2], [1, 1]) + mse([0, 4], [1, 1]) = (0 + 1) / 2 + (1 + 9) / 2 = 5.5
    q1, q2 = _t([1.0, 2.0]).requires_grad_(), _t([0.0, 4.0]).requires_grad_()
    target = _t([1.0, 1.0]).requires_grad_()
    loss = critic_loss(q1, q2, target)
    assert loss.item() == pytest.approx(5.5, rel=1e-6)
    loss.backward()
    assert target.grad is None
    # d/dq of mean((q - t)^2) = 2 (q - t) / B: q1 -> [0, 1], q2 -> [-1, 3]
    assert q1.grad is not None and q2.grad is not None
    _close(q1.grad, _t([0.0, 1.0]))
    _close(q2.grad, _t([-1.0, 3.0]))


def test_actor_loss_hand_values() -> None:
    # alpha 0.5: [0.5 * -1 - min(3, 2), 0.5 * 2 - min(0, 1)] = [-2.5, 1] -> mean -0.75
    logp = _t([-1.0, 2.0])
    q1, q2 = _t([3.0, 0.0]), _t([2.0, 1.0])
    assert actor_loss(logp, q1, q2, 0.5).item() == pytest.approx(-0.75, rel=1e-6)
    alpha = torch.tensor(0.5, requires_grad=True)
    loss = actor_loss(logp, q1, q2, alpha)
    assert loss.item() == pytest.approx(-0.75, rel=1e-6)
    assert not loss.requires_grad  # alpha is detached: the temperature has its own loss


def test_temperature_loss_hand_values() -> None:
    # alpha 0.5, logp + target entropy = [-1 - 1, 2 - 1] = [-2, 1]:
    #   mean(-0.5 * [-2, 1]) = mean([1, -0.5]) = 0.25; d/dlog_alpha = the same, 0.25
    log_alpha = torch.tensor(math.log(0.5), requires_grad=True)
    logp = _t([-1.0, 2.0]).requires_grad_()
    loss = temperature_loss(log_alpha, logp, -1.0)
    assert loss.item() == pytest.approx(0.25, rel=1e-6)
    loss.backward()
    assert log_alpha.grad is not None
    assert log_alpha.grad.item() == pytest.approx(0.25, rel=1e-6)
    assert logp.grad is None


@pytest.mark.parametrize(
    ("logp", "direction"),
    [
        (2.0, 1.0),  # entropy -2 below the target -1: alpha must rise
        (-3.0, -1.0),  # entropy 3 above the target -1: alpha must fall
    ],
)
def test_temperature_loss_moves_alpha_toward_the_target_entropy(
    logp: float, direction: float
) -> None:
    log_alpha = torch.tensor(0.0, requires_grad=True)
    temperature_loss(log_alpha, torch.full((4,), logp), target_entropy=-1.0).backward()
    assert log_alpha.grad is not None
    stepped = log_alpha.item() - 0.1 * log_alpha.grad.item()  # one plain gradient step
    assert stepped * direction > 0
    # gradient -alpha * (logp + target) = -(logp - 1) at log_alpha 0: step 0.1 * (logp - 1)
    assert stepped == pytest.approx(0.1 * (logp - 1.0), rel=1e-6)


def test_default_target_entropy() -> None:
    assert default_target_entropy(3) == -3.0
    assert default_target_entropy(1) == -1.0
    with pytest.raises(ValueError):
        default_target_entropy(0)
