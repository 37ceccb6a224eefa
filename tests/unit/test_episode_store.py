"""The episode replay (surge/algos/episode_store.py): segments of agent rows become whole
episodes, every agent of every step with the team reward, padded to the limit; a time
limit's next observation is the final one; episodes cut at the limit continue as new ones;
a segment added again after a crash before its commit is stored once."""

from __future__ import annotations

import numpy as np
import pytest

from surge.algos.replay_stores import item_fields, make_store, store_fields
from surge.algos.transition_store import Spec

A, LIMIT = 2, 4


def _spec(envs: int = 2, episodes: int = 8) -> Spec:
    return Spec(
        columns=envs * A, length=LIMIT, obs={"obs": ((1,), "<f4")}, action=((), "<i8"),
        segment=8, store="episodes", agents=A, episodes=episodes, episode_limit=LIMIT,
        trained=LIMIT * A,
    )  # fmt: skip


def _store(spec: Spec) -> object:
    arrays = {k: np.zeros(shape, dtype) for k, (shape, dtype) in store_fields(spec).items()}
    return make_store(spec, arrays, seed=0)


def _segment(obs: list[list[float]], ends: list[list[str]]) -> dict[str, np.ndarray]:
    """A segment of T steps for E envs: `obs` [T + 1][E] (each agent row j sees obs + j/10),
    `ends` [T][E] in "", "term", "trunc"; agent j's reward is 1 + j at every step; action =
    10 * step + agent; the final observation of a truncation is -obs."""
    o = np.asarray(obs, np.float32)  # [T + 1, E]
    T, E = o.shape[0] - 1, o.shape[1]
    rows = (o[:, :, None] + np.arange(A)[None, None, :] / 10).reshape(T + 1, E * A, 1)
    end = np.asarray(ends)
    term = np.repeat(end == "term", A, axis=1)
    trunc = np.repeat(end == "trunc", A, axis=1)
    return {
        "obs/obs": rows,
        "final_obs/obs": -rows[1:],
        "action": (10 * np.arange(T)[:, None] + np.tile(np.arange(A), E)[None]).astype(np.int64),
        "reward": np.tile(1.0 + np.arange(A), (T, E)).astype(np.float32),
        "terminated": term,
        "truncated": trunc,
    }


def test_episodes_are_whole_padded_and_carry_the_team_reward() -> None:
    store = _store(_spec())
    columns = np.arange(2 * A)
    # env 0: an episode of 2 steps ending in a termination, then one cut at the limit (4);
    # env 1: a time limit after 3 steps (its next observation is the final one)
    seg = _segment(
        [[0, 10], [1, 11], [2, 12], [3, 13], [4, 14], [5, 15], [6, 16]],
        [["", ""], ["term", ""], ["", "trunc"], ["", ""], ["", ""], ["", ""]],
    )
    assert store.add(columns, seg, None) == 6 * 2 * A
    assert store.size == 3  # env 0's 2-step episode, env 1's time limit, env 0's cut one
    batch = store.sample(64, 0.4)
    by_first = {float(b[0, 0, 0]): i for i, b in enumerate(batch["obs/obs"])}
    first = by_first[0.0]  # env 0's terminated episode
    assert batch["filled"][first].tolist() == [True, True, False, False]
    assert batch["terminated"][first].tolist() == [False, True, False, False]
    assert batch["reward"][first].tolist() == [3.0, 3.0, 0.0, 0.0]  # 1 + 2: the team's
    assert batch["action"][first, 1].tolist() == [10, 11]  # both agents' actions of step 1
    assert np.allclose(batch["obs/obs"][first, :3, :, 0], [[0, 0.1], [1, 1.1], [2, 2.1]])
    limit = by_first[10.0]  # env 1: truncated after step 2, the final observation after it
    assert batch["filled"][limit].tolist() == [True, True, True, False]
    assert not batch["terminated"][limit].any()
    assert np.allclose(batch["obs/obs"][limit, 3, :, 0], [-13.0, -13.1])
    cut = by_first[2.0]  # env 0's episode from step 2, cut at 4 steps: it bootstraps
    assert batch["filled"][cut].all() and not batch["terminated"][cut].any()
    assert np.allclose(batch["obs/obs"][cut, 4, :, 0], [6.0, 6.1])
    # env 1's next episode started from the reset observation (13), not the final one (-13):
    # it ends in the next segment, at its 4th step
    store.add(columns, _segment([[6, 16], [7, 17]], [["", "term"]]), None)
    batch = store.sample(64, 0.4)
    starts = {float(b[0, 0, 0]) for b in batch["obs/obs"]}
    assert 13.0 in starts and -13.0 not in starts


def test_a_segment_added_again_before_its_commit_is_stored_once() -> None:
    spec = _spec(envs=1)
    store = _store(spec)
    columns = np.arange(A)
    seg = _segment([[0], [1], [2], [3]], [["term"], [""], [""]])
    store.add(columns, seg, None)
    before = {k: v.copy() for k, v in store.a.items()}
    # a worker killed inside `add`, before the commit: the open buffers of the other side
    # and slots past the committed count were written, nothing else
    nxt = _segment([[3], [4], [5], [6]], [[""], ["term"], [""]])
    crashed = {k: v.copy() for k, v in before.items()}
    crashed_store = make_store(spec, crashed, seed=0)
    crashed_store.add(columns, nxt, None)
    for key in ("counts", "segments", "open_side", "written"):
        crashed[key][...] = before[key]  # the commit's stores did not happen
    again = make_store(spec, crashed, seed=0)
    assert again.segments_added(columns) == 1
    again.add(columns, nxt, None)
    store.add(columns, nxt, None)
    for key in ("counts", "action", "reward", "filled", "obs/obs", "open_side"):
        assert np.array_equal(again.a[key], store.a[key]), key


def test_the_item_fields_match_a_sample() -> None:
    spec = _spec()
    store = _store(spec)
    store.add(np.arange(2 * A), _segment([[0, 0], [1, 1]], [["term", "term"]]), None)
    sample = store.sample(3, 0.4)
    fields = item_fields(spec)
    assert set(sample) == set(fields)
    for key, (shape, dtype) in fields.items():
        assert sample[key].shape == (3, *shape) and sample[key].dtype == np.dtype(dtype), key
    assert store.can_sample(3) and store.size == 2  # a batch may draw an episode twice


def test_columns_that_are_not_whole_envs_are_refused() -> None:
    spec = Spec(columns=3, length=4, obs={}, action=((), "<i8"), segment=4, store="episodes",
                agents=2, episodes=4, episode_limit=4)  # fmt: skip
    with pytest.raises(ValueError, match="not whole envs"):
        make_store(spec, {}, seed=0)
