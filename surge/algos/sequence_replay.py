"""Sequence replay (R2D2, Kapturowski et al. 2019): the replay of algos/transition_store.py
whose items are fixed-length sequences of steps with the recurrent state stored at their start.

Layout. The steps are stored exactly as for transitions (rings of L steps per env column,
frames one per step). An item is a sequence of `spec.sequence` steps starting at a position
p with p % T == 0 (T = `spec.segment`, the steps of one segment; L is a multiple of T), so
consecutive sequences of a column overlap by sequence - T steps (R2D2: 80 steps every 40).
Beside the steps, `core` [C, L / T, S] keeps the state each segment's first step was acted
from (the actors' `core0`): a sampled sequence is unrolled from the state stored at its
start, which an older version computed, hence the learner's burn-in.

A sequence becomes an item when its last step is written: with every segment of a column,
the sequence that ends there. Writing a segment at p invalidates every sequence that
contains one of its steps (or reads one of them as an older frame of a stack).

Sampling returns whole sequences, [B, steps, ...], with what the learner needs per step:
the n-step return, discount and horizon of each start (algos/nstep.py over the sequence
itself, so windows stop at its end), `mask` (the steps whose n-step window and bootstrap
observation lie inside the sequence, and whose window does not end in a truncation, whose
bootstrap would need the final observation of an episode in the middle of an unroll: the
other steps do not train), and `resets` (the state
is zeroed before step t when the episode ended at t - 1, models/recurrent_state.py).

New sequences get the largest priority so far; the learner sends back R2D2's sequence
priority (algos/dqn.py `sequence_priority`). `inserted` counts steps and `sampled` counts
`spec.trained` (the steps past the burn-in) per sequence, so `replay.ratio` keeps its
meaning: transitions trained per transition inserted.
"""

from __future__ import annotations

import numpy as np

from surge.algos.nstep import nstep_targets
from surge.algos.transition_store import SAMPLED, Fields, ReplayStore, Spec
from surge.models.recurrent_state import resets_before


class SequenceStore(ReplayStore):
    """A shard's replay of sequences (see the module docstring)."""

    @staticmethod
    def _check(spec: Spec, nstep: int) -> None:
        if spec.sequence < spec.segment or spec.sequence % spec.segment:
            raise ValueError(
                f"sequences of {spec.sequence} steps start every {spec.segment} steps: the "
                "length must be a multiple of the segment's"
            )
        if spec.length % spec.segment or spec.length < spec.sequence + 2 * spec.segment:
            raise ValueError(
                f"replay rings of {spec.length} steps do not hold sequences of "
                f"{spec.sequence} steps written {spec.segment} at a time"
            )

    def _invalidated(self, pos: int | np.ndarray) -> np.ndarray:
        """Starts of the sequences an `add` at `pos` breaks: those containing one of its T
        steps, or whose first frames' stacks reach back into them."""
        T, spec = self.spec.segment, self.spec
        first = -(spec.sequence // T) + 1  # the oldest start still containing pos
        # starts after it: the next one (its first observation is the segment's last
        # row) and those whose first frames' stacks reach back into the segment
        last = (T + spec.stack - 1) // T
        offsets = np.unique(np.arange(first, last + 1) * T % spec.length)  # each once
        return (np.asarray(pos)[..., None] + offsets) % spec.length

    def _new_items(
        self,
        columns: np.ndarray,
        pos: np.ndarray,
        T: int,
        steps: dict[str, np.ndarray],
        generation: int,
    ) -> int:
        """Store the segment's starting state and make the sequence that ends with it an
        item. Returns the steps written (inserts are counted in steps)."""
        a, spec, L = self.a, self.spec, self.spec.length
        if spec.segment != T or (pos % T).any():
            raise ValueError(
                f"sequence replay takes whole segments of {spec.segment} steps, got {T}"
            )
        a["core"][columns, pos // T] = steps["core0"][0]
        whole = a["written"][columns] + T >= spec.sequence
        if whole.any():
            ci = columns[whole]
            pi = (pos[whole] + T - spec.sequence) % L
            a["generation"][ci, pi] = generation
            first = 1.0 if not self.prioritized else self.max_priority**self.alpha
            self._set_priority(ci * L + pi, first)
        return T * len(columns)

    def _readers(self, table: str, slot: int, column: int, position: int) -> np.ndarray:
        """Sequences never read final observations; an episode start's older frames are read
        by the stack - 1 steps from it, and so by the sequences containing them."""
        if table == "final":
            return np.zeros(0, np.int64)
        T = self.spec.segment
        span = position + np.arange(-self.spec.sequence + 1, self.spec.stack - 1)
        return np.unique((span - span % T) % self.spec.length)

    @staticmethod
    def item_fields(spec: Spec) -> Fields:
        steps = (spec.sequence,)
        fields: Fields = {"action": ((*steps, *spec.action[0]), spec.action[1])}
        for key, dtype in [
            ("reward", "<f4"),
            ("discount", "<f4"),
            ("horizon", "<i8"),
            ("mask", "|b1"),
            ("resets", "|b1"),
        ]:
            fields[key] = (steps, dtype)
        fields["core0"] = ((spec.core_size,), "<f4")
        fields["weight"] = ((), "<f4")
        fields["index"] = fields["generation"] = ((), "<i8")
        for name, (shape, dtype) in spec.obs.items():
            fields[f"obs/{name}"] = ((*steps, *shape), dtype)
        return fields

    def sample(
        self, batch: int, beta: float, out: dict[str, np.ndarray] | None = None
    ) -> dict[str, np.ndarray]:
        """A batch of sequences: `obs/<k>` [B, steps, ...], `action` [B, steps, ...],
        `reward` (n-step returns), `discount`, `horizon`, `mask`, `resets` [B, steps],
        `core0` [B, S], `weight`, `index`, `generation` [B]; into `out` when given (as
        `ReplayStore.sample`)."""
        a, spec = self.a, self.spec
        items = self.tree.sample(self.rng, batch)
        cols, pos = np.divmod(items, spec.length)
        at = (pos[:, None] + np.arange(spec.sequence)[None, :]) % spec.length  # [B, steps]
        cat = np.broadcast_to(cols[:, None], at.shape)
        terminated, truncated = a["terminated"][cat, at].T, a["truncated"][cat, at].T
        targets = nstep_targets(
            a["reward"][cat, at].T, terminated, truncated, self.gamma, self.nstep
        )
        # a step trains when its return lies in the sequence and so does its bootstrap's
        # observation (none after a termination), and it is not a truncated end's
        inside = np.arange(spec.sequence)[:, None] + targets.horizon < spec.sequence
        bootstraps = inside | (targets.discount == 0)
        trains = targets.complete & bootstraps & ~targets.truncated_end
        result = {
            "action": a["action"][cat, at],
            "reward": targets.returns.T,
            "discount": targets.discount.T,
            "horizon": targets.horizon.T,
            "mask": trains.T,
            "resets": resets_before(terminated, truncated).T,
            "core0": a["core"][cols, pos // spec.segment],
            "index": items,
            "generation": a["generation"][cols, pos],
        }
        for name, (shape, dtype) in spec.obs.items():
            obs = np.empty((at.size, *shape), dtype)
            self._observation(name, (cat * spec.length + at).reshape(-1), obs)
            result[f"obs/{name}"] = obs.reshape(*at.shape, *shape)
        if self.prioritized:
            result["weight"] = self._weights(a["priority"][cols, pos], beta)
        else:
            result["weight"] = np.ones(batch, np.float32)
        a["counts"][SAMPLED] += batch * spec.trained
        return self.delivered(result, out)
