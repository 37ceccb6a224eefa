"""Train from Python with the same objects the `surge` command uses.

Run from the repository root:

    .venv/bin/python examples/train_from_python.py

`load_config` takes a preset name or a YAML path and `key=value` overrides, exactly like
`surge train`, and returns the validated `ExperimentConfig` and a name for the run directory.
`train` runs it (here on the default `local` runtime: the worker processes are started with
`spawn`, hence the `__main__` guard) and returns a `TrainResult`.
"""

from __future__ import annotations

import dataclasses

from surge.config.load import load_config
from surge.recipes.ppo import evaluate
from surge.runtime.controller import train


def main() -> None:
    cfg, name = load_config("cartpole-ppo", ["total_env_steps=20000"])
    # The config is a plain dataclass: it can also be changed in code before training.
    cfg = dataclasses.replace(cfg, log=dataclasses.replace(cfg.log, progress=False))
    result = train(cfg, name)
    print(f"run directory: {result.run_dir}")
    print(f"stopped because: {result.reason}")  # "solved", "budget" or "interrupted"
    print(f"env steps: {result.env_steps}, mean episode return: {result.episode_return_mean:.1f}")

    # What `surge eval RUN` does: play episodes with the newest checkpoint.
    scores = evaluate(result.run_dir, episodes=5)
    print(f"evaluation: {scores['return_mean']:.1f} +- {scores['return_std']:.1f}")


if __name__ == "__main__":
    main()
