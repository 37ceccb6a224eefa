"""The multi-agent benchmark's env and matched settings, shared by every multi-agent peer.

Every contender trains on PettingZoo MPE `simple_spread_v3` from the `mpe2` package, built
here by `make_spread` with `SPREAD_KWARGS` (3 agents, 3 landmarks, local_ratio 0.5, 25-step
episodes, discrete actions) as a PettingZoo *parallel* env, wrapped in `LogSpread`, which
writes the common JSONL log of peers/common.py:

- env steps (`steps`) and agent steps (`agent_steps`: the agents that acted in each env
  step; all 3 act in every step of simple_spread, whose episodes end only by truncation);
- one `return` per finished episode: the sum over agents and steps of every agent's reward
  (the team return; a uniformly random policy gets about -80, a scripted full-information
  one about -28).

The matched settings (`MATCHED`, in peers/marl_settings.py) are what every contender of
benchmarks/marl.py uses where its library lets it; each peer script's docstring says how it
maps them and what its library does differently.
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

import common
from marl_settings import MATCHED, N_AGENTS, SPREAD_KWARGS
from pettingzoo.utils.wrappers import BaseParallelWrapper

__all__ = ["MATCHED", "N_AGENTS", "SPREAD_KWARGS", "LogSpread", "make_spread", "marl_args"]


class LogSpread(BaseParallelWrapper):
    """Counts env and agent steps into the common log and logs each episode's team return."""

    def __init__(self, env: Any) -> None:
        super().__init__(env)
        self._team_return = 0.0

    def reset(self, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
        self._team_return = 0.0
        return self.env.reset(seed=seed, options=options)

    def step(self, actions: dict[str, Any]) -> Any:
        obs, rewards, terminations, truncations, infos = self.env.step(actions)
        log = common.EpisodeLog.get()
        log.add_steps(1, agents=len(actions))
        self._team_return += float(sum(rewards.values()))
        if not self.env.agents:  # every agent is done: the episode is over
            log.episode(self._team_return)
            self._team_return = 0.0
        return obs, rewards, terminations, truncations, infos


def make_spread() -> Any:
    """One simple_spread_v3 parallel env, logging into the common log."""
    from mpe2 import simple_spread_v3

    return LogSpread(simple_spread_v3.parallel_env(**SPREAD_KWARGS))


def marl_args(description: str) -> argparse.ArgumentParser:
    """The arguments every multi-agent peer script takes."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--max-secs", type=float, default=60.0, help="stop after this wall time")
    p.add_argument("--log", required=True, help="the common JSONL log to write")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--threads", type=int, default=1, help="torch threads per process")
    p.add_argument("--n-envs", type=int, default=MATCHED["n_envs"])
    p.add_argument("--rollout-len", type=int, default=MATCHED["rollout_len"])
    p.add_argument("--epochs", type=int, default=MATCHED["epochs"])
    p.add_argument("--minibatches", type=int, default=MATCHED["minibatches"])
    p.set_defaults(sticky=0.0)  # common.setup() reads it (Atari only)
    return p


def raw_rate(secs: float, seed: int = 1) -> dict[str, float]:
    """simple_spread alone, no log: env and agent steps per second of one env in this process
    under uniformly random actions (the ceiling of one core's env stepping)."""
    import numpy as np
    from mpe2 import simple_spread_v3

    env = simple_spread_v3.parallel_env(**SPREAD_KWARGS)
    rng = np.random.default_rng(seed)
    steps = agent_steps = episodes = 0
    start = time.perf_counter()
    while time.perf_counter() - start < secs:
        env.reset(seed=seed + episodes)
        episodes += 1
        while env.agents:
            env.step({a: int(rng.integers(5)) for a in env.agents})
            steps += 1
            agent_steps += N_AGENTS
    wall = time.perf_counter() - start
    return {"env_sps": round(steps / wall, 1), "agent_sps": round(agent_steps / wall, 1)}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="simple_spread's raw rate (random actions)")
    parser.add_argument("--secs", type=float, default=10.0)
    print(json.dumps(raw_rate(parser.parse_args().secs)))
