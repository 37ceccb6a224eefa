"""Proportional prioritised replay (surge/algos/priorities.py) against hand-computed numbers
and a chi-square goodness-of-fit test of the sampler."""

from __future__ import annotations

import numpy as np
import pytest

from surge.algos.priorities import SumTree, UniformSet, annealed_beta, importance_weights

ALPHA = 0.6
DRAWS = 100_000
BATCH = 250  # 400 batches of 250 = 10^5 draws
# The 0.999 quantile of the chi-square distribution with 49 degrees of freedom (50 items),
# from a table (scipy.stats.chi2.ppf(0.999, 49) = 85.35): a correct sampler exceeds it with
# probability 0.001 (and the seed is fixed, so the test is deterministic).
CHI2_CRITICAL_49_DOF = 85.35


def _chi_square(counts: np.ndarray, probabilities: np.ndarray) -> float:
    expected = counts.sum() * probabilities
    return float(np.sum((counts - expected) ** 2 / expected))


def _priorities() -> np.ndarray:
    # 50 priorities from 0.1 to 5.0: stored as p ** 0.6, that is 0.25 to 2.6.
    return np.linspace(0.1, 5.0, 50)


def _tree_counts(tree: SumTree, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    counts = np.zeros(tree.capacity, dtype=np.int64)
    for _ in range(DRAWS // BATCH):
        counts += np.bincount(tree.sample(rng, BATCH), minlength=tree.capacity)
    return counts


def test_sample_matches_priorities_chi_square() -> None:
    p = _priorities() ** ALPHA
    tree = SumTree(len(p))
    tree.update(np.arange(len(p)), p)
    counts = _tree_counts(tree, seed=0)
    assert counts.sum() == DRAWS
    assert _chi_square(counts, p / p.sum()) < CHI2_CRITICAL_49_DOF


def test_chi_square_check_rejects_a_wrong_distribution() -> None:
    # The check has power: uniform sampling (or priorities without the alpha) fails it.
    p = _priorities() ** ALPHA
    expected = p / p.sum()
    rng = np.random.default_rng(0)
    uniform = np.bincount(rng.integers(0, len(p), DRAWS), minlength=len(p))
    assert _chi_square(uniform, expected) > CHI2_CRITICAL_49_DOF

    tree = SumTree(len(p))
    tree.update(np.arange(len(p)), _priorities())  # alpha forgotten
    assert _chi_square(_tree_counts(tree, seed=0), expected) > CHI2_CRITICAL_49_DOF


def test_update_total_min_get() -> None:
    tree = SumTree(4)
    assert tree.total == 0.0
    assert tree.min == np.inf
    tree.update(np.array([0, 2]), np.array([1.5, 0.5]))
    assert tree.total == 2.0
    assert tree.min == 0.5  # item 1 and 3 were never written: they do not count
    np.testing.assert_array_equal(tree.get(np.array([0, 1, 2, 3])), [1.5, 0.0, 0.5, 0.0])
    tree.update(np.array([2, 3]), np.array([4.0, 2.0]))
    assert tree.total == 7.5  # 1.5 + 4 + 2
    assert tree.min == 1.5
    tree.update(np.array([1]), np.array([0.25]))
    assert tree.total == 7.75
    assert tree.min == 0.25
    tree.update(np.array([1]), np.array([0.0]))  # back to 0: it can no longer be drawn
    assert tree.total == 7.5
    assert tree.min == 1.5


def test_update_duplicate_index_last_value_wins() -> None:
    tree = SumTree(4)
    tree.update(np.array([1, 3, 1, 1]), np.array([5.0, 2.0, 7.0, 3.0]))
    np.testing.assert_array_equal(tree.get(np.array([0, 1, 2, 3])), [0.0, 3.0, 0.0, 2.0])
    assert tree.total == 5.0
    assert tree.min == 2.0


def test_find_hand_values() -> None:
    # cumsum of [1, 2, 3, 4] = [1, 3, 6, 10]: item i holds [cumsum[i-1], cumsum[i]).
    tree = SumTree(4)
    tree.update(np.arange(4), np.array([1.0, 2.0, 3.0, 4.0]))
    u = np.array([0.0, 0.999, 1.0, 2.5, 3.0, 5.99, 6.0, 9.99, 10.0])
    np.testing.assert_array_equal(tree.find(u), [0, 0, 1, 1, 2, 2, 3, 3, 3])


@pytest.mark.parametrize("capacity", [5, 7])
def test_capacity_not_a_power_of_two(capacity: int) -> None:
    tree = SumTree(capacity)
    p = np.arange(1, capacity + 1, dtype=np.float64)  # 1, 2, ..., capacity
    tree.update(np.arange(capacity), p)
    assert tree.total == capacity * (capacity + 1) / 2
    assert tree.min == 1.0
    starts = np.concatenate([[0.0], np.cumsum(p)[:-1]])
    # The start of each item's slice, and just below its end, both find it.
    np.testing.assert_array_equal(tree.find(starts), np.arange(capacity))
    np.testing.assert_array_equal(tree.find(starts + p - 1e-9), np.arange(capacity))
    # The right edge is the last item, never a padding leaf past the capacity.
    assert tree.find(np.array([tree.total])).tolist() == [capacity - 1]
    drawn = tree.sample(np.random.default_rng(1), 1000)
    assert drawn.min() >= 0 and drawn.max() < capacity


def test_zero_priority_and_unwritten_items_are_never_sampled() -> None:
    tree = SumTree(8)
    # Item 3 and 7 never written; item 5 written with priority 0; item 6 is last with mass.
    tree.update(np.array([0, 1, 2, 4, 5, 6]), np.array([0.1, 0.2, 0.3, 0.1, 0.0, 0.3]))
    drawn = tree.sample(np.random.default_rng(2), 20_000)
    assert set(np.unique(drawn).tolist()) == {0, 1, 2, 4, 6}
    # Rounding at the right edge: u at (or rounded onto) the total must not fall on item 7.
    u = np.array([tree.total, np.nextafter(tree.total, 0.0)])
    np.testing.assert_array_equal(tree.find(u), [6, 6])
    # A zero-priority item at the very end of the tree with mass before it.
    tail = SumTree(5)
    tail.update(np.arange(5), np.array([0.1, 0.2, 0.3, 0.4, 0.0]))
    assert tail.find(np.array([tail.total])).tolist() == [3]


def test_sample_is_stratified() -> None:
    # Four equal priorities and a batch of four: one draw per quarter, so each item once.
    tree = SumTree(4)
    tree.update(np.arange(4), np.ones(4))
    for seed in range(5):
        drawn = tree.sample(np.random.default_rng(seed), 4)
        np.testing.assert_array_equal(drawn, [0, 1, 2, 3])


def test_errors() -> None:
    with pytest.raises(ValueError, match="capacity"):
        SumTree(0)
    tree = SumTree(3)
    with pytest.raises(ValueError, match="empty"):
        tree.sample(np.random.default_rng(0), 4)
    with pytest.raises(ValueError, match=">= 0"):
        tree.update(np.array([0]), np.array([-1.0]))
    with pytest.raises(ValueError, match="finite"):
        tree.update(np.array([0]), np.array([np.nan]))
    with pytest.raises(ValueError, match="finite"):
        tree.update(np.array([0]), np.array([np.inf]))
    with pytest.raises(ValueError, match="indices"):
        tree.update(np.array([3]), np.array([1.0]))
    tree.update(np.array([0]), np.array([1.0]))
    with pytest.raises(ValueError, match="prefix"):
        tree.find(np.array([2.0]))


def test_importance_weights_hand_values() -> None:
    # size 4, P = [0.1, 0.2, 0.3, 0.4], beta 0.5, min P 0.1:
    #   w_i = (4 P_i) ** -0.5 / (4 * 0.1) ** -0.5 = (0.1 / P_i) ** 0.5
    #       = [1, sqrt(1/2), sqrt(1/3), sqrt(1/4)] = [1, 0.70710678, 0.57735027, 0.5]
    w = importance_weights(np.array([0.1, 0.2, 0.3, 0.4]), 4, 0.5, 0.1)
    assert w.dtype == np.float32
    np.testing.assert_allclose(w, [1.0, 0.70710678, 0.57735027, 0.5], rtol=1e-6)
    # beta 1: w_i = 0.1 / P_i; beta 0: all ones.
    w1 = importance_weights(np.array([0.1, 0.4]), 4, 1.0, 0.1)
    np.testing.assert_allclose(w1, [1.0, 0.25], rtol=1e-6)
    np.testing.assert_array_equal(importance_weights(np.array([0.2, 0.4]), 4, 0.0, 0.1), [1, 1])
    # no min P (`replay.weight_norm: batch`): the batch's smallest P, 0.2, gets weight 1
    wb = importance_weights(np.array([0.4, 0.2, 0.3]), 4, 1.0)
    np.testing.assert_allclose(wb, [0.5, 1.0, 2 / 3], rtol=1e-6)


def test_annealed_beta() -> None:
    assert annealed_beta(0.4, 0.0) == pytest.approx(0.4)
    assert annealed_beta(0.4, 0.5) == pytest.approx(0.7)
    assert annealed_beta(0.4, 1.0) == pytest.approx(1.0)
    assert annealed_beta(0.4, 2.0) == pytest.approx(1.0)
    assert annealed_beta(0.4, -1.0) == pytest.approx(0.4)


@pytest.mark.parametrize("capacity", [1, 31, 33, 1000, 40_000])
def test_sum_tree_matches_a_brute_force_search(capacity: int) -> None:
    """Trees of one to four levels (32 children a node), after many updates (zeros and
    repeated indices among them), against cumsum and searchsorted. Integer priorities keep
    every sum exact, so the two must agree to the item."""
    rng = np.random.default_rng(capacity)
    tree, p = SumTree(capacity), np.zeros(capacity)
    for k in range(30):
        size = [1, 11, 128, capacity][k % 4]
        idx = rng.integers(0, capacity, size)
        values = rng.integers(0, 4, size).astype(np.float64)  # a quarter are 0
        tree.update(idx, values)
        for i, v in zip(idx.tolist(), values.tolist(), strict=True):
            p[i] = v  # the last write of an index wins
        assert tree.total == p.sum()
        assert tree.min == (p[p > 0].min() if (p > 0).any() else np.inf)
        np.testing.assert_array_equal(tree.get(np.arange(capacity)), p)
        if not p.sum():
            continue
        edges = np.cumsum(p)
        u = np.concatenate([rng.integers(0, p.sum(), 200) + rng.random(200), [0.0, p.sum()]])
        want = np.searchsorted(edges, np.minimum(u, np.nextafter(p.sum(), 0)), side="right")
        np.testing.assert_array_equal(tree.find(u), want)
        assert (p[tree.sample(rng, 64)] > 0).all()


def test_uniform_set_keeps_exactly_the_items_of_positive_priority() -> None:
    rng = np.random.default_rng(0)
    capacity = 500
    members, wanted = UniformSet(capacity), np.zeros(capacity, bool)
    for k in range(200):
        idx = rng.integers(0, capacity, [1, 11, 60][k % 3])
        values = rng.random(idx.size) * (rng.random(idx.size) < 0.6)
        members.update(idx, values)
        for i, v in zip(idx.tolist(), values.tolist(), strict=True):
            wanted[i] = v > 0  # the last write of an index wins
        assert members.size == members.total == wanted.sum()
        np.testing.assert_array_equal(members.get(np.arange(capacity)), wanted)
        if members.size:
            drawn = members.sample(rng, 32)
            assert wanted[drawn].all()
    with pytest.raises(ValueError, match="indices"):
        members.update(np.array([capacity]), np.array([1.0]))
    members.update(np.flatnonzero(wanted), np.zeros(wanted.sum()))
    assert members.size == 0 and members.min == np.inf
    with pytest.raises(ValueError, match="empty"):
        members.sample(rng, 4)


def test_uniform_set_spreads_a_batch_over_the_positions_of_a_full_replay() -> None:
    members = UniformSet(200)
    members.update(np.arange(200), np.ones(200))
    drawn = members.sample(np.random.default_rng(0), 50)
    np.testing.assert_array_equal(drawn // 4, np.arange(50))  # one in each slice of 4


def test_uniform_set_draws_every_member_alike_chi_square() -> None:
    members = UniformSet(200)
    members.update(np.arange(0, 200, 4), np.ones(50))  # 50 members, spread out
    rng = np.random.default_rng(0)
    counts = np.zeros(200, dtype=np.int64)
    for _ in range(DRAWS // BATCH):
        counts += np.bincount(members.sample(rng, BATCH), minlength=200)
    assert counts[np.arange(200) % 4 != 0].sum() == 0
    assert _chi_square(counts[::4], np.full(50, 1 / 50)) < CHI2_CRITICAL_49_DOF
