"""The limits of a preset on this machine: how fast its envs step and its learner learns alone.

- env: random actions through the preset's own env group (`make_group`: the backend, the
  preprocessing and resets the actor runs), one group holding all of the preset's envs, one
  process, no policy. The end-to-end rate cannot beat this.
- learner: the preset's learner (`PPOUpdater`, APPO when the preset says so) updating on a
  synthetic batch of the preset's shape (rollout_len x total envs, its model, epochs and
  minibatches), with the trainer's thread count. Samples/s = batch steps / update time.

    python benchmarks/limits.py cartpole-ppo pong-ppo --secs 10 [--json out.json]
    python benchmarks/limits.py cartpole-ppo --set ppo.rollout_len=128 workers.envs_per_group=4

`--set` applies config overrides to every preset (benchmarks/suite.py passes each throughput
task's own, so the limits match the layout surge ran).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from typing import Any

# As in surge's trainer process (surge/runtime/warm.py): one OpenMP / BLAS thread unless the
# torch learner raises torch's count; the numpy learner computes on one.
for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import machine  # noqa: E402 - benchmarks/, next to this file
import numpy as np  # noqa: E402 - after the thread settings, which numpy reads on import

from surge.config.load import load_config  # noqa: E402
from surge.config.schema import ExperimentConfig  # noqa: E402
from surge.envs.group import make_group  # noqa: E402
from surge.envs.make import probe_env  # noqa: E402


def env_rate(cfg: ExperimentConfig, secs: float) -> dict[str, Any]:
    env = probe_env(cfg.env, cfg.seed)
    n = cfg.total_envs
    obs = {k: np.zeros((n, *s.shape), s.dtype) for k, s in env.obs.items()}
    group = make_group(cfg.env, list(range(1, n + 1)), obs)
    group.reset()
    space = group.action_space
    space.seed(0)
    actions = np.stack([np.stack([space.sample() for _ in range(n)]) for _ in range(256)])
    steps, i = 0, 0
    start = time.perf_counter()
    cpu = time.process_time()
    while time.perf_counter() - start < secs:
        group.step(actions[i % len(actions)])
        steps += n
        i += 1
    wall = time.perf_counter() - start
    cpu_used = time.process_time() - cpu
    group.close()
    return {"env_steps_per_s": steps / wall, "envs": n, "cpu_per_wall": cpu_used / wall}


def synthetic_batch(cfg: ExperimentConfig, env: Any, model: Any, g: Any) -> Any:
    """A torch RolloutBatch of the config's shape: random observations of the env's fields,
    sampled actions, the model's log-probs and values, random rewards, a few terminations."""
    import torch

    from surge.algos.batch import RolloutBatch

    T, N = cfg.ppo.rollout_len, cfg.total_envs

    def field(shape: tuple[int, ...], dtype: np.dtype[Any]) -> torch.Tensor:
        if np.issubdtype(dtype, np.integer):
            return torch.randint(0, 255, shape, dtype=torch.from_numpy(np.zeros(0, dtype)).dtype)
        return torch.randn(shape, generator=g)

    obs = {k: field((T, N, *s.shape), s.dtype) for k, s in env.obs.items()}
    space = env.action_space
    space.seed(0)
    actions = torch.from_numpy(np.stack([space.sample() for _ in range(T * N)]).reshape(T, N, -1))
    actions = actions.squeeze(-1) if actions.shape[-1] == 1 and not env.action.shape else actions
    with torch.no_grad():
        flat = {k: v.reshape(T * N, *v.shape[2:]) for k, v in obs.items()}
        logp, _, values = model.evaluate(flat, actions.reshape(T * N, *actions.shape[2:]))
    return RolloutBatch(
        obs=obs,
        last_obs={k: v[-1] for k, v in obs.items()},
        final_obs={k: torch.zeros_like(v) for k, v in obs.items()},
        actions=actions,
        logp=logp.reshape(T, N),
        values=values.reshape(T, N),
        rewards=torch.randn(T, N, generator=g),
        terminated=torch.rand(T, N, generator=g) < 0.01,
        truncated=torch.zeros(T, N, dtype=torch.bool),
    )


def learner_rate(cfg: ExperimentConfig, secs: float) -> dict[str, Any]:
    import torch

    from surge.algos.numpy_ppo import NumpyPPOUpdater
    from surge.algos.ppo import PPOUpdater
    from surge.models.actor_critic import ActorCritic
    from surge.models.numpy_net import NumpyActorCritic
    from surge.models.numpy_policy import numpy_layout
    from surge.models.weights import model_to_flat

    torch.set_num_threads(cfg.workers.trainer_threads)
    env = probe_env(cfg.env, cfg.seed)
    model = ActorCritic(env.observation_space, env.action_space, cfg.model)
    g = torch.Generator().manual_seed(0)
    batch = synthetic_batch(cfg, env, model, g)
    T, N = cfg.ppo.rollout_len, cfg.total_envs
    vtrace = cfg.appo if cfg.algo == "appo" else None
    # The backend the trainer would use (surge/learners/ppo.py: model.backend)
    layout = numpy_layout(env.observation_space, env.action_space, cfg.model)
    backend = "numpy" if layout is not None and cfg.model.backend != "torch" else "torch"
    learner: Any
    if backend == "numpy":
        net = NumpyActorCritic(layout, model_to_flat(model).copy())
        learner = NumpyPPOUpdater(net, cfg.ppo, np.random.default_rng(0), vtrace)
        batch = batch.map(lambda t: t.numpy())
    else:
        learner = PPOUpdater(model, cfg.ppo, g, vtrace)
    learner.update(batch, cfg.ppo.lr)  # warm-up (allocator, kernels)
    updates, start, cpu = 0, time.perf_counter(), time.process_time()
    while updates < 3 or time.perf_counter() - start < secs:
        learner.update(batch, cfg.ppo.lr)
        updates += 1
    wall = time.perf_counter() - start
    return {
        "samples_per_s": updates * T * N / wall,
        "update_ms": 1000 * wall / updates,
        "threads": cfg.workers.trainer_threads,
        "backend": backend,
        "cpu_per_wall": (time.process_time() - cpu) / wall,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("presets", nargs="+")
    parser.add_argument("--secs", type=float, default=10.0)
    parser.add_argument("--json", default=None)
    parser.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE")
    args = parser.parse_args()
    out: dict[str, Any] = {"machine": machine.describe()}
    print(machine.summary(out["machine"]), flush=True)
    for preset in args.presets:
        cfg, _ = load_config(preset, args.set)
        out[preset] = {"env": env_rate(cfg, args.secs), "learner": learner_rate(cfg, args.secs)}
        e, lrn = out[preset]["env"], out[preset]["learner"]
        print(
            f"{preset}: env {e['env_steps_per_s']:,.0f} steps/s ({e['envs']} envs); learner "
            f"{lrn['samples_per_s']:,.0f} samples/s ({lrn['update_ms']:.1f} ms/update, "
            f"{lrn['threads']} threads, {lrn['backend']})",
            flush=True,
        )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
