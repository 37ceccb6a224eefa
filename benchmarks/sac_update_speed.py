"""How long does one SAC update take, per matrix-product library and precision? Times the
learner's update (surge/learners/sac.py `SACUpdate`: critics, actor and temperature,
CleanRL's settings) on a synthetic batch of the preset's shape, with the MLPs' products in
numpy (OpenBLAS) and in torch (MKL), each in float32 and with the large ones in bfloat16
(`sac.precision`; models/gemm.py), with the twin critics on one thread and on `sac.threads`,
then runs the trial `sac.matmul: auto` makes at a run's start (in the precision the preset
resolves to) and prints its choice.

The modes alternate in blocks of updates timed by the wall clock, so host noise hits all
alike; the table shows the median block.

    python benchmarks/sac_update_speed.py                       # halfcheetah-sac
    python benchmarks/sac_update_speed.py pendulum-sac --rounds 15
    python benchmarks/sac_update_speed.py --torch-steps   # the steps with autograd
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")  # as surge's workers: threads are set deliberately

import argparse  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402
from typing import Any  # noqa: E402

import gymnasium as gym  # noqa: E402
import machine  # noqa: E402 - benchmarks/, next to this file
import numpy as np  # noqa: E402
import torch  # noqa: E402

from surge.config.load import load_config  # noqa: E402
from surge.envs.make import probe_env  # noqa: E402
from surge.learners.sac import MATMUL_TRIAL, SACBatch, SACUpdate  # noqa: E402
from surge.models import gemm  # noqa: E402

Mode = tuple[gemm.Library, bool, int]  # (library, large products in bfloat16, threads)


def synthetic_batch(
    obs_space: gym.Space[Any], action_space: gym.spaces.Box, rows: int, rng: np.random.Generator
) -> SACBatch:
    """A batch as the replay serves it: observations, actions in the Box, rewards, discounts."""

    def observations() -> dict[str, torch.Tensor]:
        fields = getattr(obs_space, "spaces", None) or {"obs": obs_space}
        return {
            k: torch.from_numpy(rng.standard_normal((rows, *f.shape), dtype=np.float32))
            for k, f in fields.items()
        }

    low, high = action_space.low, action_space.high
    action = rng.uniform(low, high, (rows, *action_space.shape)).astype(np.float32)
    return SACBatch(
        obs=observations(),
        action=torch.from_numpy(action),
        next_obs=observations(),
        reward=torch.from_numpy(rng.standard_normal(rows, dtype=np.float32)),
        discount=torch.full((rows,), 0.99),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("preset", nargs="?", default="halfcheetah-sac")
    parser.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE")
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--updates", type=int, default=40, help="updates per timed block")
    parser.add_argument(
        "--torch-steps",
        action="store_true",
        help="time the torch steps (autograd) where the numpy ones would run (MLPs)",
    )
    args = parser.parse_args()
    cfg, _ = load_config(args.preset, [*args.set, "sac.matmul=numpy"])  # `use` decides below
    counts = sorted({1, cfg.sac.threads})
    modes: list[Mode] = [
        (lib, bf16, n) for bf16 in (False, True) for lib in ("numpy", "torch") for n in counts
    ]
    env = probe_env(cfg.env, cfg.seed)
    sac = SACUpdate(cfg, env.observation_space, env.action_space, torch.device("cpu"))
    if args.torch_steps:
        sac.numpy_steps = None
    rng = np.random.default_rng(0)
    space = env.action_space
    assert isinstance(space, gym.spaces.Box), f"{args.preset}: SAC acts in a Box"
    batch = synthetic_batch(env.observation_space, space, cfg.replay.batch_size, rng)

    def block(mode: Mode, updates: int) -> float:
        gemm.use(mode[0])
        gemm.use_bfloat16(mode[1])
        sac.critic.use_threads(mode[2])
        start = time.perf_counter()
        for _ in range(updates):
            sac(batch)
        return (time.perf_counter() - start) / updates * 1e3

    for mode in modes:  # warm-up
        block(mode, 10)
    times: dict[Mode, list[float]] = {mode: [] for mode in modes}
    for r in range(args.rounds):
        for mode in modes if r % 2 == 0 else modes[::-1]:
            times[mode].append(block(mode, args.updates))
    gemm.use_bfloat16(sac.bf16)
    trial = sac.product_trial("auto")
    while trial.chosen is None:
        trial.run(lambda: sac(batch))

    med = {mode: statistics.median(t) for mode, t in times.items()}
    base = med[("numpy", False, counts[-1])]
    print(machine.summary())
    steps = "in numpy (learners/sac_numpy.py)" if sac.numpy_steps else "in torch (autograd)"
    print(
        f"{args.preset}: one update at batch {cfg.replay.batch_size}, sac.threads="
        f"{cfg.sac.threads}, median of {args.rounds} blocks of {args.updates}, steps {steps}"
    )
    print(
        "| products | large products in | critics' threads | ms per update | min..max "
        f"| numpy float32 on {counts[-1]} / this |"
    )
    print("|---|---|---|---|---|---|")
    for mode in modes:
        lo, hi = min(times[mode]), max(times[mode])
        precision = "bfloat16" if mode[1] else "float32"
        print(
            f"| {mode[0]} | {precision} | {mode[2]} | {med[mode]:.2f} | {lo:.2f}..{hi:.2f} "
            f"| {base / med[mode]:.2f}x |"
        )
    trial_ms = ", ".join(f"{k} {v:.2f} ms" for k, v in trial.medians_ms().items())
    precision = "bfloat16" if sac.bf16 else "float32"
    print(
        f"`sac.matmul: auto`'s trial ({MATMUL_TRIAL} timed turns each, `sac.precision: "
        f"{cfg.sac.precision}` = {precision}): {trial.chosen.name} ({trial_ms})"
    )


if __name__ == "__main__":
    main()
