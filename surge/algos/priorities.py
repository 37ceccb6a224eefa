"""Proportional prioritised replay: a sum tree, importance weights and the beta schedule.

Pure numpy, no other surge module: the replay worker holds a `SumTree` and calls these.

- Sampling item i with probability P(i) = p_i / sum_k p_k, where the caller stores
  p_i = priority_i ** alpha: the proportional variant of Schaul et al. 2016, "Prioritized
  Experience Replay" (section 3.3). `SumTree.sample` is the stratified sampling of their
  implementation (appendix B.2.1): the range [0, total) is cut into `batch` equal slices
  and one value is drawn uniformly in each, which lowers the variance of the batch.
- Importance-sampling weights w_i = (N * P(i)) ** -beta, divided by the largest weight so
  that they only ever scale updates down (Schaul et al. 2016, section 3.4), with beta
  annealed linearly to 1 over training. Horgan et al. 2018 (Ape-X) use the same weights
  and the same tree, sharded over a replay worker.
"""

from __future__ import annotations

import numpy as np


class SumTree:
    """Priorities of `capacity` items in an array-backed binary tree of sums and of minima.

    The tree has `size` leaves, the smallest power of two >= capacity, stored at
    [size, 2 * size) of two float64 arrays; node k has children 2k and 2k + 1 and the root is
    node 1. Leaves past `capacity` are padding: sum 0, min +inf. An item never written, or
    written with priority 0, has sum 0 (never sampled) and min +inf (never the minimum), so
    `min` is over the items that can be drawn.
    """

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"SumTree capacity must be at least 1, got {capacity}")
        self.capacity = int(capacity)
        self._size = 1 << (self.capacity - 1).bit_length()
        self._depth = self._size.bit_length() - 1  # levels below the root
        self._sums = np.zeros(2 * self._size, dtype=np.float64)
        self._mins = np.full(2 * self._size, np.inf, dtype=np.float64)

    def _check_indices(self, indices: np.ndarray) -> np.ndarray:
        idx = np.asarray(indices)
        if idx.ndim != 1:
            raise ValueError(f"indices must be 1-D, got shape {idx.shape}")
        if idx.size and not np.issubdtype(idx.dtype, np.integer):
            raise ValueError(f"indices must be integers, got dtype {idx.dtype}")
        idx = idx.astype(np.int64)
        if idx.size and (idx.min() < 0 or idx.max() >= self.capacity):
            raise ValueError(f"indices must lie in [0, {self.capacity}), got {idx}")
        return idx

    def update(self, indices: np.ndarray, priorities: np.ndarray) -> None:
        """Set the priorities of `indices` ([K] int) to `priorities` ([K] float, >= 0).

        Duplicate indices: the last value wins (as a sequential loop of writes would do).
        """
        idx = self._check_indices(indices)
        values = np.asarray(priorities, dtype=np.float64)
        if values.shape != idx.shape:
            raise ValueError(
                f"priorities shape {values.shape} does not match indices shape {idx.shape}"
            )
        if not np.all(np.isfinite(values)) or np.any(values < 0):
            raise ValueError(f"priorities must be finite and >= 0, got {values}")
        if idx.size == 0:
            return
        # numpy does not promise which duplicate a fancy assignment keeps, so keep the last
        # occurrence explicitly: np.unique's first index in the reversed array.
        unique, first_in_reversed = np.unique(idx[::-1], return_index=True)
        values = values[::-1][first_in_reversed]
        nodes = unique + self._size
        self._sums[nodes] = values
        # an item of priority 0 cannot be drawn, so it is never the smallest either
        self._mins[nodes] = np.where(values > 0, values, np.inf)
        # Recompute each parent from its children (not by adding deltas), so rounding errors
        # never accumulate over many updates.
        for _ in range(self._depth):
            nodes = np.unique(nodes >> 1)
            left, right = 2 * nodes, 2 * nodes + 1
            self._sums[nodes] = self._sums[left] + self._sums[right]
            self._mins[nodes] = np.minimum(self._mins[left], self._mins[right])

    def get(self, indices: np.ndarray) -> np.ndarray:
        """The priorities of `indices` ([K] int) as [K] float64 (0 for items never written)."""
        return self._sums[self._check_indices(indices) + self._size].copy()

    @property
    def total(self) -> float:
        """The sum of all priorities."""
        return float(self._sums[1])

    @property
    def min(self) -> float:
        """The smallest positive priority (of the items that can be drawn); +inf if none."""
        return float(self._mins[1])

    def find(self, prefix: np.ndarray) -> np.ndarray:
        """For each cumulative value u of `prefix` ([K] float), the item i with
        cumsum(p)[i - 1] <= u < cumsum(p)[i], as [K] int64.

        u must lie in [0, total]; u == total (or a value that rounding pushed onto the
        right edge) gives the last item with a positive priority. An item of priority 0 is
        never returned.
        """
        u = np.array(prefix, dtype=np.float64, copy=True)
        if u.ndim != 1:
            raise ValueError(f"prefix must be 1-D, got shape {u.shape}")
        total = self.total
        if not total > 0:
            raise ValueError("cannot search an empty SumTree (total priority is 0)")
        if not np.all(np.isfinite(u)) or np.any(u < 0) or np.any(u > total):
            raise ValueError(f"prefix values must lie in [0, total={total}], got {u}")
        node = np.ones(u.shape, dtype=np.int64)
        for _ in range(self._depth):
            left = self._sums[2 * node]
            right = self._sums[2 * node + 1]
            # Rounding can leave u >= left with nothing on the right (right edge of the tree,
            # or items of priority 0 there); stepping right would then return an item of
            # priority 0. Only step into subtrees with positive mass: since the parent has
            # positive mass, the other child then has too.
            go_right = (u >= left) & (right > 0)
            u = np.where(go_right, u - left, u)
            node = 2 * node + go_right
        return node - self._size

    def sample(self, rng: np.random.Generator, batch: int) -> np.ndarray:
        """`batch` items drawn with probability p_i / total, stratified: one uniform value in
        each of `batch` equal slices of [0, total). Returns [batch] int64."""
        if batch < 1:
            raise ValueError(f"batch must be at least 1, got {batch}")
        total = self.total
        if not total > 0:
            raise ValueError("cannot sample from an empty SumTree (total priority is 0)")
        u = (np.arange(batch) + rng.random(batch)) * (total / batch)
        # (batch - 1 + r) * total / batch can round up to total itself; stay inside.
        return self.find(np.minimum(u, total))


def importance_weights(
    probabilities: np.ndarray, size: int, beta: float, min_probability: float
) -> np.ndarray:
    """Importance-sampling weights of sampled items, normalised so that the largest is 1.

    `probabilities`: [K] float, P(i) of each sampled item; `size`: the number of items in the
    replay (N); `min_probability`: the smallest P over the whole replay (tree.min / total).

        w_i = (N * P(i)) ** -beta / (N * min_probability) ** -beta   in (0, 1]

    Returns [K] float32.
    """
    p = np.asarray(probabilities, dtype=np.float64)
    if size < 1:
        raise ValueError(f"size must be at least 1, got {size}")
    if beta < 0:
        raise ValueError(f"beta must be >= 0, got {beta}")
    if not min_probability > 0:
        raise ValueError(f"min_probability must be > 0, got {min_probability}")
    if np.any(p < min_probability):
        raise ValueError(
            f"probabilities must be >= min_probability={min_probability} "
            f"(else weights exceed 1), got {p}"
        )
    # The N's cancel: (N P / (N P_min)) ** -beta = (P_min / P) ** beta, which also avoids
    # overflow of (N P_min) ** -beta for tiny P_min.
    return ((min_probability / p) ** beta).astype(np.float32)


def annealed_beta(beta0: float, progress: float) -> float:
    """beta annealed linearly from `beta0` at progress 0 to 1 at progress >= 1."""
    return beta0 + (1.0 - beta0) * min(max(progress, 0.0), 1.0)
