"""How much CPU do an MLP preset's acting and learning cost, per backend? Times the numpy and
torch versions of the same model side by side, in one process, one thread.

- act: one inference call on an acting batch (`workers.envs_per_group` rows): the numpy
  policy (surge/models/numpy_policy.py, what actors and policy workers run for MLPs)
  against `ActorCritic.act`.
- update: one PPO / APPO update on a synthetic batch of the preset's shape: the numpy
  learner (algos/numpy_ppo.py, `model.backend: numpy`) against the torch learner
  (`model.backend: torch`), both from the same parameters.

The two contenders alternate in blocks and each block is timed with `time.thread_time`, so
host noise hits both alike; the table shows the median block.

    python benchmarks/mlp_speed.py                      # cartpole-appo
    python benchmarks/mlp_speed.py cartpole-ppo --set workers.envs_per_group=8
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")  # one thread, as in surge's workers

import argparse  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable  # noqa: E402
from typing import Any  # noqa: E402

import machine  # noqa: E402 - benchmarks/, next to this file
import numpy as np  # noqa: E402
import torch  # noqa: E402
from limits import synthetic_batch  # noqa: E402 - benchmarks/, next to this file

from surge.algos.numpy_ppo import NumpyPPOUpdater  # noqa: E402
from surge.algos.ppo import PPOUpdater  # noqa: E402
from surge.config.load import load_config  # noqa: E402
from surge.envs.make import probe_env  # noqa: E402
from surge.models.actor_critic import ActorCritic  # noqa: E402
from surge.models.numpy_net import NumpyActorCritic  # noqa: E402
from surge.models.numpy_policy import NumpyPolicy, numpy_layout  # noqa: E402
from surge.models.weights import model_to_flat  # noqa: E402


def blocks(contenders: dict[str, Callable[[], Any]], calls: int, rounds: int) -> dict[str, float]:
    """Median microseconds per call of each contender over `rounds` alternating blocks."""
    for fn in contenders.values():  # warm-up
        for _ in range(max(1, calls // 10)):
            fn()
    times: dict[str, list[float]] = {name: [] for name in contenders}
    for r in range(rounds):
        order = list(contenders) if r % 2 == 0 else list(contenders)[::-1]
        for name in order:
            fn = contenders[name]
            start = time.thread_time()
            for _ in range(calls):
                fn()
            times[name].append((time.thread_time() - start) / calls * 1e6)
    return {name: statistics.median(t) for name, t in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("preset", nargs="?", default="cartpole-appo")
    parser.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE")
    parser.add_argument("--rounds", type=int, default=9)
    args = parser.parse_args()
    torch.set_num_threads(1)
    cfg, _ = load_config(args.preset, args.set)
    env = probe_env(cfg.env, cfg.seed)
    layout = numpy_layout(env.observation_space, env.action_space, cfg.model)
    if layout is None:
        raise SystemExit(f"{args.preset}: not an MLP model; see benchmarks/learner_speed.py")
    torch.manual_seed(0)
    model = ActorCritic(env.observation_space, env.action_space, cfg.model)
    flat = model_to_flat(model)

    rows = cfg.workers.envs_per_group
    env.observation_space.seed(0)
    obs_rows = [env.observation_space.sample() for _ in range(rows)]
    np_obs = {"obs": np.stack(obs_rows).astype(np.float32)}
    t_obs = {"obs": torch.from_numpy(np_obs["obs"])}
    policy = NumpyPolicy(layout, flat.copy(), np.random.default_rng(0))
    g = torch.Generator().manual_seed(0)

    def torch_act() -> None:
        with torch.inference_mode():
            model.act(t_obs, generator=g)

    act = blocks({"numpy": lambda: policy.act(np_obs), "torch": torch_act}, 2000, args.rounds)

    T, N = cfg.ppo.rollout_len, cfg.total_envs
    gen = torch.Generator().manual_seed(1)
    batch = synthetic_batch(cfg, env, model, gen)
    np_batch = batch.map(lambda t: t.numpy())
    vtrace = cfg.appo if cfg.algo == "appo" else None
    net = NumpyActorCritic(layout, flat.copy())
    numpy_learner = NumpyPPOUpdater(net, cfg.ppo, np.random.default_rng(0), vtrace)
    torch_learner = PPOUpdater(model, cfg.ppo, gen, vtrace)
    lr = cfg.ppo.lr
    update = blocks(
        {
            "numpy": lambda: numpy_learner.update(np_batch, lr),
            "torch": lambda: torch_learner.update(batch, lr),
        },
        max(3, 2000 // (T * N)),
        args.rounds,
    )

    print(machine.summary())
    print(f"{args.preset}: act on {rows} rows, update on {T} x {N} steps, one thread")
    print("| path | numpy | torch | torch / numpy |")
    print("|---|---|---|---|")
    for name, res, unit, scale in (("act", act, "us", 1.0), ("update", update, "ms", 1e-3)):
        n, t = res["numpy"] * scale, res["torch"] * scale
        print(f"| {name} | {n:,.1f} {unit} | {t:,.1f} {unit} | {t / n:.2f}x |")


if __name__ == "__main__":
    main()
