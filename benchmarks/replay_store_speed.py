"""What does the replay shard's storage (surge/algos/transition_store.py) cost per call? Times
`ReplayStore.add` of one segment and `ReplayStore.sample` of one batch written into a row of
the batches block, as the replay worker (surge/workers/replay_shard.py) does them, for the
`cartpole-dqn` preset's settings: one env column, segments of 10 steps, capacity 10,000,
batches of 128, observations float32 [4], int64 actions, 1-step returns.

- add: one 10-step segment of one column, on a full replay (the ring wraps, so each add
  also makes the oldest items unsampleable);
- sample: one batch of 128 sampled straight into a preallocated row of the batches block
  (`ReplayStore.sample(..., out=row)`, what the worker's `_fill` calls);
- update (prioritised only): the trainer's |TD errors| of a sampled batch back as priorities.

Uniform (`replay.prioritized=false`, the preset) and prioritised (with the actors' Q-values
stored for first priorities, as `replay.prioritized=true` stores them). The segments are
CartPole-like: episodes of about 200 steps (geometric), truncated at 500. Each operation is
timed in blocks with `time.thread_time` (CPU time of this thread, so other processes on the
machine matter less); the table shows the median block's microseconds per call.

    .venv/bin/python benchmarks/replay_store_speed.py
    .venv/bin/python benchmarks/replay_store_speed.py --blocks 20 --calls 500
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")  # one thread, as in surge's workers

import argparse  # noqa: E402
import math  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable  # noqa: E402

import numpy as np  # noqa: E402

from surge.algos.transition_store import ReplayStore, Spec, storage_fields  # noqa: E402
from surge.streams.replay_blocks import batch_layout  # noqa: E402

CAPACITY, SEGMENT, BATCH, NSTEP, GAMMA = 10_000, 10, 128, 1, 0.99
ACTIONS = 2


def build_store(prioritized: bool, seed: int = 0) -> ReplayStore:
    """A shard's store as surge/recipes/replay_graph.py `replay_setup` sizes it for cartpole-dqn,
    over zeroed arrays (a fresh shared-memory block)."""
    length = math.ceil(CAPACITY / 1) + SEGMENT + 1 + NSTEP  # share + margin (stack 1)
    spec = Spec(
        columns=1,
        length=length,
        obs={"obs": ((4,), "<f4")},
        action=((), "<i8"),
        segment=SEGMENT,
        outputs=("q",) if prioritized else (),
        output_shapes=((ACTIONS,),) if prioritized else (),
    )
    arrays = {k: np.zeros(shape, dtype) for k, (shape, dtype) in storage_fields(spec).items()}
    return ReplayStore(spec, arrays, GAMMA, NSTEP, prioritized, 0.6, 1e-6, seed)


def segments(count: int, prioritized: bool, seed: int = 1) -> list[dict[str, np.ndarray]]:
    """`count` consecutive segments of one CartPole-like env, each a dict of views
    [T(+1), 1, ...] as the worker gets them from the sample stream (streams/sample.py)."""
    rng = np.random.default_rng(seed)
    T = SEGMENT
    block = {
        "obs/obs": np.zeros((count, T + 1, 1, 4), np.float32),
        "final_obs/obs": np.zeros((count, T, 1, 4), np.float32),
        "action": rng.integers(0, ACTIONS, (count, T, 1)).astype(np.int64),
        "reward": np.ones((count, T, 1), np.float32),
        "terminated": np.zeros((count, T, 1), bool),
        "truncated": np.zeros((count, T, 1), bool),
        "life": np.zeros((count, T, 1), np.int32),
        "game_over": np.zeros((count, T, 1), bool),
        "episode_return": np.zeros((count, T, 1), np.float32),
        "episode_length": np.zeros((count, T, 1), np.int64),
    }
    if prioritized:
        block["q"] = rng.normal(size=(count, T, 1, ACTIONS)).astype(np.float32)
    obs, t_in_episode = rng.normal(size=4).astype(np.float32), 0
    for k in range(count):
        for t in range(T):
            block["obs/obs"][k, t, 0] = obs
            t_in_episode += 1
            nxt = rng.normal(size=4).astype(np.float32)
            truncated = t_in_episode >= 500
            terminated = not truncated and rng.random() < 1 / 200
            if terminated or truncated:
                block["terminated"][k, t, 0], block["truncated"][k, t, 0] = terminated, truncated
                block["final_obs/obs"][k, t, 0] = nxt
                block["game_over"][k, t, 0] = True
                block["episode_return"][k, t, 0] = block["episode_length"][k, t, 0] = t_in_episode
                nxt, t_in_episode = rng.normal(size=4).astype(np.float32), 0
            obs = nxt
        block["obs/obs"][k, T, 0] = obs
    out = []
    for k in range(count):
        seg = {key: v[k, :, 0:1] for key, v in block.items()}
        if prioritized:  # the worker renames the policy's outputs as the store names them
            seg["out/q"] = seg.pop("q")
        out.append(seg)
    return out


def batch_row(spec: Spec) -> dict[str, np.ndarray]:
    """Row 0 of a batches block (streams/replay_blocks.py `batch_layout`), as views."""
    layout = batch_layout(1, 2, BATCH, spec)
    arrays = {k: np.zeros(f.shape, f.dtype) for k, f in layout.fields.items()}
    return {k: v[0] for k, v in arrays.items()}


def timed(fn: Callable[[], object], blocks: int, calls: int) -> float:
    """Median over `blocks` blocks of `calls` calls of `fn`: CPU microseconds per call."""
    per_call = []
    for _ in range(blocks):
        start = time.thread_time()
        for _ in range(calls):
            fn()
        per_call.append((time.thread_time() - start) / calls * 1e6)
    return statistics.median(per_call)


def bench(prioritized: bool, blocks: int, calls: int) -> dict[str, float]:
    store = build_store(prioritized)
    segs = segments(CAPACITY // SEGMENT + blocks * calls + 1, prioritized)
    columns = np.arange(1)
    feed = iter(segs)
    while store.size < CAPACITY - SEGMENT:  # fill the replay first: every add then wraps
        store.add(columns, next(feed))
    row = batch_row(store.spec)
    fields = {k: row[k] for k in store.sample(BATCH, 0.4)}  # the fields a sample writes
    rng = np.random.default_rng(2)

    def add() -> None:
        store.add(columns, next(feed))

    def sample() -> None:
        store.sample(BATCH, 0.4, out=fields)

    def update() -> None:
        store.update_priorities(row["index"], row["generation"], rng.random(BATCH))

    results = {"add": timed(add, blocks, calls), "sample": timed(sample, blocks, calls)}
    if prioritized:
        sample()
        results["update"] = timed(update, blocks, calls)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--blocks", type=int, default=9, help="timed blocks per operation")
    parser.add_argument("--calls", type=int, default=300, help="calls per block")
    args = parser.parse_args()
    print(
        f"replay store, cartpole-dqn settings: 1 column, segments of {SEGMENT}, capacity "
        f"{CAPACITY:,}, batches of {BATCH}; CPU us per call, median of {args.blocks} blocks "
        f"of {args.calls}"
    )
    print(f"{'sampling':<12} {'add':>8} {'sample':>8} {'update':>8}")
    for prioritized in (False, True):
        r = bench(prioritized, args.blocks, args.calls)
        update = f"{r['update']:8.1f}" if "update" in r else f"{'-':>8}"
        name = "prioritised" if prioritized else "uniform"
        print(f"{name:<12} {r['add']:8.1f} {r['sample']:8.1f} {update}")


if __name__ == "__main__":
    main()
