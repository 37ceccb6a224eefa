"""Episode replay (EPyMARL's episode buffer): a shard's replay whose items are whole episodes
of one multi-agent env, every agent of every step in one item, for value decomposition
(QMIX, VDN: the mixer needs all agents' Q-values and the global state of the same step).

Columns. The shard's columns are its envs' agent rows, `agents` consecutive ones per env
(surge/envs/multiagent.py: row i * A + j is agent j of env i), so env e owns columns
e*A .. e*A + A - 1. A segment adds T steps to each of a group's envs.

Open episodes. Each env's episode so far is kept in `open/*` ([E, T_max + 1, A, ...]: the
observation of every step and the one after the last), with its length. When a step ends
the episode (terminated, or truncated: a time limit, whose next observation is the final one
the env returned) or fills `episode_limit` steps, the episode is copied into the next slot of
a ring of `episodes` slots, padded to T_max, and a new one starts. An episode cut at
`episode_limit` is stored as not terminated (its last step bootstraps), and its continuation
becomes an episode of its own.

Items. Slot n holds `obs/<k>` [T_max + 1, A, ...], `action` [T_max, A, ...], `reward`
[T_max] (the team's: the sum of its agents' rewards, as EPyMARL's common reward),
`terminated` and `filled` [T_max]. Sampling is uniform over the filled slots; no
priorities. Counts are in agent-steps, as the actors' and the transition store's: an insert
counts its steps x rows, a sample the stored episodes' mean length x agents per episode (its
padding not included). So `replay.ratio` = the batch's episodes trains once per episode
collected, as EPyMARL does, however short the episodes become as the agents learn.

Committing. `add` works on a copy of the group's open episodes and writes the finished ones
into slots past the committed ones; then it writes the copy into the other of each env's two
buffers (`open_side` says which is current), and commits: the envs' side flips, the
counters, and last the segments' mark. A worker killed before the commit leaves the
committed state as it was (its next life adds the same segment again, into the same slots);
as with the transition store, only a kill among the commit's few stores can repeat a
segment's steps.
"""

from __future__ import annotations

import numpy as np

from surge.algos.transition_store import EPISODE_QUEUE, Fields, Spec, StoreCounts

INSERTED, SAMPLED, SIZE, CLOCK = range(4)
"""`counts`: agent-steps inserted and sampled, episodes stored, episodes committed ever (the
first three as the transition store's, which `StoreCounts` reads)."""


def episode_storage_fields(spec: Spec) -> Fields:
    """The arrays of an episode shard's storage, for its shared-memory block."""
    N, T, A, E = spec.episodes, spec.episode_limit, spec.agents, spec.columns // spec.agents
    fields: Fields = {
        "counts": ((4,), "<i8"),
        "written": ((spec.columns,), "<i8"),  # steps committed per column, ever
        "segments": ((spec.columns,), "<i8"),  # this run's segments committed per column
        "open_side": ((E,), "<i8"),  # which of its two open buffers is each env's current
        "episode_queue": ((EPISODE_QUEUE, 2), "<f8"),
        "episode_counts": ((2,), "<i8"),
        "action": ((N, T, A, *spec.action[0]), spec.action[1]),
        "reward": ((N, T), "<f4"),
        "terminated": ((N, T), "|b1"),
        "filled": ((N, T), "|b1"),
    }
    for side in (0, 1):
        fields[f"open{side}/length"] = ((E,), "<i8")  # steps of the env's open episode
        fields[f"open{side}/action"] = ((E, T, A, *spec.action[0]), spec.action[1])
        fields[f"open{side}/reward"] = ((E, T), "<f4")
        fields[f"open{side}/terminated"] = ((E, T), "|b1")
    for name, (shape, dtype) in spec.obs.items():
        fields[f"obs/{name}"] = ((N, T + 1, A, *shape), dtype)
        for side in (0, 1):
            fields[f"open{side}/obs/{name}"] = ((E, T + 1, A, *shape), dtype)
    return fields


def episode_item_fields(spec: Spec) -> Fields:
    """What a sample holds per episode: field -> (shape, dtype)."""
    T, A = spec.episode_limit, spec.agents
    fields: Fields = {
        "action": ((T, A, *spec.action[0]), spec.action[1]),
        "reward": ((T,), "<f4"),
        "terminated": ((T,), "|b1"),
        "filled": ((T,), "|b1"),
        "weight": ((), "<f4"),
        "index": ((), "<i8"),
        "generation": ((), "<i8"),
    }
    for name, (shape, dtype) in spec.obs.items():
        fields[f"obs/{name}"] = ((T + 1, A, *shape), dtype)
    return fields


class EpisodeStore(StoreCounts):
    """One shard's episode replay over the arrays of `episode_storage_fields` (see the module
    docstring). The same calls as the transition store's, for the replay worker."""

    prioritized = False

    def __init__(self, spec: Spec, arrays: dict[str, np.ndarray], seed: int) -> None:
        if spec.agents < 1 or spec.columns % spec.agents:
            raise ValueError(f"{spec.columns} columns are not whole envs of {spec.agents}")
        if spec.episode_limit < 1 or spec.episodes < 1:
            raise ValueError("an episode store needs an episode limit and slots")
        self.spec, self.a = spec, arrays
        self.rng = np.random.default_rng(seed)

    @property
    def per_item(self) -> int:
        """Agent-steps one sampled episode counts for against `replay.ratio`: the stored
        episodes' mean length x agents (before the first: `episode_limit` x agents)."""
        size = self.size
        if size == 0:
            return self.spec.episode_limit * self.spec.agents
        steps = int(np.count_nonzero(self.a["filled"][:size]))
        return max(1, round(steps * self.spec.agents / size))

    @property
    def steps(self) -> int:
        """Env steps committed over the shard's envs (each env's agents step together)."""
        return int(self.a["written"].sum()) // self.spec.agents

    def batch_fields(self) -> Fields:
        return episode_item_fields(self.spec)

    # ------------------------------------------------------------------ insert

    def add(
        self, columns: np.ndarray, steps: dict[str, np.ndarray], episodes: np.ndarray | None = None
    ) -> int:
        """Append a segment of T steps of the envs whose agent rows are `columns` (a group's
        shard-local columns, whole envs): `steps` as the transition store's (`obs/<k>`
        [T + 1, G, ...], `final_obs/<k>`, `action`, `reward`, `terminated`, `truncated`).
        Returns the agent-steps inserted."""
        a, spec, A = self.a, self.spec, self.spec.agents
        T, G = steps["reward"].shape
        envs = columns[::A] // A
        side = a["open_side"][envs]
        open_ = self._open(envs, side)
        length = open_.pop("length")
        committed = int(a["counts"][CLOCK])
        finished = 0
        for t in range(T):
            nxt = self._next_obs(steps, t, len(envs))
            ends = self._append(open_, length, steps, t, nxt)
            for i in map(int, np.flatnonzero(ends)):
                self._store(open_, i, int(length[i]), committed + finished)
                finished += 1
                length[i] = 0  # the next step's observation (a reset) starts the next one
        open_["length"] = length
        for i, (env, other) in enumerate(zip(envs, 1 - side, strict=True)):
            for k, v in open_.items():
                a[f"open{other}/{k}"][env] = v[i]
        # commit: the envs' current buffers, the counters, and the segments' mark last
        a["open_side"][envs] = 1 - side
        queued = int(a["episode_counts"][0])
        if episodes is not None and len(episodes):
            at = (queued + np.arange(len(episodes))) % EPISODE_QUEUE
            a["episode_queue"][at] = episodes
            a["episode_counts"][0] = queued + len(episodes)
        a["written"][columns] += T
        a["counts"][CLOCK] = committed + finished
        a["counts"][SIZE] = min(committed + finished, spec.episodes)
        a["counts"][INSERTED] += T * G
        a["segments"][columns] += 1
        return T * G

    def _open(self, envs: np.ndarray, side: np.ndarray) -> dict[str, np.ndarray]:
        """Copies of the envs' open episodes, each from its current buffer."""
        keys = [k[6:] for k in self.a if k.startswith("open0/")]
        return {
            k: np.stack([self.a[f"open{s}/{k}"][e] for e, s in zip(envs, side, strict=True)])
            for k in keys
        }

    def _append(
        self,
        open_: dict[str, np.ndarray],
        length: np.ndarray,
        steps: dict[str, np.ndarray],
        t: int,
        nxt: dict[str, np.ndarray],
    ) -> np.ndarray:
        """Append step t to each env's open episode (its observation, the agents' actions,
        the team reward, termination, and the observation after it); advance `length`.
        Returns [E] bool: the step ended the episode (or filled `episode_limit` steps)."""
        E, A = len(length), self.spec.agents
        rows = np.arange(E)
        for k in self.spec.obs:
            obs = steps[f"obs/{k}"][t]
            open_[f"obs/{k}"][rows, length] = obs.reshape(E, A, *obs.shape[1:])
        action = steps["action"][t]
        open_["action"][rows, length] = action.reshape(E, A, *action.shape[1:])
        open_["reward"][rows, length] = steps["reward"][t].reshape(E, A).sum(axis=1)
        terminated = steps["terminated"][t].reshape(E, A)[:, 0]
        truncated = steps["truncated"][t].reshape(E, A)[:, 0]
        open_["terminated"][rows, length] = terminated
        length += 1
        for k, v in nxt.items():
            open_[f"obs/{k}"][rows, length] = v
        return terminated | truncated | (length >= self.spec.episode_limit)

    def _next_obs(self, steps: dict[str, np.ndarray], t: int, envs: int) -> dict[str, np.ndarray]:
        """Each env's observation after step t, [E, A, ...]: the next step's, or the final one
        the env returned where step t was truncated (the next step's is a new episode's)."""
        A = self.spec.agents
        truncated = steps["truncated"][t].reshape(envs, A)[:, 0]
        out = {}
        for name in self.spec.obs:
            nxt = steps[f"obs/{name}"][t + 1].reshape(envs, A, *steps[f"obs/{name}"].shape[2:])
            if truncated.any():
                final = steps[f"final_obs/{name}"][t].reshape(nxt.shape)
                nxt = np.where(truncated.reshape(envs, *[1] * (nxt.ndim - 1)), final, nxt)
            out[name] = nxt
        return out

    def _store(self, open_: dict[str, np.ndarray], env: int, length: int, number: int) -> None:
        """Copy env `env`'s open episode of `length` steps into the slot of episode `number`."""
        a, slot = self.a, number % self.spec.episodes
        for name in self.spec.obs:
            a[f"obs/{name}"][slot] = 0
            a[f"obs/{name}"][slot, : length + 1] = open_[f"obs/{name}"][env, : length + 1]
        for key in ("action", "reward", "terminated"):
            a[key][slot] = 0
            a[key][slot, :length] = open_[key][env, :length]
        a["filled"][slot] = False
        a["filled"][slot, :length] = True

    # ------------------------------------------------------------------ sample

    def sample(
        self, batch: int, beta: float, out: dict[str, np.ndarray] | None = None
    ) -> dict[str, np.ndarray]:
        """`batch` episodes drawn uniformly from the stored ones; into `out` when given."""
        a = self.a
        slots = self.rng.integers(0, self.size, batch)
        result = {key: a[key][slots] for key in ("action", "reward", "terminated", "filled")}
        for name in self.spec.obs:
            result[f"obs/{name}"] = a[f"obs/{name}"][slots]
        result["weight"] = np.ones(batch, np.float32)
        result["index"] = slots
        result["generation"] = np.zeros(batch, np.int64)
        a["counts"][SAMPLED] += batch * self.per_item
        return self.delivered(result, out)

    def update_priorities(
        self, items: np.ndarray, generations: np.ndarray, td_abs: np.ndarray
    ) -> None:
        """Uniform replay: the trainer's TD errors change nothing."""
