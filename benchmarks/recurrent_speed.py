"""Recurrent cores: what one unroll and one act cost, per implementation, side by side.

    .venv/bin/python benchmarks/recurrent_speed.py

- unroll: forward and backward through a segment [T, B] with episode resets, as the learner
  runs it per minibatch: surge's fused node (models/recurrent.py `FusedUnroll`: numpy,
  one autograd node), a loop of torch's cells (`unroll` with nn.GRUCell / nn.LSTMCell), and
  torch's fused nn.GRU / nn.LSTM over the whole sequence *without* resets (which it cannot
  apply mid-sequence: a lower bound for that route, which would have to split sequences at
  every reset);
- update: one PPO update of the `memory-gru` preset's learner on a synthetic batch;
- act: one inference call for an env group of the preset (8 envs), numpy (`NumpyPolicy`)
  against the torch model (`TorchActing`).

Interleaved repeats, median times, one thread; the CPU other processes used meanwhile is
printed (`foreign`). Writes benchmarks/results/recurrent_speed.md.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import gymnasium as gym
import numpy as np
import torch
from machine import describe, summary  # benchmarks/, next to this file

from surge.algos.batch import RolloutBatch
from surge.algos.ppo import PPOUpdater
from surge.config.load import load_config
from surge.models.actor_critic import ActorCritic
from surge.models.flat_policy import FlatPolicy, TorchActing
from surge.models.recurrent import RecurrentCore, unroll

SHAPES = [(32, 8, 128), (32, 16, 64), (64, 32, 128)]


def _busy_s() -> float:
    fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    ticks = [int(x) for x in fields]
    return (sum(ticks) - ticks[3] - ticks[4]) / 100.0  # all but idle and iowait


def median_ms(fns: dict[str, Callable[[], object]], repeats: int) -> dict[str, float]:
    """Median wall ms of each function, the functions interleaved round by round."""
    times: dict[str, list[float]] = {k: [] for k in fns}
    for fn in fns.values():
        fn()  # warm-up
    for _ in range(repeats):
        for name, fn in fns.items():
            t = time.perf_counter()
            fn()
            times[name].append((time.perf_counter() - t) * 1e3)
    return {k: statistics.median(v) for k, v in times.items()}


def unroll_ms(kind: str, T: int, B: int, H: int, repeats: int) -> dict[str, float]:
    torch.manual_seed(0)
    core = RecurrentCore(kind, 2, H)
    x = torch.randn(T, B, 2)
    s0 = torch.zeros(B, core.state_size)
    resets = torch.rand(T, B, generator=torch.Generator().manual_seed(1)) < 0.03
    whole = torch.nn.GRU(2, H) if kind == "gru" else torch.nn.LSTM(2, H)

    def fused() -> None:
        core.unroll(x, s0, resets).sum().backward()

    def cells() -> None:
        unroll(core.cell_step, x, s0, resets).sum().backward()

    def torch_rnn() -> None:
        whole(x)[0].sum().backward()

    return median_ms({"fused": fused, "cells": cells, "rnn": torch_rnn}, repeats)


def unroll_rows(repeats: int) -> list[str]:
    rows = []
    for kind in ("gru", "lstm"):
        for T, B, H in SHAPES:
            ms = unroll_ms(kind, T, B, H, repeats)
            rows.append(
                f"| {kind} | {T} x {B} | {H} | {ms['fused']:.2f} | {ms['cells']:.2f} | "
                f"{ms['rnn']:.2f} | {ms['cells'] / ms['fused']:.1f}x |"
            )
            print(rows[-1], flush=True)
    return rows


def update_row(repeats: int) -> str:
    cfg, _ = load_config("memory-gru", [])
    space = gym.spaces.Box(-np.inf, np.inf, (2,), np.float32)
    torch.manual_seed(0)
    model = ActorCritic(space, gym.spaces.Discrete(2), cfg.model)
    T, N = cfg.ppo.rollout_len, cfg.total_envs
    g = torch.Generator().manual_seed(0)
    batch = RolloutBatch(
        obs={"obs": torch.randn(T, N, 2, generator=g)},
        last_obs={"obs": torch.randn(N, 2, generator=g)},
        final_obs={"obs": torch.randn(T, N, 2, generator=g)},
        actions=torch.randint(0, 2, (T, N), generator=g),
        logp=torch.full((T, N), -0.69),
        values=torch.zeros(T, N),
        rewards=torch.ones(T, N),
        terminated=torch.rand(T, N, generator=g) < 0.03,
        truncated=torch.zeros(T, N, dtype=torch.bool),
        core0=torch.zeros(N, model.state_size),
    )
    learner = PPOUpdater(model, cfg.ppo, torch.Generator().manual_seed(1), cfg.appo)
    ms = median_ms({"update": lambda: learner.update(batch, 1e-4)}, repeats)["update"]
    return (
        f"One `memory-gru` update ({T} x {N} = {T * N} samples, {cfg.ppo.epochs} epochs of "
        f"{cfg.ppo.minibatches} minibatches, APPO): {ms:.1f} ms, "
        f"{T * N / ms * 1e3:,.0f} samples/s."
    )


def act_row(repeats: int) -> str:
    cfg, _ = load_config("memory-gru", [])
    space = gym.spaces.Box(-np.inf, np.inf, (2,), np.float32)
    numpy_policy = FlatPolicy(space, gym.spaces.Discrete(2), cfg.model, 0)
    torch_policy = TorchActing(space, gym.spaces.Discrete(2), cfg.model, 0)
    rows = cfg.workers.envs_per_group
    obs = {"obs": np.random.default_rng(0).normal(size=(rows, 2)).astype(np.float32)}
    state = np.zeros((rows, numpy_policy.state_size), np.float32)

    def many(fn: Callable[[], object]) -> Callable[[], None]:
        def run() -> None:
            for _ in range(100):
                fn()

        return run

    ms = median_ms(
        {
            "numpy": many(lambda: numpy_policy.act(obs, core=state)),
            "torch": many(lambda: torch_policy.act(obs, core=state)),
        },
        repeats,
    )
    return (
        f"One act of the `memory-gru` policy for an env group ({rows} envs): numpy "
        f"{ms['numpy'] * 10:.0f} us, torch {ms['torch'] * 10:.0f} us "
        f"({ms['torch'] / ms['numpy']:.1f}x)."
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results")
    args = parser.parse_args()
    torch.set_num_threads(1)
    busy, wall, cpu = _busy_s(), time.perf_counter(), time.process_time()
    unrolls = unroll_rows(args.repeats)
    update = update_row(args.repeats)
    act = act_row(args.repeats)
    elapsed = time.perf_counter() - wall
    foreign = max(0.0, (_busy_s() - busy - (time.process_time() - cpu)) / elapsed)
    text = "\n".join(
        [
            "Recurrent cores: cost of one unroll (forward and backward), one update, one act;",
            f"medians of {args.repeats} interleaved repeats, 1 thread "
            "(`python benchmarks/recurrent_speed.py`).",
            "",
            summary(describe()) + f". Other processes used {foreign:.2f} cores meanwhile.",
            "",
            "| core | T x B | H | fused (numpy) ms | torch cells ms | torch nn.GRU/LSTM, "
            "no resets ms | cells / fused |",
            "|---|---|---|---|---|---|---|",
            *unrolls,
            "",
            update,
            "",
            act,
        ]
    )
    print(text)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "recurrent_speed.md").write_text(text + "\n")


if __name__ == "__main__":
    main()
