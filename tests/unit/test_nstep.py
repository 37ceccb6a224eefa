"""n-step returns (surge/algos/nstep.py) against hand-computed numbers."""

from __future__ import annotations

import numpy as np
import pytest

from surge.algos.nstep import NStep, nstep_targets


def _col(values: list[float]) -> np.ndarray:
    return np.array(values, dtype=np.float32)[:, None]


def _flags(length: int, at: list[int]) -> np.ndarray:
    flags = np.zeros((length, 1), dtype=bool)
    flags[at, 0] = True
    return flags


def test_no_episode_end() -> None:
    # gamma 0.5, n 3, rewards [1, 2, 3, 4, 5]:
    #   t=0: 1 + 0.5*2 + 0.25*3 = 2.75;  t=1: 2 + 1.5 + 1 = 4.5;  t=2: 3 + 2 + 1.25 = 6.25
    #   t=3, t=4 need steps 5 and 6: incomplete.
    out = nstep_targets(_col([1, 2, 3, 4, 5]), _flags(5, []), _flags(5, []), 0.5, 3)
    assert out.returns.dtype == np.float32 and out.discount.dtype == np.float32
    np.testing.assert_array_equal(out.complete[:, 0], [True, True, True, False, False])
    np.testing.assert_allclose(out.returns[:3, 0], [2.75, 4.5, 6.25], rtol=1e-6)
    np.testing.assert_allclose(out.discount[:3, 0], [0.125, 0.125, 0.125], rtol=1e-6)
    np.testing.assert_array_equal(out.horizon[:3, 0], [3, 3, 3])
    assert not out.truncated_end.any()


def test_termination_cuts_the_return_and_zeroes_the_discount() -> None:
    # gamma 0.5, n 3, rewards [1..6], terminated at step 2:
    #   t=0: m=3, 1 + 1 + 0.75 = 2.75, discount 0
    #   t=1: m=2, 2 + 1.5 = 3.5, discount 0
    #   t=2: m=1, 3, discount 0
    #   t=3: next episode, 4 + 2.5 + 1.5 = 8.0, discount 0.125;  t=4, t=5 incomplete
    out = nstep_targets(_col([1, 2, 3, 4, 5, 6]), _flags(6, [2]), _flags(6, []), 0.5, 3)
    np.testing.assert_array_equal(out.complete[:, 0], [True, True, True, True, False, False])
    np.testing.assert_allclose(out.returns[:4, 0], [2.75, 3.5, 3.0, 8.0], rtol=1e-6)
    np.testing.assert_allclose(out.discount[:4, 0], [0.0, 0.0, 0.0, 0.125], rtol=1e-6)
    np.testing.assert_array_equal(out.horizon[:4, 0], [3, 2, 1, 3])
    assert not out.truncated_end.any()


def test_truncation_cuts_the_return_and_bootstraps() -> None:
    # gamma 0.5, n 3, rewards [1..5], truncated at step 1:
    #   t=0: m=2, 1 + 0.5*2 = 2, discount 0.25, from step 1's final observation
    #   t=1: m=1, 2, discount 0.5, from step 1's final observation
    #   t=2: m=3, 3 + 2 + 1.25 = 6.25, discount 0.125;  t=3, t=4 incomplete
    out = nstep_targets(_col([1, 2, 3, 4, 5]), _flags(5, []), _flags(5, [1]), 0.5, 3)
    np.testing.assert_array_equal(out.complete[:, 0], [True, True, True, False, False])
    np.testing.assert_allclose(out.returns[:3, 0], [2.0, 2.0, 6.25], rtol=1e-6)
    np.testing.assert_allclose(out.discount[:3, 0], [0.25, 0.5, 0.125], rtol=1e-6)
    np.testing.assert_array_equal(out.horizon[:3, 0], [2, 1, 3])
    np.testing.assert_array_equal(out.truncated_end[:3, 0], [True, True, False])


def test_terminated_and_truncated_at_once_counts_as_termination() -> None:
    out = nstep_targets(_col([1, 2]), _flags(2, [0]), _flags(2, [0]), 0.5, 2)
    assert out.discount[0, 0] == 0.0
    assert not out.truncated_end[0, 0]


def test_end_of_window_complete_only_when_the_episode_ends_inside() -> None:
    # gamma 0.5, n 3, rewards [1..5], terminated at the last step 4:
    #   t=2: m=3, 3 + 2 + 1.25 = 6.25;  t=3: m=2, 4 + 2.5 = 6.5;  t=4: m=1, 5 (all discount 0)
    # so every start is complete, although the window ends n - 1 steps after t=2.
    out = nstep_targets(_col([1, 2, 3, 4, 5]), _flags(5, [4]), _flags(5, []), 0.5, 3)
    assert out.complete.all()
    np.testing.assert_allclose(out.returns[2:, 0], [6.25, 6.5, 5.0], rtol=1e-6)
    np.testing.assert_array_equal(out.discount[2:, 0], [0.0, 0.0, 0.0])
    np.testing.assert_array_equal(out.horizon[2:, 0], [3, 2, 1])
    # The same window truncated at step 3: t=3 (m=1) is complete, t=4 is not.
    out = nstep_targets(_col([1, 2, 3, 4, 5]), _flags(5, []), _flags(5, [3]), 0.5, 3)
    np.testing.assert_array_equal(out.complete[:, 0], [True, True, True, True, False])
    np.testing.assert_allclose(out.returns[1:4, 0], [2 + 1.5 + 1, 3 + 2, 4], rtol=1e-6)
    np.testing.assert_allclose(out.discount[1:4, 0], [0.125, 0.25, 0.5], rtol=1e-6)


def test_one_step() -> None:
    rewards = _col([1.5, -2.0, 3.0, 0.25])
    out = nstep_targets(rewards, _flags(4, [1]), _flags(4, [2]), 0.9, 1)
    assert out.complete.all()
    np.testing.assert_array_equal(out.returns, rewards)
    np.testing.assert_allclose(out.discount[:, 0], [0.9, 0.0, 0.9, 0.9], rtol=1e-6)
    np.testing.assert_array_equal(out.horizon[:, 0], [1, 1, 1, 1])
    np.testing.assert_array_equal(out.truncated_end[:, 0], [False, False, True, False])


def test_two_columns_with_different_episode_ends() -> None:
    # gamma 0.9, n 2. Column 0 terminates at step 1, column 1 is truncated at step 3.
    #   col 0: t=0: 1 + 0.9*2 = 2.8 (disc 0); t=1: 2 (disc 0); t=2: 3 + 0.9*4 = 6.6 (0.81);
    #          t=3: 4 + 0.9*5 = 8.5 (0.81); t=4 incomplete
    #   col 1: t=0: 10 + 18 = 28; t=1: 20 + 27 = 47 (both 0.81); t=2: 30 + 36 = 66 (0.81,
    #          ends with the truncation at step 3); t=3: 40 (0.9, truncation); t=4 incomplete
    rewards = np.array([[1, 10], [2, 20], [3, 30], [4, 40], [5, 50]], dtype=np.float32)
    terminated = np.zeros((5, 2), dtype=bool)
    truncated = np.zeros((5, 2), dtype=bool)
    terminated[1, 0] = True
    truncated[3, 1] = True
    out = nstep_targets(rewards, terminated, truncated, 0.9, 2)
    np.testing.assert_array_equal(out.complete[:, 0], [True, True, True, True, False])
    np.testing.assert_array_equal(out.complete[:, 1], [True, True, True, True, False])
    expected = [[2.8, 28.0], [2.0, 47.0], [6.6, 66.0], [8.5, 40.0]]
    np.testing.assert_allclose(out.returns[:4], expected, rtol=1e-6)
    np.testing.assert_allclose(
        out.discount[:4], [[0, 0.81], [0, 0.81], [0.81, 0.81], [0.81, 0.9]], rtol=1e-6
    )
    np.testing.assert_array_equal(out.horizon[:4], [[2, 2], [1, 2], [2, 2], [2, 1]])
    np.testing.assert_array_equal(
        out.truncated_end[:4], [[False, False], [False, False], [False, True], [False, True]]
    )


@pytest.mark.numerics
def test_split_window_matches_one_long_window() -> None:
    # The caller's situation: a window of 12 steps, then the next 8 with the last n - 1 = 3
    # steps of the first prepended. Every complete start has the values of one long window.
    n, gamma, length, split = 4, 0.9, 20, 12
    rng = np.random.default_rng(3)
    rewards = rng.normal(size=(length, 3)).astype(np.float32)
    terminated = rng.random((length, 3)) < 0.1
    truncated = rng.random((length, 3)) < 0.1
    whole = nstep_targets(rewards, terminated, truncated, gamma, n)
    offset = split - (n - 1)
    first = nstep_targets(rewards[:split], terminated[:split], truncated[:split], gamma, n)
    second = nstep_targets(rewards[offset:], terminated[offset:], truncated[offset:], gamma, n)
    assert terminated.any() and truncated.any()  # the seed exercises both kinds of end
    assert not first.complete.all()  # the split really leaves starts to the next window

    covered = np.zeros_like(whole.complete)
    for part, start in ((first, 0), (second, offset)):
        rows = slice(start, start + part.complete.shape[0])
        ok = part.complete
        covered[rows] |= ok
        assert whole.complete[rows][ok].all()
        for name in ("returns", "discount"):
            np.testing.assert_allclose(
                getattr(part, name)[ok], getattr(whole, name)[rows][ok], rtol=1e-6, atol=1e-7
            )
        for name in ("horizon", "truncated_end"):
            np.testing.assert_array_equal(getattr(part, name)[ok], getattr(whole, name)[rows][ok])
    # Nothing complete in the long window is lost by the split.
    np.testing.assert_array_equal(covered, whole.complete)
    assert whole.complete.sum() > 40


def test_validation() -> None:
    r, f = _col([1.0]), _flags(1, [])
    with pytest.raises(ValueError, match="n must"):
        nstep_targets(r, f, f, 0.9, 0)
    with pytest.raises(ValueError, match="gamma"):
        nstep_targets(r, f, f, 0.0, 1)
    with pytest.raises(ValueError, match="gamma"):
        nstep_targets(r, f, f, 1.5, 1)
    with pytest.raises(ValueError, match="shape"):
        nstep_targets(r, _flags(2, []), f, 0.9, 1)
    assert isinstance(nstep_targets(r, f, f, 1.0, 1), NStep)
