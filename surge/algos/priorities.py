"""Proportional prioritised replay: a sum tree, importance weights and the beta schedule.

Pure numpy, no other surge module: the replay worker holds a `SumTree` (a `UniformSet` when
it samples uniformly) and calls these.

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

FANOUT = 32
"""Children per node of `SumTree`."""


class SumTree:
    """Priorities of `capacity` items in a tree whose nodes have up to `FANOUT` children,
    kept as each node's running sums over its children (to sample) and minima (for `min`).

    Wide rather than binary because numpy's cost is per call more than per element:
    sampling walks down ceil(log_32(capacity)) levels (3 for 10^4 items, 4 for 10^6)
    instead of log_2 (14, 20), a few calls each, and an update recomputes as few parents.
    Level D (the last) holds the items' priorities (`_leaves`); `_cums[d]` [slots, F + 1]
    holds for each node of level d < D the cumulative sums of its children's values, after
    a 0 (row j: [0, c_0, c_0 + c_1, ..., total]; node j's children are slots j * F ... j * F
    + F - 1 of level d + 1, and a node's value is its row's total), so a descent needs no
    cumsum of its own; `_mins[d]` the minimum below each slot. Slots past what is used are
    padding: sum 0, min +inf. An item never written, or written with priority 0, has sum 0
    (never sampled) and min +inf (never the minimum), so `min` is over the items that can be
    drawn.
    """

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"SumTree capacity must be at least 1, got {capacity}")
        self.capacity = int(capacity)
        F = FANOUT
        slots = [F * -(-self.capacity // F)]  # per level, from the items up: as many
        while slots[-1] > F:  # nodes as the level below needs, rounded up to F's
            slots.append(F * -(-slots[-1] // (F * F)))
        slots = [1, *slots[::-1]]
        self._leaves = np.zeros(slots[-1], dtype=np.float64)
        self._cums = [np.zeros((n, F + 1), dtype=np.float64) for n in slots[:-1]]
        self._mins = [np.full(n, np.inf, dtype=np.float64) for n in slots]
        # per level d < D, views [parents, F] of the level below: each node's children's
        # values (a node's value is its row's total) and minima
        values = [cums[:, F] for cums in self._cums[1:]] + [self._leaves]
        self._children = [v.reshape(-1, F) for v in values]
        self._children_mins = [m.reshape(-1, F) for m in self._mins[1:]]

    def update(self, indices: np.ndarray, priorities: np.ndarray) -> None:
        """Set the priorities of `indices` ([K] int) to `priorities` ([K] float, >= 0).

        Duplicate indices: the last value wins (as a sequential loop of writes would do).
        """
        idx, values, nodes = _updates(indices, priorities, self.capacity)
        if idx.size == 0:
            return
        F = FANOUT
        self._leaves[idx] = values
        # an item of priority 0 cannot be drawn, so it is never the smallest either
        self._mins[-1][idx] = np.where(values > 0, values, np.inf)
        # Recompute each parent from its children (not by adding deltas), so rounding errors
        # never accumulate over many updates; past a level's worth of parents, the whole
        # level at once is cheaper.
        for d in range(len(self._cums) - 1, -1, -1):
            cums, mins = self._cums[d], self._mins[d]
            children, below = self._children[d], self._children_mins[d]
            if nodes.size < len(children):
                nodes = nodes // F
                if nodes.size > F:  # many repeat the same parent: drop those
                    nodes = _distinct(nodes)
                cums[nodes, 1:] = np.cumsum(children[nodes], axis=1)
                mins[nodes] = below[nodes].min(axis=1)
            else:
                np.cumsum(children, axis=1, out=cums[: len(children), 1:])
                below.min(axis=1, out=mins[: len(below)])
                nodes = np.arange(len(children))

    def get(self, indices: np.ndarray) -> np.ndarray:
        """The priorities of `indices` ([K] int) as [K] float64 (0 for items never written)."""
        return self._leaves[_indices(indices, self.capacity)[0]]

    @property
    def total(self) -> float:
        """The sum of all priorities."""
        return float(self._cums[0][0, FANOUT])

    @property
    def min(self) -> float:
        """The smallest positive priority (of the items that can be drawn); +inf if none."""
        return float(self._mins[0][0])

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
        if not (u.min(initial=0.0) >= 0 and u.max(initial=0.0) <= total):  # False for NaN
            raise ValueError(f"prefix values must lie in [0, total={total}], got {u}")
        F = FANOUT
        start = np.arange(u.size) * (F + 1)  # each row's first entry in `rows.reshape(-1)`
        node = np.zeros(u.size, dtype=np.int64)
        for cums in self._cums:
            rows = cums[node]  # [K, F + 1]: 0, then the running sums of the node's children
            # the child whose slice holds u: the first whose running sum passes u (one of
            # priority 0 shares the sum before it, so is never that one); argmin of a bool
            # row is its first False, and 0 when it has none, which `past` handles
            child = (rows[:, 1:] <= u[:, None]).argmin(axis=1)
            # Rounding can leave u at or past the node's total (right edge, or mass summed in
            # another order above): take the last child with positive mass then.
            past = u >= rows[:, F]
            if past.any():
                positive = np.diff(rows[past], axis=1) > 0
                child[past] = F - 1 - positive[:, ::-1].argmax(axis=1)
            u -= rows.reshape(-1)[start + child]
            node = node * F + child
        return node

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


class UniformSet:
    """The items that can be drawn when every one is as likely (uniform replay): `SumTree`'s
    `update` and `sample` for priorities that are all 1 or 0, without a tree. Each call
    costs a few numpy calls over the items it changes or draws, whatever the capacity.

    `_items[:size]` lists the members (the items of priority > 0) in no particular order and
    `_slot[i]` is item i's place there (-1: not a member); a removal moves members from the
    list's end into the places it frees. `sample` is stratified over the items' indices as
    `SumTree.sample` is over the cumulative priorities (see there).
    """

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"UniformSet capacity must be at least 1, got {capacity}")
        self.capacity = int(capacity)
        self._items = np.zeros(self.capacity, dtype=np.int64)
        self._slot = np.full(self.capacity, -1, dtype=np.int64)
        self.size = 0

    def update(self, indices: np.ndarray, priorities: np.ndarray) -> None:
        """Items of priority > 0 become members and the others stop being ([K] int, [K]
        float >= 0; the value of a positive priority does not matter). Duplicate indices:
        the last value wins."""
        idx, values, _ = _updates(indices, priorities, self.capacity)
        member, wanted = self._slot[idx] >= 0, values > 0
        self._remove(idx[member & ~wanted])
        self._add(idx[wanted & ~member])

    def _add(self, items: np.ndarray) -> None:
        end = self.size + items.size
        self._items[self.size : end] = items
        self._slot[items] = np.arange(self.size, end)
        self.size = end

    def _remove(self, items: np.ndarray) -> None:
        if not items.size:
            return
        end = self.size - items.size
        holes = self._slot[items]
        self._slot[items] = -1
        holes = holes[holes < end]  # the places to fill, before the list's new end
        tail = self._items[end : self.size]
        movers = tail[self._slot[tail] >= 0]  # the members after it: as many as the holes
        self._items[holes] = movers
        self._slot[movers] = holes
        self.size = end

    def get(self, indices: np.ndarray) -> np.ndarray:
        """1.0 for the members among `indices` ([K] int), else 0.0, as [K] float64."""
        return (self._slot[_indices(indices, self.capacity)[0]] >= 0).astype(np.float64)

    @property
    def total(self) -> float:
        """The sum of the priorities: the number of members."""
        return float(self.size)

    @property
    def min(self) -> float:
        """1.0, or +inf when there is no member (as `SumTree.min`)."""
        return 1.0 if self.size else np.inf

    def sample(self, rng: np.random.Generator, batch: int) -> np.ndarray:
        """`batch` members, each as likely in expectation, stratified over the items'
        indices: one uniform draw in each of `batch` equal slices of [0, capacity), and a
        draw that lands on a non-member is replaced by a uniform draw from the members.
        So a batch of a full replay spreads evenly over the ring's positions, i.e. over the
        transitions' ages, as the sum tree's stratified draws did (lower variance than
        independent draws), and each member's expected count is batch / size exactly
        (1 / slice + (capacity - size) / (slice * size)). Returns [batch] int64."""
        if batch < 1:
            raise ValueError(f"batch must be at least 1, got {batch}")
        if not self.size:
            raise ValueError("cannot sample from an empty UniformSet")
        u = (np.arange(batch) + rng.random(batch)) * (self.capacity / batch)
        # (batch - 1 + r) * capacity / batch can round up to capacity itself; stay inside.
        drawn = np.minimum(u.astype(np.int64), self.capacity - 1)
        missed = self._slot[drawn] < 0
        if missed.any():
            drawn[missed] = self._items[rng.integers(0, self.size, int(missed.sum()))]
        return drawn


def _indices(indices: np.ndarray, capacity: int) -> tuple[np.ndarray, np.ndarray]:
    """`indices` as int64 (ValueError unless 1-D integers in [0, capacity)), and sorted."""
    idx = np.asarray(indices)
    if idx.ndim != 1:
        raise ValueError(f"indices must be 1-D, got shape {idx.shape}")
    if idx.size and idx.dtype.kind not in "iu":  # (np.issubdtype is slower)
        raise ValueError(f"indices must be integers, got dtype {idx.dtype}")
    idx = idx.astype(np.int64, copy=False)
    ordered = np.sort(idx)
    if idx.size and (ordered[0] < 0 or ordered[-1] >= capacity):
        raise ValueError(f"indices must lie in [0, {capacity}), got {idx}")
    return idx, ordered


def _updates(
    indices: np.ndarray, priorities: np.ndarray, capacity: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The checked arguments of an `update`: indices, priorities (float64) and the indices
    sorted, each index once (ValueError for what `update` does not take)."""
    idx, ordered = _indices(indices, capacity)
    values = np.asarray(priorities, dtype=np.float64)
    if values.shape != idx.shape:
        raise ValueError(
            f"priorities shape {values.shape} does not match indices shape {idx.shape}"
        )
    if idx.size and not (values.min() >= 0 and values.max() < np.inf):  # False for NaN
        raise ValueError(f"priorities must be finite and >= 0, got {values}")
    if idx.size > 1 and (ordered[1:] == ordered[:-1]).any():
        # numpy does not promise which duplicate a fancy assignment keeps, so keep the last
        # occurrence explicitly: np.unique's first index in the reversed array.
        idx, first_in_reversed = np.unique(idx[::-1], return_index=True)
        return idx, values[::-1][first_in_reversed], idx
    return idx, values, ordered


def _distinct(ordered: np.ndarray) -> np.ndarray:
    """The distinct values of a sorted array (cheaper than np.unique, which sorts again)."""
    if ordered.size < 2:
        return ordered
    first = np.empty(ordered.size, dtype=bool)
    first[0] = True
    np.not_equal(ordered[1:], ordered[:-1], out=first[1:])
    return ordered[first]


def importance_weights(
    probabilities: np.ndarray, size: int, beta: float, min_probability: float | None = None
) -> np.ndarray:
    """Importance-sampling weights of sampled items, normalised so that the largest is 1.

    `probabilities`: [K] float, P(i) of each sampled item; `size`: the number of items in the
    replay (N); `min_probability`: the P that gets weight 1, the smallest over the whole
    replay (tree.min / total), or None for the smallest in the batch (`replay.weight_norm`).

        w_i = (N * P(i)) ** -beta / (N * min_probability) ** -beta   in (0, 1]

    Returns [K] float32.
    """
    p = np.asarray(probabilities, dtype=np.float64)
    if size < 1:
        raise ValueError(f"size must be at least 1, got {size}")
    if beta < 0:
        raise ValueError(f"beta must be >= 0, got {beta}")
    if min_probability is None:
        min_probability = float(p.min(initial=np.inf))
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
