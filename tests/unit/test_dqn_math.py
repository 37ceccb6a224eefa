"""The DQN family's maths (surge/algos/dqn.py) against hand-computed numbers."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from surge.algos.dqn import (
    double_q_target,
    q_learning_target,
    rescale,
    sequence_priority,
    td_loss,
    unrescale,
)
from surge.algos.exploration import apex_epsilons, linear_schedule
from surge.models.q_network import dueling_q


def _t(values: float | list[float] | list[list[float]]) -> torch.Tensor:
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


def test_double_q_target_differs_from_q_learning_target() -> None:
    # Row 0: the online net prefers action 1 (3 > 1), which the target net values at 4;
    #        the plain target takes the target net's max, 5.
    # Row 1: the online net prefers action 0, valued 1; the plain max is 7.
    q_online = _t([[1.0, 3.0], [2.0, 0.0]])
    q_target = _t([[5.0, 4.0], [1.0, 7.0]])
    returns, discount = _t([1.0, 0.0]), _t([0.5, 1.0])
    plain = q_learning_target(q_target, returns, discount)
    double = double_q_target(q_online, q_target, returns, discount)
    _close(plain, _t([1.0 + 0.5 * 5.0, 7.0]))  # [3.5, 7]
    _close(double, _t([1.0 + 0.5 * 4.0, 1.0]))  # [3, 1]
    # discount 0 (a termination) ignores the next values entirely
    _close(q_learning_target(q_target, returns, _t([0.0, 0.0])), returns)


def test_td_loss_hand_values_huber_and_mse() -> None:
    # TD errors target - q = [0.5, 2, -3], weights [1, 0.5, 2].
    #   huber: [0.5 * 0.5^2, 2 - 0.5, 3 - 0.5] = [0.125, 1.5, 2.5]
    #          weighted [0.125, 0.75, 5.0] -> mean 5.875 / 3 = 1.9583333; unweighted 4.125 / 3
    #   mse:   [0.25, 4, 9], weighted [0.25, 2, 18] -> mean 20.25 / 3 = 6.75
    q = _t([1.0, 1.0, 1.0])
    target = _t([1.5, 3.0, -2.0])
    weights = _t([1.0, 0.5, 2.0])
    loss, td = td_loss(q, target, weights, "huber")
    assert loss.item() == pytest.approx(5.875 / 3, rel=1e-6)
    _close(td, _t([0.5, 2.0, -3.0]))
    loss, _ = td_loss(q, target, None, "huber")
    assert loss.item() == pytest.approx(4.125 / 3, rel=1e-6)
    loss, td = td_loss(q, target, weights, "mse")
    assert loss.item() == pytest.approx(6.75, rel=1e-6)
    _close(td, _t([0.5, 2.0, -3.0]))
    with pytest.raises(ValueError, match="huber"):
        td_loss(q, target, None, "l1")


def test_td_loss_gradient_flows_into_q_only() -> None:
    q = _t([1.0, 1.0, 1.0]).requires_grad_()
    target_params = _t([1.5, 3.0, -2.0]).requires_grad_()
    target = target_params * 1.0  # a target computed from parameters, as a target net's is
    loss, td = td_loss(q, target, _t([1.0, 0.5, 2.0]), "huber")
    loss.backward()
    assert target_params.grad is None
    assert not td.requires_grad
    # d/dq of w * huber(q - target) / 3: clipped slope -1 (|td| > 1) or td itself, signed:
    #   [-0.5 * 1 / 3, -1 * 0.5 / 3, +1 * 2 / 3] = [-1/6, -1/6, 2/3]
    assert q.grad is not None
    _close(q.grad, _t([-1 / 6, -1 / 6, 2 / 3]))


def test_dueling_q() -> None:
    # mean A = [2, 1]: Q = [[1 + 1 - 2, 1 + 2 - 2, 1 + 3 - 2], [2 + 0 - 1, 2 - 1, 2 + 3 - 1]]
    q = dueling_q(_t([[1.0], [2.0]]), _t([[1.0, 2.0, 3.0], [0.0, 0.0, 3.0]]))
    _close(q, _t([[0.0, 1.0, 2.0], [1.0, 1.0, 4.0]]))


def test_rescale_hand_values() -> None:
    # h(3) = sqrt(4) - 1 + 0.003 = 1.003; h(8) = 3 - 1 + 0.008 = 2.008; h is odd; h(0) = 0
    x = torch.tensor([3.0, 8.0, -3.0, 0.0], dtype=torch.float64)
    _close(rescale(x), torch.tensor([1.003, 2.008, -1.003, 0.0]).double())
    _close(unrescale(torch.tensor([1.003, 2.008, -1.003, 0.0], dtype=torch.float64)), x)


@pytest.mark.numerics
def test_rescale_unrescale_are_inverses() -> None:
    x = torch.cat(
        [
            torch.linspace(-1e4, 1e4, 20001, dtype=torch.float64),
            torch.logspace(-6, 4, 101, dtype=torch.float64),
            -torch.logspace(-6, 4, 101, dtype=torch.float64),
        ]
    )
    _close(unrescale(rescale(x)), x, rtol=1e-6, atol=1e-9)
    _close(rescale(unrescale(x)), x, rtol=1e-6, atol=1e-9)


def test_sequence_priority_with_and_without_mask() -> None:
    # [T=3, B=2], eta 0.9.
    #   col 0: max 3, mean 2 -> 2.7 + 0.2 = 2.9;  col 1: max 4, mean 2 -> 3.6 + 0.2 = 3.8
    # Masking out step 2 of col 1: |delta| [0, 2] -> max 2, mean 1 -> 1.8 + 0.1 = 1.9
    abs_td = _t([[1.0, 0.0], [3.0, 2.0], [2.0, 4.0]])
    _close(sequence_priority(abs_td), _t([2.9, 3.8]))
    mask = torch.tensor([[True, True], [True, True], [True, False]])
    _close(sequence_priority(abs_td, mask), _t([2.9, 1.9]))
    # eta 0.5 on col 0 with its last step masked: max 3, mean 2 -> 2.5
    mask = torch.tensor([[True, True], [True, True], [False, True]])
    _close(sequence_priority(abs_td, mask, eta=0.5)[0], _t(2.5))
    # negative (raw) TD errors count by their size; a column with no step counted gets 0
    _close(sequence_priority(-abs_td), _t([2.9, 3.8]))
    none = torch.zeros(3, 2, dtype=torch.bool)
    _close(sequence_priority(abs_td, none), _t([0.0, 0.0]))


def test_apex_epsilons() -> None:
    # N = 8: 0.4 ** (1 + 7 i / 7) = 0.4 ** (1 + i)
    expected = [0.4, 0.16, 0.064, 0.0256, 0.01024, 0.004096, 0.0016384, 0.00065536]
    np.testing.assert_allclose(apex_epsilons(8), expected, rtol=1e-12)
    np.testing.assert_allclose(apex_epsilons(1), [0.4])
    # N = 3, base 0.5, alpha 2: 0.5 ** [1, 2, 3]
    np.testing.assert_allclose(apex_epsilons(3, base=0.5, alpha=2.0), [0.5, 0.25, 0.125])
    with pytest.raises(ValueError):
        apex_epsilons(0)


def test_linear_schedule() -> None:
    assert linear_schedule(1.0, 0.05, 100, 0) == pytest.approx(1.0)
    assert linear_schedule(1.0, 0.05, 100, 50) == pytest.approx(0.525)
    assert linear_schedule(1.0, 0.05, 100, 100) == pytest.approx(0.05)
    assert linear_schedule(1.0, 0.05, 100, 250) == pytest.approx(0.05)
    assert linear_schedule(1.0, 0.05, 100, -10) == pytest.approx(1.0)
    assert linear_schedule(0.0, 1.0, 10, 5) == pytest.approx(0.5)  # rising works too
    assert linear_schedule(1.0, 0.05, 0, 0) == 0.05
