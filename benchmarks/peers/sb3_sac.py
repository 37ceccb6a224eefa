"""Stable-Baselines3 SAC on Pendulum and MuJoCo, one env in a DummyVecEnv.

    benchmarks/.venvs/base/bin/python benchmarks/peers/sb3_sac.py \
        --env pendulum|halfcheetah [--defaults] --max-secs 3600 --log /tmp/sac.jsonl

Settings: rl-baselines3-zoo's, hyperparams/sac.yml read at the zoo's commit 22e3ff2
(2026-04-23), the rest SB3's SAC defaults:
- `pendulum` (Pendulum-v1): n_timesteps 20,000, MlpPolicy, learning_rate 1e-3.
- `halfcheetah` (zoo: HalfCheetah-v4; here HalfCheetah-v5) and `hopper` (Hopper-v5), the
  zoo's `mujoco-defaults`: n_timesteps 1e6, MlpPolicy, learning_starts 10,000.
SB3's SAC defaults (v2.9.2) for everything else: lr 3e-4 (one for actor, critics and the
entropy coefficient), buffer 1e6, learning starts 100, batch 256, tau .005, gamma .99,
train_freq 1 with 1 gradient step, target_update_interval 1, ent_coef "auto" (from 1.0,
target entropy -dim(A)), net_arch [256, 256] ReLU for the actor and both critics, log-std
clamped to [-20, 2], no policy delay. `--defaults`: SB3's defaults for every setting (as
`SAC("MlpPolicy", env)` gives a new user), with the zoo's step budget.
`--total-steps` overrides the step budget (the benchmarks pass 20,000 for Pendulum and
300,000 for HalfCheetah). There is no solve target: `--mode` changes nothing, the run ends
at the step budget or `--max-secs`. Against cleanrl_sac.py (CleanRL's settings): one learning
rate instead of 3e-4 / 1e-3, no delayed actor update, learning starts 100 / 10,000 instead
of 5,000: library differences kept as they are.
"""

from __future__ import annotations

import time

import common
import gymnasium as gym
from sb3_ppo import StopCallback
from stable_baselines3 import SAC
from stable_baselines3.common.vec_env import DummyVecEnv

PENDULUM = "Pendulum-v1"

# rl-baselines3-zoo hyperparams/sac.yml: "Pendulum-v1", and "HalfCheetah-v4" (&mujoco-defaults)
ZOO: dict[str, dict] = {
    "pendulum": dict(total=20_000, kwargs=dict(learning_rate=1e-3)),
    **{name: dict(total=1_000_000, kwargs=dict(learning_starts=10_000)) for name in common.MUJOCO},
}


def make_env(name: str) -> gym.Env:
    if name == "pendulum":
        return common.LogSteps(gym.make(PENDULUM), episodes=True)
    return common.make_env(name)


def main() -> None:
    parser = common.common_args(__doc__.split("\n\n")[0])
    # common's --env has no Pendulum (and offers CartPole and Pong): this script's envs
    next(a for a in parser._actions if a.dest == "env").choices = ["pendulum", *common.MUJOCO]
    parser.add_argument("--defaults", action="store_true", help="SB3's default settings")
    parser.add_argument("--total-steps", type=int, help="default: the zoo's n_timesteps")
    parser.set_defaults(env="pendulum", max_secs=3600.0)
    args = parser.parse_args()
    log = common.setup(args, None)
    spec = ZOO[args.env]
    kwargs = {} if args.defaults else spec["kwargs"]
    total = args.total_steps or spec["total"]
    env = DummyVecEnv([lambda: make_env(args.env)])
    model = SAC("MlpPolicy", env, seed=args.seed, device="cpu", verbose=0, **kwargs)
    stop = StopCallback(log, args.max_secs, on_solve=False)
    start = time.time()
    reason = None
    try:
        model.learn(total_timesteps=total, callback=stop)
    except KeyboardInterrupt:
        reason = "interrupted"
    wall = time.time() - start
    steps = int(model.num_timesteps)
    log.mark(
        end=True,
        reason=reason or stop.reason,
        own_steps=steps,
        own_sps=round(steps / max(wall, 1e-9), 1),
    )
    env.close()


if __name__ == "__main__":
    main()
