"""Train, evaluate and use a policy from Python with the `surge` package's API.

Run from the repository root:

    .venv/bin/python examples/train_from_python.py

`surge.train` runs what `surge train` runs: a preset name or YAML path, then settings as
keyword arguments (a double underscore for each dot of the config key: `ppo__lr` is
`ppo.lr`) or as the command line's `key=value` strings (`overrides=[...]`). It returns a
`Run`: its directory, the `TrainResult`, its metrics, its evaluation and its newest
checkpoint. `surge.load` turns the checkpoint into a policy that acts on the env's
observations. The local runtime starts its workers with `spawn`, which imports this script
in each of them: hence the `__main__` guard (docs/python-api.md).
"""

from __future__ import annotations

import dataclasses

import gymnasium as gym

import surge


def main() -> None:
    # A config to start from: the preset with settings changed, validated like the CLI's.
    cfg = surge.config("cartpole-ppo", total_env_steps=20_000)
    # It is a plain dataclass: it can also be changed in code before training.
    cfg = dataclasses.replace(cfg, log=dataclasses.replace(cfg.log, progress=False))
    run = surge.train(cfg, ppo__lr=1e-3)
    result = run.result
    assert result is not None
    print(f"run directory: {run.dir}")
    print(f"stopped because: {result.reason}")  # "solved", "budget" or "interrupted"
    print(f"env steps: {result.env_steps}, mean episode return: {result.episode_return_mean:.1f}")
    print(f"logged records: {len(run.metrics())} (pandas.DataFrame(run.metrics()) tabulates)")

    # What `surge eval RUN` does: play episodes with the newest checkpoint.
    scores = run.evaluate(episodes=5)
    print(f"evaluation: {scores['return_mean']:.1f} +- {scores['return_std']:.1f}")

    # The trained policy in a loop of your own: greedy actions on the env's observations.
    policy = surge.load(run.dir)
    env = gym.make("CartPole-v1")
    obs, _ = env.reset(seed=0)
    total, done = 0.0, False
    while not done:
        obs, reward, terminated, truncated, _ = env.step(policy.act(obs))
        total += float(reward)
        done = terminated or truncated
    print(f"one episode of {policy}: return {total:.0f}")


if __name__ == "__main__":
    main()
