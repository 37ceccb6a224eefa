"""A replay shard's storage: rings of steps per env column, the n-step transitions over them,
and uniform or prioritised sampling. Pure numpy over arrays it is given: the replay worker
hands it the views of a shared-memory block (streams/replay_blocks.py), so a restarted worker finds
every committed step where its previous life left it, and rebuilds only its sampler (a sum
tree; for uniform sampling, the set of sampleable items: algos/priorities.py).

Layout. Each of the shard's C env columns has a ring of L steps: position p of column c
holds step t of that column's stream (its observation, the action, the reward, whether the
episode ended there) and, once its n-step window is complete, transition t: the return
R_t = sum_{k<m} gamma^k r_{t+k}, its discount (0 after a termination, else gamma^m) and m.
The transition's next observation is the one at position p + m of the same ring, or, when
step t + m - 1 was a truncation, that episode's final observation, kept in a small side
table. An item is (c, p), flat index c * L + p; it can be sampled while its priority is
above 0 (uniform sampling gives every complete item priority 1). The per-position arrays
are also read through [C * L, ...] views (`by_item`), indexed by flat index: one index array
per read, and a sample writes straight into the arrays it is given (the worker's row).

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

from surge.algos.nstep import NStep, nstep_targets
from surge.algos.priorities import SumTree, UniformSet, importance_weights

Fields = dict[str, tuple[tuple[int, ...], str]]
"""Field name -> (shape, dtype string): what the storage needs in its block."""
EPISODE_QUEUE = 4096
"""Finished episodes a shard can hold for the trainer's logs (the oldest go first)."""


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
    store: str = "transitions"
    """The kind of items, chosen by the algorithm (algos/replay_stores.py): `transitions`
    (n-step, this module), `sequences` (R2D2, algos/sequence_replay.py) or `episodes` (all
    agents of an env's whole episode, algos/episode_store.py)."""
    agents: int = 1
    """Columns one item spans: an env's agents (episode items)."""
    episodes: int = 0
    """Episode items: slots of the shard's ring of episodes."""
    episode_limit: int = 0
    """Episode items: the longest episode, in steps (items are padded to it)."""

    @property
    def capacity(self) -> int:
        """Items the shard holds at most (episodes, or positions of transitions)."""
        return self.episodes if self.store == "episodes" else self.columns * self.length

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
        # this run's segments committed per column: a new life of the worker skips a
        # segment it had committed but not yet acknowledged when it died
        "segments": ((C,), "<i8"),
        # episodes that finished in committed segments, not yet reported: (return, length)
        # in a ring, and how many were queued and taken, ever
        "episode_queue": ((EPISODE_QUEUE, 2), "<f8"),
        "episode_counts": ((2,), "<i8"),
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
    batch: int = 0
    """Items per batch (`replay.batch_size`; QMIX: `qmix.batch_episodes`); 0: one item."""

    @property
    def batch_items(self) -> int:
        return max(self.batch, 1)


def replay_of(ctx: Any) -> ReplaySetup:
    """The replay setup a replay-based algorithm prepared (its run context's `family`)."""
    setup = ctx.family
    assert isinstance(setup, ReplaySetup), "a replay-based algorithm prepares its replay"
    return setup


POSITION_FIELDS = (
    *("action", "reward", "terminated", "truncated", "ret", "discount", "horizon"),
    *("priority", "generation", "episode_step", "final_of", "start_of"),
)
"""The arrays of `storage_fields` with a value per position [C, L, ...] (and `obs/<k>`,
`out/<name>`)."""

INT32_MAX = np.iinfo(np.int32).max

INSERTED, SAMPLED, SIZE, CLOCK = range(4)
"""`counts`: transitions inserted and sampled, items sampleable, segments added (the
generation of the next segment's items)."""


class StoreCounts:
    """What every replay store keeps the same way (algos/replay_stores.py): its counters
    (`counts`: inserted, sampled, items), the segments committed per column (a new life of
    the worker skips what it committed), the queue of finished episodes for the trainer's
    logs, and where a sample is written."""

    a: dict[str, np.ndarray]

    @property
    def size(self) -> int:
        """Items that can be sampled."""
        return int(self.a["counts"][SIZE])

    @property
    def inserted(self) -> int:
        return int(self.a["counts"][INSERTED])

    @property
    def sampled(self) -> int:
        return int(self.a["counts"][SAMPLED])

    def can_sample(self, batch: int) -> bool:
        """Items exist to draw from (a batch may draw one many times)."""
        return self.size > 0

    def segments_added(self, columns: np.ndarray) -> int:
        """Segments this run committed to `columns` (one group's, added together)."""
        return int(self.a["segments"][columns].min())

    def take_episodes(self, most: int) -> np.ndarray:
        """Up to `most` queued episodes, oldest first, [k, 2] (return, length), taken."""
        queued, taken = (int(x) for x in self.a["episode_counts"])
        taken = max(taken, queued - EPISODE_QUEUE)  # a full ring lost its oldest
        k = min(most, queued - taken)
        out = self.a["episode_queue"][(taken + np.arange(k)) % EPISODE_QUEUE].copy()
        self.a["episode_counts"][1] = taken + k
        return out

    @staticmethod
    def delivered(
        result: dict[str, np.ndarray], out: dict[str, np.ndarray] | None
    ) -> dict[str, np.ndarray]:
        """A sample: `result`, or written into the arrays `out` (the worker's row of the
        batches block) when given (the sequence and episode stores'; the transition store
        samples into `out` directly)."""
        if out is None:
            return result
        for key, value in result.items():
            out[key][...] = value
        return out


class ReplayStore(StoreCounts):
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
        weight_norm: str = "batch",
    ) -> None:
        self._check(spec, nstep)
        self.weight_norm = weight_norm
        self.spec, self.a = spec, arrays
        self.gamma, self.nstep = gamma, nstep
        self._prioritized, self.alpha, self.eps = prioritized, alpha, priority_eps
        self.rng = np.random.default_rng(seed)
        # [C * L, ...] views of the per-position arrays: an item's flat index reads them
        # with one index array, cheaper than a (column, position) pair of them
        C, L = spec.columns, spec.length
        self.by_item = {
            k: _flat_view(v, C * L)
            for k, v in arrays.items()
            if k in POSITION_FIELDS or k.startswith(("obs/", "out/"))
        }
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
    def prioritized(self) -> bool:
        return self._prioritized

    @prioritized.setter
    def prioritized(self, value: bool) -> None:
        """Switch between uniform and prioritised sampling (the sampler is rebuilt)."""
        self._prioritized = value
        self._rebuild()

    @property
    def per_item(self) -> int:
        """Transitions one sampled item trains: what a sample counts for in `sampled`."""
        return self.spec.trained

    @property
    def steps(self) -> int:
        """Steps committed over all columns (env steps, for a single-agent env)."""
        return int(self.a["written"].sum())

    def _rebuild(self) -> None:
        """The sampler from the stored priorities (a new life, or a restored checkpoint): a
        sum tree, or for uniform sampling the set of items that can be drawn (the same draws
        without a tree to walk or keep up). Positions past a column's committed end may hold
        half of an interrupted `add`: they are cleared, and `add` writes them again."""
        a = self.a
        self.tree: SumTree | UniformSet = (SumTree if self.prioritized else UniformSet)(
            self.spec.capacity
        )
        self.max_priority = 1.0
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

    def add(
        self,
        columns: np.ndarray,
        steps: dict[str, np.ndarray],
        episodes: np.ndarray | None = None,
    ) -> int:
        """Append a segment of T steps to each of `columns` (shard-local column indices,
        [G]): `steps` holds `obs/<k>` [T + 1, G, ...] (the last row: the observation after
        the last step), `final_obs/<k>` [T, G, ...], `action` [T, G, ...], `reward`,
        `terminated`, `truncated` [T, G], and the policy outputs `out/<name>` [T, G, ...].
        `episodes` [k, 2]: (return, length) of the episodes that finished in it, queued
        for the trainer's logs with the same commit. Returns the transitions that became
        complete."""
        a, L = self.a, self.spec.length
        T, most = steps["reward"].shape[0], self.spec.segment
        if most < T:
            raise ValueError(f"a segment of {T} steps; the replay takes at most {most}")
        generation = int(a["counts"][CLOCK])
        pos = a["pos"][columns]  # a copy (fancy indexing)
        base = columns * L  # the flat index of each column's position 0
        # The oldest items are overwritten (and, past the segment's end, lose the frames
        # their stacks read): they stop being sampleable first.
        self._set_priority((base[:, None] + self._invalidated(pos)).reshape(-1), 0.0)
        ended_before = self._ended_before(columns, pos)
        self._write_steps(columns, pos, steps, ended_before)
        inserted = self._new_items(columns, pos, T, steps, generation)
        queued = int(a["episode_counts"][0])
        if episodes is not None and len(episodes):  # in the ring past the committed end
            at = (queued + np.arange(len(episodes))) % EPISODE_QUEUE
            a["episode_queue"][at] = episodes
            queued += len(episodes)
        # commit: a handful of scalar stores, the segment's mark among them
        a["pos"][columns] = (pos + T) % L
        a["written"][columns] += T
        a["segments"][columns] += 1
        a["episode_counts"][0] = queued
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
        a, f, L = self.a, self.by_item, self.spec.length
        back = min(self.nstep - 1, int(a["written"][columns].min()))
        offsets = (pos[None, :] + np.arange(-back, T)[:, None]) % L  # [back + T, G]
        window = columns * L + offsets  # flat indices
        targets = self._targets(
            f["reward"][window], f["terminated"][window], f["truncated"][window]
        )
        # New items: complete now, and not already complete in an earlier segment (those
        # keep their priority and generation).
        done = targets.complete
        if back:
            done = done.copy()
            done[:back] &= ~(f["priority"][window[:back]] > 0)
        items, horizon = window[done], targets.horizon[done]
        f["ret"][items] = targets.returns[done]
        f["discount"][items] = targets.discount[done]
        f["horizon"][items] = horizon
        # a truncated end's bootstrap is that step's final observation (side table), whose
        # slot `_write_steps` put in the step's own entry (all read before any is written)
        ci, pi = np.divmod(items, L)
        end = ci * L + (pi + horizon - 1) % L
        f["final_of"][items] = np.where(targets.truncated_end[done], f["final_of"][end], -1)
        f["generation"][items] = generation
        segment_end = None
        if self.prioritized:  # each item's column's end (only Q-value priorities read it)
            segment_end = np.empty(done.shape, np.int64)
            segment_end[:] = (pos + T) % L
            segment_end = segment_end[done]
        self._set_priority(items, self._first_priorities(ci, pi, segment_end))
        return int(items.size)

    def _targets(self, rewards: np.ndarray, terminated: np.ndarray, truncated: np.ndarray) -> NStep:
        """algos/nstep.py's `nstep_targets` over a window [steps, G]. For 1-step returns
        (the DQN presets), what it gives without its loop over the n steps, most of an
        add's cost on a segment's short window."""
        if self.nstep > 1:
            return nstep_targets(rewards, terminated, truncated, self.gamma, self.nstep)
        return NStep(
            returns=rewards.astype(np.float32),
            discount=np.where(terminated, np.float32(0), np.float32(self.gamma)),
            horizon=np.ones(rewards.shape, np.int64),
            complete=np.ones(rewards.shape, bool),
            truncated_end=truncated & ~terminated,
        )

    def _ended_before(self, columns: np.ndarray, pos: np.ndarray) -> np.ndarray:
        """[G] bool: the step before each column's end ended its episode (or there is none),
        so the segment's first observation starts an episode."""
        a, L = self.a, self.spec.length
        prev = (pos - 1) % L
        first = a["written"][columns] == 0
        return first | a["terminated"][columns, prev] | a["truncated"][columns, prev]

    def _write_steps(
        self,
        columns: np.ndarray,
        pos: np.ndarray,
        steps: dict[str, np.ndarray],
        ended_before: np.ndarray,
    ) -> None:
        a, f, spec, L = self.a, self.by_item, self.spec, self.spec.length
        T = steps["reward"].shape[0]
        at = (pos[None, :] + np.arange(T + 1)[:, None]) % L  # [T + 1, G] positions
        body = columns * L + at  # their flat indices
        head = body[:T]
        for name in spec.obs:
            obs = steps[f"obs/{name}"]  # [T + 1, G, ...]
            f[f"obs/{name}"][body] = obs[:, :, -1] if name == spec.frames else obs
        f["action"][head] = steps["action"]
        f["reward"][head] = steps["reward"]
        f["terminated"][head] = steps["terminated"]
        f["truncated"][head] = steps["truncated"]
        for name in spec.outputs:
            f[f"out/{name}"][head] = steps[f"out/{name}"]
        # episode positions: 0 at each episode's first observation, counting up (from the
        # step before the segment's, while its episode goes on)
        ended = steps["terminated"] | steps["truncated"]  # [T, G]
        starts = np.concatenate([ended_before[None, :], ended], axis=0)  # [T + 1, G]
        prev = f["episode_step"][columns * L + (pos - 1) % L].astype(np.int64)
        t = np.arange(T + 1)[:, None]
        last_start = np.maximum.accumulate(np.where(starts, t, -1), axis=0)
        episode_step = np.where(last_start >= 0, t - last_start, prev + 1 + t)
        f["episode_step"][body] = np.minimum(episode_step, INT32_MAX)
        if spec.frames:
            cols = np.broadcast_to(columns[None, :], at.shape)
            self._keep_starts(cols, at, starts, steps[f"obs/{spec.frames}"])
        # final observations of truncated steps, for their transitions' bootstrap
        f["final_of"][head] = -1
        truncations = steps["truncated"] & ~steps["terminated"]
        if truncations.any():
            for t_, g in zip(*(v.tolist() for v in np.nonzero(truncations)), strict=True):
                slot = self._side_slot("final", 0, int(columns[g]), int(at[t_, g]))
                for name in spec.obs:
                    a[f"final/{name}"][slot] = steps[f"final_obs/{name}"][t_, g]
                f["final_of"][head[t_, g]] = slot

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
            self._set_priority(c * self.spec.length + stale, 0.0)
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
        self, ci: np.ndarray, pi: np.ndarray, segment_end: np.ndarray | None
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
        assert segment_end is not None
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

    def _set_priority(self, items: np.ndarray, value: Any) -> None:
        """Set the priorities of `items` ([K] flat indices, each once) to `value` ([K] or
        one for all), in the storage and the sampler, and count the sampleable items."""
        if items.size == 0:
            return
        stored = self.by_item["priority"]
        before = int(np.count_nonzero(stored[items]))  # priorities are >= 0: nonzero is > 0
        if isinstance(value, np.ndarray):
            values, after = value.astype(np.float64, copy=False), int(np.count_nonzero(value))
        else:
            values, after = np.full(items.shape, float(value)), items.size if value > 0 else 0
        stored[items] = values
        self.tree.update(items, values)
        self.a["counts"][SIZE] += after - before

    def update_priorities(
        self, items: np.ndarray, generations: np.ndarray, td_abs: np.ndarray
    ) -> None:
        """New priorities from the trainer's TD errors, for the items still stored (an item
        overwritten since it was sampled has another generation, and is left alone)."""
        if not self.prioritized:
            return
        f = self.by_item
        alive = (f["generation"][items] == generations) & (f["priority"][items] > 0)
        scaled = self._scaled(td_abs[alive])
        # an item drawn twice in the batch: its first TD error counts
        distinct, first = np.unique(items[alive], return_index=True)
        self._set_priority(distinct, scaled[first])

    def _weights(self, priorities: np.ndarray, beta: float) -> np.ndarray:
        """Importance weights of sampled items of these priorities (`replay.weight_norm`:
        the largest in the batch is 1, or the least likely item's in the replay would be)."""
        total = self.tree.total
        smallest = self.tree.min / total if self.weight_norm == "replay" else None
        return importance_weights(priorities / total, self.size, beta, smallest)

    # ------------------------------------------------------------------ sample

    def batch_fields(self) -> Fields:
        """What `sample` returns, per item: field -> (shape, dtype)."""
        return self.item_fields(self.spec)

    @staticmethod
    def item_fields(spec: Spec) -> Fields:
        """`batch_fields` of a store of `spec`."""
        fields: Fields = {"action": spec.action}
        for key in ("reward", "discount", "weight"):
            fields[key] = ((), "<f4")
        for key in ("index", "generation"):
            fields[key] = ((), "<i8")
        for name, shape_dtype in spec.obs.items():
            fields[f"obs/{name}"] = fields[f"next_obs/{name}"] = shape_dtype
        return fields

    def _batch(self, batch: int) -> dict[str, np.ndarray]:
        """New arrays for a batch of `batch_fields`."""
        return {
            k: np.empty((batch, *shape), dtype) for k, (shape, dtype) in self.batch_fields().items()
        }

    def sample(
        self, batch: int, beta: float, out: dict[str, np.ndarray] | None = None
    ) -> dict[str, np.ndarray]:
        """A batch of transitions: `obs/<k>`, `next_obs/<k>`, `action`, `reward` (the
        n-step return), `discount`, `weight` (importance weights; 1 when uniform), `index`
        and `generation` (to send priorities back). Written into `out` (arrays of
        `batch_fields` with `batch` rows: the worker's row of the batches block, so nothing
        is copied twice) when given, else into new arrays."""
        a, f, spec = self.a, self.by_item, self.spec
        out = self._batch(batch) if out is None else out
        items = self.tree.sample(self.rng, batch)
        out["index"][...] = items
        # mode="clip": the items are in range, and np.take buffers `out` under "raise"
        for key, stored in (("action", "action"), ("reward", "ret"), ("discount", "discount")):
            np.take(f[stored], items, axis=0, out=out[key], mode="clip")
        np.take(f["generation"], items, out=out["generation"], mode="clip")
        cols, pos = np.divmod(items, spec.length)
        nxt = cols * spec.length + (pos + f["horizon"][items]) % spec.length
        final = f["final_of"][items]
        truncated = final >= 0
        for name in spec.obs:
            self._observation(name, items, out[f"obs/{name}"])
            next_obs = out[f"next_obs/{name}"]
            self._observation(name, nxt, next_obs)
            if truncated.any():
                next_obs[truncated] = a[f"final/{name}"][final[truncated]]
        if self.prioritized:
            out["weight"][...] = self._weights(f["priority"][items], beta)
        else:
            out["weight"][...] = 1.0
        a["counts"][SAMPLED] += batch
        return out

    def _observation(self, name: str, items: np.ndarray, out: np.ndarray) -> None:
        """Observations of field `name` at `items` (flat indices), into `out`; a frame stack
        is rebuilt from the frames before it in its episode and its episode start's older
        frames."""
        spec = self.spec
        if name != spec.frames:
            np.take(self.by_item[f"obs/{name}"], items, axis=0, out=out, mode="clip")
            return
        self._stacks(name, *np.divmod(items, spec.length), out=out)

    def _stacks(
        self, name: str, cols: np.ndarray, pos: np.ndarray, out: np.ndarray | None = None
    ) -> np.ndarray:
        """Frame stacks of field `name` at (cols, pos), [B, S, *frame] (into `out` if
        given). Slot k of a stack is the frame S - 1 - k steps back; the slots from before
        the episode's first observation come from its start's older frames (few: only the
        first S - 1 steps of an episode have any), so every frame is gathered from the ring
        in one take and those few are patched."""
        a, spec = self.a, self.spec
        S, L = spec.stack, spec.length
        age = S - 1 - np.arange(S)  # [S]: how far back each slot is
        at = cols[:, None] * L + (pos[:, None] - age[None, :]) % L  # [B, S] flat positions
        stored = self.by_item[f"obs/{name}"]  # [C * L, *frame]
        if out is None:
            out = np.empty((len(pos), S, *stored.shape[1:]), stored.dtype)
        np.take(stored, at.reshape(-1), axis=0, out=out.reshape(-1, *stored.shape[1:]))
        since = a["episode_step"][cols, pos]  # steps since the episode's first observation
        rows, slots = np.nonzero(age[None, :] > since[:, None])
        if rows.size:
            start = a["start_frames"][a["start_of"][cols[rows], pos[rows]]]  # [n, S-1, *f]
            older = np.minimum(slots + since[rows], S - 2)
            out[rows, slots] = start[np.arange(rows.size), older]
        return out

    def __repr__(self) -> str:  # for debugging
        return f"ReplayStore(size={self.size}, inserted={self.inserted}, sampled={self.sampled})"


def _flat_view(array: np.ndarray, items: int) -> np.ndarray:
    """`array` [C, L, ...] as [C * L, ...], a view (its writes go to `array`)."""
    view = array.view()
    view.shape = (items, *array.shape[2:])  # raises rather than copy
    return view


def ring_length(capacity: int, columns: int) -> int:
    """Steps per column ring for `capacity` transitions over `columns` columns."""
    return max(1, math.ceil(capacity / columns))
