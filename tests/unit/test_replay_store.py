"""The replay shard's storage (surge/algos/transition_store.py): every sampled transition is
the one the stream holds, across segment ends, episode ends, truncations, ring wrap-around,
frame stacks and a new life of the worker, with n-step returns computed at insert."""

from __future__ import annotations

import numpy as np
import pytest

from surge.algos.nstep import nstep_targets
from surge.algos.priorities import SumTree, UniformSet
from surge.algos.transition_store import ReplayStore, Spec, storage_fields


class Stream:
    """A synthetic stream of C env columns. The observation of column c at its step t is
    [t, c, episode] (so a sample names the step it came from); the reward of step t is
    t + 1000 c; episodes end after `length` steps, by truncation every second episode."""

    def __init__(self, columns: int, length: int) -> None:
        self.C, self.length = columns, length
        self.t = 0
        self.steps: list[dict[str, np.ndarray]] = []  # per step: everything about it

    def obs(self, t: int) -> np.ndarray:
        episode = t // self.length
        return np.stack([[t, c, episode] for c in range(self.C)]).astype(np.float32)

    def segment(self, T: int) -> dict[str, np.ndarray]:
        t0 = self.t
        ts = np.arange(t0, t0 + T)
        ends = (ts + 1) % self.length == 0
        odd = ((ts + 1) // self.length) % 2 == 1
        seg = {
            "obs/x": np.stack([self.obs(t) for t in range(t0, t0 + T + 1)]),
            "final_obs/x": np.stack([self.obs(t) + [0, 0, 0.5] for t in ts]),  # distinct
            "action": np.tile((ts % 3)[:, None], (1, self.C)).astype(np.int64),
            "reward": (ts[:, None] + 1000 * np.arange(self.C)[None, :]).astype(np.float32),
            "terminated": np.tile((ends & ~odd)[:, None], (1, self.C)),
            "truncated": np.tile((ends & odd)[:, None], (1, self.C)),
        }
        # the observation after an episode's last step is the next episode's first
        self.t += T
        return seg

    def transition(self, c: int, t: int, gamma: float, n: int) -> dict[str, float]:
        """The n-step transition starting at column c's step t, by hand."""
        ret, m = 0.0, 0
        for k in range(n):
            step = t + k
            ret += gamma**k * (step + 1000 * c)
            m = k + 1
            if (step + 1) % self.length == 0:  # the episode ends at this step
                truncated = ((step + 1) // self.length) % 2 == 1
                nxt = self.obs(step)[c] + [0, 0, 0.5] if truncated else None
                return {"ret": ret, "discount": gamma**m if truncated else 0.0, "next": nxt}
        return {"ret": ret, "discount": gamma**m, "next": self.obs(t + m)[c]}


def _store(columns: int, length: int, segment: int, n: int = 1, **kw) -> ReplayStore:  # type: ignore[no-untyped-def]
    spec = Spec(columns, length, {"x": ((3,), "<f4")}, ((), "<i8"), segment, **kw)
    arrays = {k: np.zeros(shape, dtype) for k, (shape, dtype) in storage_fields(spec).items()}
    for key in ("final_owner", "start_owner"):
        arrays[key][:] = -1
    defaults = {"prioritized": False, "alpha": 0.6, "priority_eps": 1e-6, "seed": 0}
    return ReplayStore(spec, arrays, gamma=0.5, nstep=n, **defaults)


def _check_batch(stream: Stream, batch: dict[str, np.ndarray], n: int) -> int:
    """Every sampled transition against the stream; returns how many were checked."""
    for i in range(len(batch["index"])):
        t, c, _ = batch["obs/x"][i].astype(int)
        want = stream.transition(c, t, 0.5, n)
        assert batch["reward"][i] == pytest.approx(want["ret"], rel=1e-6), (t, c)
        assert batch["discount"][i] == pytest.approx(want["discount"]), (t, c)
        assert batch["action"][i] == t % 3
        if want["next"] is not None:
            np.testing.assert_array_equal(batch["next_obs/x"][i], want["next"])
    return len(batch["index"])


@pytest.mark.parametrize("n", [1, 3])
def test_samples_are_the_streams_transitions_across_segments_and_episodes(n: int) -> None:
    stream = Stream(columns=2, length=7)  # episodes of 7: ends fall inside and across segments
    store = _store(2, 64, segment=5, n=n)
    for _ in range(8):
        store.add(np.arange(2), stream.segment(5))
    # 40 steps per column; the last n - 1 starts wait for the next segment
    assert store.size == 2 * (40 - (n - 1)) - _cut_short(stream, n)
    assert store.inserted == store.size
    checked = _check_batch(stream, store.sample(256, beta=1.0), n)
    assert checked == 256 and store.sampled == 256


def _cut_short(stream: Stream, n: int) -> int:
    """Starts among the last n - 1 whose episode ends before the window does: complete."""
    last = stream.t
    return -2 * sum(
        1
        for t in range(last - (n - 1), last)
        if any((s + 1) % stream.length == 0 for s in range(t, last))
    )


def test_the_ring_wraps_and_keeps_only_whole_transitions() -> None:
    stream = Stream(columns=3, length=11)
    store = _store(3, 32, segment=8, n=3)
    for _ in range(25):  # 200 steps per column into rings of 32
        store.add(np.arange(3), stream.segment(8))
    batch = store.sample(512, beta=1.0)
    assert _check_batch(stream, batch, 3) == 512
    times = batch["obs/x"][:, 0]
    # nothing older than the ring (minus what the next write will touch) survives
    assert times.min() >= 200 - 32 and times.max() < 200


def test_a_new_life_finds_the_committed_replay_and_redoes_an_interrupted_add(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    stream = Stream(columns=2, length=9)
    store = _store(2, 64, segment=6, n=2)
    for _ in range(4):
        store.add(np.arange(2), stream.segment(6))
    segment = stream.segment(6)
    # the worker dies inside `add`, after writing the steps, before the commit
    monkeypatch.setattr(store, "_first_priorities", _boom)
    with pytest.raises(RuntimeError):
        store.add(np.arange(2), segment)
    monkeypatch.undo()
    before = {k: v.copy() for k, v in store.a.items()}
    reborn = ReplayStore(store.spec, store.a, 0.5, 2, False, 0.6, 1e-6, seed=1)
    assert reborn.inserted == 2 * (24 - 1) and reborn.size == reborn.inserted
    reborn.add(np.arange(2), segment)  # the new life writes the same segment again
    assert reborn.size == 2 * (30 - 1) == reborn.inserted
    np.testing.assert_array_equal(reborn.a["pos"], (before["pos"] + 6) % 64)
    assert _check_batch(stream, reborn.sample(300, beta=1.0), 2) == 300


def _boom(*args: object) -> None:
    raise RuntimeError("killed")


def test_frame_stacks_are_rebuilt_from_single_frames() -> None:
    """Observations [4, 2]: a stack of 4 frames of 2 values, newest last; an episode's first
    observation pads with frames of its own (here each pad differs, to tell them apart; Atari
    wrappers repeat the reset frame)."""
    C, T, S = 2, 5, 4
    spec = Spec(C, 40, {"img": ((S, 2), "<f4")}, ((), "<i8"), T, frames="img")
    arrays = {k: np.zeros(shape, dtype) for k, (shape, dtype) in storage_fields(spec).items()}
    arrays["final_owner"][:] = -1
    arrays["start_owner"][:] = -1
    store = ReplayStore(spec, arrays, 0.9, 1, False, 0.6, 1e-6, seed=0)
    length = 6  # episodes of 6 steps, terminated

    def frame(t: int, c: int) -> np.ndarray:
        return np.array([t, c], np.float32)

    def stack(t: int, c: int) -> np.ndarray:
        start = t - t % length
        return np.stack(
            [
                frame(s, c) if s >= start else np.array([s - 100 * start, c])
                for s in range(t - 3, t + 1)
            ]
        )

    for k in range(12):  # 60 steps: the ring of 40 wraps
        ts = np.arange(k * T, (k + 1) * T)
        seg = {
            "obs/img": np.stack(
                [np.stack([stack(t, c) for c in range(C)]) for t in range(k * T, (k + 1) * T + 1)]
            ),
            "final_obs/img": np.zeros((T, C, S, 2), np.float32),
            "action": np.zeros((T, C), np.int64),
            "reward": np.ones((T, C), np.float32),
            "terminated": np.tile(((ts + 1) % length == 0)[:, None], (1, C)),
            "truncated": np.zeros((T, C), bool),
        }
        store.add(np.arange(C), seg)
    batch = store.sample(400, beta=1.0)
    for i in range(400):
        t, c = (int(v) for v in batch["obs/img"][i, -1])
        np.testing.assert_array_equal(batch["obs/img"][i], stack(t, c))
        if (t + 1) % length:  # not terminal: the next observation is the next stack
            np.testing.assert_array_equal(batch["next_obs/img"][i], stack(t + 1, c))
    assert arrays["obs/img"].shape == (C, 40, 2)  # one frame per step is all it keeps


def test_prioritised_sampling_follows_the_trainers_td_errors() -> None:
    stream = Stream(columns=1, length=1000)
    store = _store(1, 64, segment=8, n=1, outputs=("q",), output_shapes=((3,),))
    store.prioritized = True
    seg = stream.segment(8)
    seg["out/q"] = np.zeros((8, 1, 3), np.float32)
    store.add(np.arange(1), seg)
    # first priorities: |R + gamma max Q' - Q| under the actors' Q-values (all 0): the reward
    items = np.arange(8)
    np.testing.assert_allclose(store.a["priority"][0, :8], (np.arange(8) + 1e-6) ** 0.6)
    batch = store.sample(7, beta=0.4)
    assert np.all((batch["weight"] > 0) & (batch["weight"] <= 1.0))
    # weights normalised in the batch: its least likely item weighs 1, the rest
    # (P_min / P_i) ** beta; over the replay (item 0's priority 1e-6 ** 0.6) they are tiny
    p = store.a["priority"][0, batch["index"]]
    assert batch["weight"].max() == 1.0
    np.testing.assert_allclose(batch["weight"], (p.min() / p) ** 0.4, rtol=1e-6)
    store.weight_norm = "replay"
    batch = store.sample(64, beta=1.0)
    p = store.a["priority"][0, batch["index"]]
    np.testing.assert_allclose(batch["weight"], 1e-6**0.6 / p, rtol=1e-5)
    store.weight_norm = "batch"
    # item 2 gets a TD error of 100, the others 0: it is then (nearly) all that is drawn
    generations = store.a["generation"][0, :8]
    errors = np.where(items == 2, 100.0, 0.0)
    store.update_priorities(items, generations, errors)
    assert np.mean(store.sample(256, beta=0.4)["index"] == 2) > 0.95
    # a priority for an item overwritten since it was sampled (another generation) is ignored
    store.update_priorities(items, generations - 1, np.zeros(8))
    assert np.mean(store.sample(256, beta=0.4)["index"] == 2) > 0.95


@pytest.mark.parametrize("prioritized", [False, True])
def test_the_sampler_holds_exactly_the_sampleable_items(prioritized: bool) -> None:
    """Uniform sampling draws from the set of items of priority > 0 (no tree): overwrites
    and reused side slots (a truncation every 4 steps fills the 64 final-observation slots
    well within the ring) must take items out of it, and the size count must follow."""
    stream = Stream(columns=2, length=2)
    store = _store(2, 512, segment=7, n=2)
    store.prioritized = prioritized
    for _ in range(200):  # 1400 steps per column: the ring wraps, slots are reused
        store.add(np.arange(2), stream.segment(7))
        live = store.a["priority"].reshape(-1) > 0
        np.testing.assert_array_equal(store.tree.get(np.arange(live.size)) > 0, live)
        assert store.size == live.sum()
    assert store.a["cursors"][0] > 3 * store.spec.side  # side slots were reused
    batch = store.sample(512, beta=1.0)
    assert (store.a["priority"].reshape(-1)[batch["index"]] > 0).all()
    assert _check_batch(stream, batch, 2) == 512


def test_sampling_into_a_row_writes_the_batch_it_would_return() -> None:
    stream = Stream(columns=2, length=7)
    twins = [_store(2, 64, segment=5, n=3) for _ in range(2)]
    for _ in range(12):
        segment = stream.segment(5)
        for store in twins:
            store.add(np.arange(2), segment)
    fields = twins[0].batch_fields()
    row = {k: np.full((100, *shape), -7, dtype) for k, (shape, dtype) in fields.items()}
    assert twins[0].sample(100, beta=1.0, out=row) is row
    batch = twins[1].sample(100, beta=1.0)
    assert set(batch) == set(row)
    for key, value in batch.items():
        np.testing.assert_array_equal(row[key], value, err_msg=key)
        assert value.dtype == np.dtype(fields[key][1]) and value.shape[1:] == fields[key][0]
    assert _check_batch(stream, row, 3) == 100


def test_one_step_targets_are_nstep_targets() -> None:
    store = _store(1, 64, segment=5, n=1)
    rng = np.random.default_rng(0)
    rewards = rng.normal(size=(9, 3)).astype(np.float32)
    terminated, truncated = rng.random((9, 3)) < 0.3, rng.random((9, 3)) < 0.3
    fast = store._targets(rewards, terminated, truncated)
    want = nstep_targets(rewards, terminated, truncated, store.gamma, 1)
    for field in ("returns", "discount", "horizon", "complete", "truncated_end"):
        got, expected = getattr(fast, field), getattr(want, field)
        np.testing.assert_array_equal(got, expected, err_msg=field)
        assert got.dtype == expected.dtype, field


def test_switching_the_sampling_rebuilds_the_sampler_from_the_priorities() -> None:
    stream = Stream(columns=1, length=9)
    store = _store(1, 64, segment=8, n=1)
    for _ in range(4):
        store.add(np.arange(1), stream.segment(8))
    assert isinstance(store.tree, UniformSet) and store.tree.total == store.size == 32
    store.prioritized = True
    assert isinstance(store.tree, SumTree) and store.tree.total == store.size == 32
    store.prioritized = False
    assert isinstance(store.tree, UniformSet) and store.tree.total == 32


def test_commits_mark_the_segment_and_queue_its_episodes() -> None:
    """A segment's commit counts it (the worker's new life skips one committed before it
    died unacknowledged) and queues its finished episodes in the same commit; the queue
    hands them out once each, oldest first, and a full ring drops its oldest."""
    from surge.algos.transition_store import EPISODE_QUEUE

    stream = Stream(columns=2, length=9)
    store = _store(2, 64, segment=6, n=2)
    cols = np.arange(2)
    assert store.segments_added(cols) == 0
    store.add(cols, stream.segment(6), np.array([[1.0, 9], [2.0, 9]]))
    store.add(cols, stream.segment(6))
    assert store.segments_added(cols) == 2
    store.add(cols, stream.segment(6), np.array([[3.0, 7]]))
    np.testing.assert_array_equal(store.take_episodes(2), [[1.0, 9], [2.0, 9]])
    np.testing.assert_array_equal(store.take_episodes(5), [[3.0, 7]])
    assert len(store.take_episodes(5)) == 0
    many = np.stack([np.arange(EPISODE_QUEUE + 3.0), np.ones(EPISODE_QUEUE + 3)], axis=1)
    store.add(cols, stream.segment(6), many)
    taken = store.take_episodes(EPISODE_QUEUE + 10)
    assert len(taken) == EPISODE_QUEUE and taken[0, 0] == 3.0 and taken[-1, 0] == many[-1, 0]
