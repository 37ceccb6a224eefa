"""A replay shard's storage: rings of steps per env column, the n-step transitions over them,
and uniform or prioritised sampling. Pure numpy over arrays it is given: the replay worker
hands it the views of a shared-memory block (streams/replay.py), so a restarted worker finds
every committed step where its previous life left it, and rebuilds only its sum tree.

Layout. Each of the shard's C env columns has a ring of L steps: position p of column c
holds step t of that column's stream (its observation, the action, the reward, whether the
episode ended there) and, once its n-step window is complete, transition t: the return
R_t = sum_{k<m} gamma^k r_{t+k}, its discount (0 after a termination, else gamma^m) and m.
The transition's next observation is the one at position p + m of the same ring, or, when
step t + m - 1 was a truncation, that episode's final observation, kept in a small side
table. An item is (c, p), flat index c * L + p; it can be sampled while its priority is
above 0 (uniform sampling gives every complete item priority 1).

Images stored as frames (`frames`: an observation field stacked along its first axis, as
Atari's [4, 84, 84]): only the newest frame of each step is kept, and a step's stack is
rebuilt from the frames before it in its episode; the first observation of an episode keeps
its older frames in a side table of episode starts. That is 4x less memory for Atari.

Committing. `add` writes a segment's steps at each column's position, computes the n-step
transitions that became complete (the previous segment's last n - 1 starts among them),
sets their priorities, and only then moves the columns' positions (`pos`) and counters: a
worker killed inside `add` leaves positions that still point at the old end, and its next
life writes the same segment there again.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from surge.algos.nstep import nstep_targets
from surge.algos.priorities import SumTree, importance_weights

Fields = dict[str, tuple[tuple[int, ...], str]]
"""Field name -> (shape, dtype string): what the storage needs in its block."""


@dataclass(frozen=True)
class Spec:
    """What a shard stores: its columns, ring length, observation fields and action."""

    columns: int
    length: int
    """Steps per column ring."""
    obs: dict[str, tuple[tuple[int, ...], str]]
    """Observation field -> (shape, dtype)."""
    action: tuple[tuple[int, ...], str]
    segment: int
    """T: steps per segment, the most one `add` writes to a column."""
    frames: str | None = None
    """An observation field stored as its newest frame (a stack along axis 0), or None."""
    outputs: tuple[str, ...] = ()
    """Per-step policy outputs kept with the steps (e.g. DQN's `q` for first priorities)."""
    output_shapes: tuple[tuple[int, ...], ...] = ()
    sequence: int = 0
    """Sequence replay (R2D2; algos/sequence_replay.py): steps in each item, a sequence
    starting at every `segment`-th step of a column. 0: items are n-step transitions."""
    trained: int = 1
    """Transitions an item trains (1; a sequence's steps past its burn-in): what one sample
    counts for against `replay.ratio`."""
    core_size: int = 0
    """Floats of recurrent state stored at each segment's start (sequence replay)."""

    @property
    def capacity(self) -> int:
        return self.columns * self.length

    @property
    def stack(self) -> int:
        return self.obs[self.frames][0][0] if self.frames else 1

    @property
    def side(self) -> int:
        """Slots of each side table (final observations, episode starts): truncations and
        episode starts are rarer than one in 16 steps in the envs that use them; an entry
        reused while its item is still stored invalidates that item."""
        return max(64, self.capacity // 16)


def storage_fields(spec: Spec) -> Fields:
    """The arrays of a shard's storage, for its shared-memory block."""
    C, L, S = spec.columns, spec.length, spec.side
    fields: Fields = {
        "pos": ((C,), "<i8"),  # next write position of each column (committed)
        "written": ((C,), "<i8"),  # steps committed in each column, ever
        "counts": ((4,), "<i8"),  # inserted, sampled, size, generation clock
        "action": ((C, L, *spec.action[0]), spec.action[1]),
        "reward": ((C, L), "<f4"),
        "terminated": ((C, L), "|b1"),
        "truncated": ((C, L), "|b1"),
        "ret": ((C, L), "<f4"),
        "discount": ((C, L), "<f4"),
        "horizon": ((C, L), "<i4"),
        "priority": ((C, L), "<f8"),  # sampling weight p^alpha; 0: not sampleable
        "generation": ((C, L), "<i8"),  # which insert this position's item is
        "episode_step": ((C, L), "<i4"),  # steps since its episode's first observation
        "final_of": ((C, L), "<i4"),  # side slot of the final observation (-1: none)
        "final_owner": ((S, 2), "<i8"),
        "start_of": ((C, L), "<i4"),  # side slot of its episode's older frames
        "start_owner": ((S, 2), "<i8"),
        "cursors": ((2,), "<i8"),  # next final slot, next start slot
    }
    for name, (shape, dtype) in spec.obs.items():
        stored = shape[1:] if name == spec.frames else shape
        fields[f"obs/{name}"] = ((C, L, *stored), dtype)
        fields[f"final/{name}"] = ((S, *shape), dtype)
    if spec.frames:
        shape, dtype = spec.obs[spec.frames]
        fields["start_frames"] = ((S, shape[0] - 1, *shape[1:]), dtype)
    for name, shape in zip(spec.outputs, spec.output_shapes, strict=True):
        fields[f"out/{name}"] = ((C, L, *shape), "<f4")
    if spec.core_size:  # the state before each segment's first step
        fields["core"] = ((C, L // spec.segment, spec.core_size), "<f4")
    return fields


@dataclass(frozen=True)
class ReplaySetup:
    """What the replay workers of a run are built from (`RunContext.replay`): each shard's
    storage, and the algorithm's return settings."""

    shards: tuple[Spec, ...]
    gamma: float
    nstep: int
    restored: bool = False
    """A resumed run's shards start from the replay saved with its checkpoint."""


INSERTED, SAMPLED, SIZE, CLOCK = range(4)
"""`counts`: transitions inserted and sampled, items sampleable, segments added (the
generation of the next segment's items)."""


class ReplayStore:
    """One shard's replay over the arrays of `storage_fields` (see the module docstring)."""

    def __init__(
        self,
        spec: Spec,
        arrays: dict[str, np.ndarray],
        gamma: float,
        nstep: int,
        prioritized: bool,
        alpha: float,
        priority_eps: float,
        seed: int,
    ) -> None:
        self._check(spec, nstep)
        self.spec, self.a = spec, arrays
        self.gamma, self.nstep = gamma, nstep
        self.prioritized, self.alpha, self.eps = prioritized, alpha, priority_eps
        self.rng = np.random.default_rng(seed)
        self.tree = SumTree(spec.capacity)
        self.max_priority = 1.0
        self._rebuild()

    @staticmethod
    def _check(spec: Spec, nstep: int) -> None:
        if spec.length < 2 * (spec.segment + spec.stack + nstep):
            raise ValueError(
                f"replay rings of {spec.length} steps are too short for segments of "
                f"{spec.segment} steps (n={nstep}, stack {spec.stack})"
            )

    # ------------------------------------------------------------------ state

    @property
    def size(self) -> int:
        """Transitions that can be sampled."""
        return int(self.a["counts"][SIZE])

    @property
    def inserted(self) -> int:
        return int(self.a["counts"][INSERTED])

    @property
    def sampled(self) -> int:
        return int(self.a["counts"][SAMPLED])

    @property
    def per_item(self) -> int:
        """Transitions one sampled item trains: what a sample counts for in `sampled`."""
        return self.spec.trained

    @property
    def steps(self) -> int:
        """Steps committed over all columns (env steps, for a single-agent env)."""
        return int(self.a["written"].sum())

    def _rebuild(self) -> None:
        """The sum tree from the stored priorities (a new life, or a restored checkpoint).
        Positions past a column's committed end may hold half of an interrupted `add`: they
        are cleared, and `add` writes them again."""
        a = self.a
        for c in range(self.spec.columns):
            a["priority"][c, self._invalidated(int(a["pos"][c]))] = 0.0
        flat = a["priority"].reshape(-1)
        live = np.flatnonzero(flat > 0)
        if live.size:
            self.tree.update(live, flat[live])
            if self.prioritized:
                self.max_priority = float(flat[live].max()) ** (1.0 / self.alpha)
        a["counts"][SIZE] = live.size

    def _invalidated(self, pos: int | np.ndarray) -> np.ndarray:
        """Positions whose items an `add` at `pos` invalidates, [..., k]: the segment's T
        steps, the next observation after them, and the stack - 1 steps after that, whose
        frame stacks reach back into the overwritten steps."""
        reach = self.spec.segment + self.spec.stack
        return (np.asarray(pos)[..., None] + np.arange(reach)) % self.spec.length

    # ------------------------------------------------------------------ insert

    def add(self, columns: np.ndarray, steps: dict[str, np.ndarray]) -> int:
        """Append a segment of T steps to each of `columns` (shard-local column indices,
        [G]): `steps` holds `obs/<k>` [T + 1, G, ...] (the last row: the observation after
        the last step), `final_obs/<k>` [T, G, ...], `action` [T, G, ...], `reward`,
        `terminated`, `truncated` [T, G], and the policy outputs `out/<name>` [T, G, ...].
        Returns the transitions that became complete."""
        a, L = self.a, self.spec.length
        T, most = steps["reward"].shape[0], self.spec.segment
        if most < T:
            raise ValueError(f"a segment of {T} steps; the replay takes at most {most}")
        generation = int(a["counts"][CLOCK])
        pos = a["pos"][columns].copy()
        at = (pos[None, :] + np.arange(T + 1)[:, None]) % L  # [T + 1, G] positions
        cols = np.broadcast_to(columns[None, :], at.shape)
        # The oldest items are overwritten (and, past the segment's end, lose the frames
        # their stacks read): they stop being sampleable first.
        touched = self._invalidated(pos)  # [G, k]
        self._set_priority(np.broadcast_to(columns[:, None], touched.shape), touched, 0.0)
        ended_before = self._ended_before(columns, pos)
        self._write_steps(cols, at, steps, ended_before)
        inserted = self._new_items(columns, pos, T, steps, generation)
        # commit
        a["pos"][columns] = (pos + T) % L
        a["written"][columns] += T
        a["counts"][INSERTED] += inserted
        a["counts"][CLOCK] += 1
        return inserted

    def _new_items(
        self,
        columns: np.ndarray,
        pos: np.ndarray,
        T: int,
        steps: dict[str, np.ndarray],
        generation: int,
    ) -> int:
        """Complete the items the segment just written (T steps at `pos` of each column)
        makes whole: the n-step transitions over the previous n - 1 steps and the new T.
        Returns how many, what `replay.ratio` counts as inserts."""
        a, L, n = self.a, self.spec.length, self.nstep
        back = min(n - 1, int(a["written"][columns].min()))
        window = (pos[None, :] + np.arange(-back, T)[:, None]) % L  # [back + T, G]
        wcols = np.broadcast_to(columns[None, :], window.shape)
        targets = nstep_targets(
            a["reward"][wcols, window],
            a["terminated"][wcols, window],
            a["truncated"][wcols, window],
            self.gamma,
            n,
        )
        # New items: complete now, and not already complete in an earlier segment (those
        # keep their priority and generation).
        earlier = np.zeros_like(targets.complete)
        earlier[:back] = a["priority"][wcols[:back], window[:back]] > 0
        done = targets.complete & ~earlier
        ci, pi = wcols[done], window[done]
        a["ret"][ci, pi] = targets.returns[done]
        a["discount"][ci, pi] = targets.discount[done]
        a["horizon"][ci, pi] = targets.horizon[done]
        # a truncated end's bootstrap is that step's final observation (side table)
        end = (pi + targets.horizon[done] - 1) % L
        trunc = targets.truncated_end[done]
        a["final_of"][ci[~trunc], pi[~trunc]] = -1
        a["final_of"][ci[trunc], pi[trunc]] = a["final_of"][ci[trunc], end[trunc]]
        a["generation"][ci, pi] = generation
        end_of = dict(zip(columns.tolist(), ((pos + T) % L).tolist(), strict=True))
        segment_end = np.array([end_of[c] for c in ci.tolist()], np.int64)
        self._set_priority(ci, pi, self._first_priorities(ci, pi, segment_end))
        return int(done.sum())

    def _ended_before(self, columns: np.ndarray, pos: np.ndarray) -> np.ndarray:
        """[G] bool: the step before each column's end ended its episode (or there is none),
        so the segment's first observation starts an episode."""
        a, L = self.a, self.spec.length
        prev = (pos - 1) % L
        first = a["written"][columns] == 0
        return first | a["terminated"][columns, prev] | a["truncated"][columns, prev]

    def _write_steps(
        self,
        cols: np.ndarray,
        at: np.ndarray,
        steps: dict[str, np.ndarray],
        ended_before: np.ndarray,
    ) -> None:
        a, spec = self.a, self.spec
        T = at.shape[0] - 1
        head, body = (cols[:T], at[:T]), (cols, at)
        for name in spec.obs:
            obs = steps[f"obs/{name}"]  # [T + 1, G, ...]
            stored = obs[:, :, -1] if name == spec.frames else obs
            a[f"obs/{name}"][body] = stored
        a["action"][head] = steps["action"]
        a["reward"][head] = steps["reward"]
        a["terminated"][head] = steps["terminated"]
        a["truncated"][head] = steps["truncated"]
        for name in spec.outputs:
            a[f"out/{name}"][head] = steps[f"out/{name}"]
        # episode positions: 0 at each episode's first observation, counting up
        ended = steps["terminated"] | steps["truncated"]  # [T, G]
        starts = np.concatenate([ended_before[None, :], ended], axis=0)  # [T + 1, G]
        prev = a["episode_step"][cols[0], (at[0] - 1) % spec.length]
        counter = np.where(starts[0], 0, prev + 1)
        episode_step = np.empty(at.shape, np.int32)
        episode_step[0] = counter
        for t in range(1, T + 1):
            counter = np.where(starts[t], 0, counter + 1)
            episode_step[t] = counter
        a["episode_step"][body] = np.minimum(episode_step, np.iinfo(np.int32).max)
        if spec.frames:
            self._keep_starts(cols, at, starts, steps[f"obs/{spec.frames}"])
        # final observations of truncated steps, for their transitions' bootstrap
        a["final_of"][head] = -1
        tc, tp = np.nonzero(steps["truncated"] & ~steps["terminated"])
        for t, g in zip(tc.tolist(), tp.tolist(), strict=True):
            slot = self._side_slot("final", 0, int(cols[t, g]), int(at[t, g]))
            for name in spec.obs:
                a[f"final/{name}"][slot] = steps[f"final_obs/{name}"][t, g]
            a["final_of"][cols[t, g], at[t, g]] = slot

    def _keep_starts(
        self, cols: np.ndarray, at: np.ndarray, starts: np.ndarray, frames: np.ndarray
    ) -> None:
        """Episode starts keep their older frames; every step records its episode's start."""
        a, L = self.a, self.spec.length
        slot_of = np.where(
            starts[0], -1, a["start_of"][cols[0], (at[0] - 1) % L]
        )  # continuing episodes keep their start
        for t in range(at.shape[0]):
            for g in np.flatnonzero(starts[t]).tolist():
                c, p = int(cols[t, g]), int(at[t, g])
                slot = self._side_slot("start", 1, c, p)
                a["start_frames"][slot] = frames[t, g, :-1]
                slot_of[g] = slot
            a["start_of"][cols[t], at[t]] = slot_of

    def _side_slot(self, table: str, cursor: int, column: int, position: int) -> int:
        """The next slot of a side table, its previous owner's items made unsampleable."""
        a, S = self.a, self.spec.side
        slot = int(a["cursors"][cursor] % S)
        a["cursors"][cursor] += 1
        owner = a[f"{table}_owner"][slot]
        if owner[1] >= 0:
            c = int(owner[0])
            stale = self._readers(table, slot, c, int(owner[1]))
            self._set_priority(np.full(stale.shape, c), stale, 0.0)
        a[f"{table}_owner"][slot] = (column, position)
        return slot

    def _readers(self, table: str, slot: int, column: int, position: int) -> np.ndarray:
        """The items of `column` that may read side slot `slot`, written for the step at
        `position`: those up to n + stack steps before and after it that point at it."""
        L = self.spec.length
        span = np.arange(-(self.nstep + self.spec.stack), self.spec.stack + 1)
        span = (position + span) % L
        return span[self.a[f"{table}_of"][column, span] == slot]

    def _first_priorities(
        self, ci: np.ndarray, pi: np.ndarray, segment_end: np.ndarray
    ) -> np.ndarray | float:
        """New items' priorities: 1 for uniform sampling; with prioritisation the absolute
        TD error under the actors' Q-values (`out/q`, Ape-X), else the largest so far.
        `segment_end`: each item's column's end, whose observation has no Q-values yet (the
        next segment brings them): a transition bootstrapping there uses the step before."""
        if not self.prioritized:
            return 1.0
        if "q" not in self.spec.outputs:
            return self.max_priority**self.alpha
        a, L = self.a, self.spec.length
        q = a["out/q"]
        taken = a["action"][ci, pi].astype(np.int64).reshape(-1)
        q_taken = q[ci, pi, taken]
        nxt = (pi + a["horizon"][ci, pi]) % L
        nxt = np.where(nxt == segment_end, (nxt - 1) % L, nxt)
        td = a["ret"][ci, pi] + a["discount"][ci, pi] * q[ci, nxt].max(axis=-1) - q_taken
        return self._scaled(np.abs(td))

    def _scaled(self, td_abs: np.ndarray) -> np.ndarray:
        p = td_abs.astype(np.float64) + self.eps
        self.max_priority = max(self.max_priority, float(p.max(initial=0.0)))
        return p**self.alpha

    # ------------------------------------------------------------------ priorities

    def _set_priority(self, cols: np.ndarray, pos: np.ndarray, value: Any) -> None:
        cols, pos = np.asarray(cols).reshape(-1), np.asarray(pos).reshape(-1)
        if cols.size == 0:
            return
        flat, order = np.unique(cols * self.spec.length + pos, return_index=True)
        values = np.broadcast_to(np.asarray(value, np.float64), cols.shape)[order]
        stored = self.a["priority"].reshape(-1)
        before = int((stored[flat] > 0).sum())
        stored[flat] = values
        self.tree.update(flat, values)
        self.a["counts"][SIZE] += int((values > 0).sum()) - before

    def update_priorities(
        self, items: np.ndarray, generations: np.ndarray, td_abs: np.ndarray
    ) -> None:
        """New priorities from the trainer's TD errors, for the items still stored (an item
        overwritten since it was sampled has another generation, and is left alone)."""
        if not self.prioritized:
            return
        flat = self.a["generation"].reshape(-1)
        alive = (flat[items] == generations) & (self.a["priority"].reshape(-1)[items] > 0)
        cols, pos = np.divmod(items[alive], self.spec.length)
        self._set_priority(cols, pos, self._scaled(td_abs[alive]))

    # ------------------------------------------------------------------ sample

    def sample(self, batch: int, beta: float) -> dict[str, np.ndarray]:
        """A batch of transitions: `obs/<k>`, `next_obs/<k>`, `action`, `reward` (the
        n-step return), `discount`, `weight` (importance weights; 1 when uniform), `index`
        and `generation` (to send priorities back)."""
        a, spec = self.a, self.spec
        items = self.tree.sample(self.rng, batch)
        cols, pos = np.divmod(items, spec.length)
        horizon = a["horizon"][cols, pos]
        nxt = (pos + horizon) % spec.length
        final = a["final_of"][cols, pos]
        out = {
            "action": a["action"][cols, pos],
            "reward": a["ret"][cols, pos],
            "discount": a["discount"][cols, pos],
            "index": items,
            "generation": a["generation"][cols, pos],
        }
        for name in spec.obs:
            out[f"obs/{name}"] = self._observation(name, cols, pos)
            next_obs = self._observation(name, cols, nxt)
            truncated = final >= 0
            if truncated.any():
                next_obs[truncated] = a[f"final/{name}"][final[truncated]]
            out[f"next_obs/{name}"] = next_obs
        if self.prioritized:
            probabilities = a["priority"][cols, pos] / self.tree.total
            smallest = self.tree.min / self.tree.total
            out["weight"] = importance_weights(probabilities, self.size, beta, smallest)
        else:
            out["weight"] = np.ones(batch, np.float32)
        a["counts"][SAMPLED] += batch
        return out

    def _observation(self, name: str, cols: np.ndarray, pos: np.ndarray) -> np.ndarray:
        """Observations of field `name` at (cols, pos); a frame stack is rebuilt from the
        frames before it in its episode and its episode start's older frames."""
        a, spec = self.a, self.spec
        stored = a[f"obs/{name}"]
        if name != spec.frames:
            return stored[cols, pos]
        S, L = spec.stack, spec.length
        since = np.minimum(a["episode_step"][cols, pos], S - 1)[:, None]  # [B, 1]
        age = (S - 1 - np.arange(S))[None, :]  # [1, S]: how far back each slot is
        own = stored[cols[:, None], (pos[:, None] - np.minimum(age, since)) % L]
        start = a["start_frames"][a["start_of"][cols, pos]]  # [B, S - 1, *frame]
        frame = (1,) * (start.ndim - 2)  # the frame's own axes, for broadcasting
        offset = np.minimum(np.arange(S)[None, :] + since, S - 2)
        padded = np.take_along_axis(start, offset.reshape(offset.shape + frame), axis=1)
        own_frame = np.broadcast_to(age <= since, (len(pos), S)).reshape((len(pos), S, *frame))
        return np.where(own_frame, own, padded)

    def __repr__(self) -> str:  # for debugging
        return f"ReplayStore(size={self.size}, inserted={self.inserted}, sampled={self.sampled})"


def ring_length(capacity: int, columns: int) -> int:
    """Steps per column ring for `capacity` transitions over `columns` columns."""
    return max(1, math.ceil(capacity / columns))
