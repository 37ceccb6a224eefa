"""surge: scalable reinforcement learning with actor, policy and trainer workers.

The Python API (surge/api.py, docs/python-api.md):

    import surge

    run = surge.train("cartpole-appo")  # what `surge train cartpole-appo` runs
    print(run.evaluate(episodes=10))  # what `surge eval RUN` prints, as a dict
    policy = surge.load(run.dir)  # the trained policy: policy.act(obs)

`surge.config(preset, **settings)` returns the validated `ExperimentConfig` (`surge.config`
is also the config subpackage: `surge.config.schema`, `surge.config.load`).
"""

from surge.api import Policy, Run, load, train

__all__ = ["Policy", "Run", "config", "load", "train"]
