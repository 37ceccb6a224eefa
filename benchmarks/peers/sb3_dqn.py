"""Stable-Baselines3 DQN on CartPole-v1, one env in a DummyVecEnv.

    benchmarks/.venvs/base/bin/python benchmarks/peers/sb3_dqn.py \
        --env cartpole --mode throughput|solve [--zoo|--defaults] --max-secs 60 --log /tmp/d.jsonl

The settings follow sb3_ppo.py's pattern: the mode picks them, a flag overrides.
throughput: the matched settings (CleanRL's dqn.py, as cleanrl_dqn.py runs them): 500,000
steps, lr 2.5e-4, buffer 10,000, learning starts 10,000, batch 128, gamma .99, tau 1.0 with
target_update_interval 500, train_freq 10 with 1 gradient step, epsilon 1.0 -> .05 over
.5 x the steps, net_arch [120, 84] (ReLU, SB3's default activation for DQN).
solve (or --zoo in either mode): rl-baselines3-zoo's CartPole-v1 settings ("Almost Tuned"),
hyperparams/dqn.yml, read at the zoo's commit 22e3ff2 (2026-04-23): n_timesteps 5e4,
MlpPolicy, learning_rate 2.3e-3, batch_size 64, buffer_size 100000, learning_starts 1000,
gamma 0.99, target_update_interval 10, train_freq 256, gradient_steps 128,
exploration_fraction 0.16, exploration_final_eps 0.04, net_arch [256, 256]; the rest SB3's
defaults (tau 1.0, exploration_initial_eps 1.0, max_grad_norm 10).
--defaults: SB3's own defaults, as `DQN("MlpPolicy", env)` gives a new user: lr 1e-4, buffer
1e6, learning starts 100, batch 32, tau 1.0, gamma .99, train_freq 4, 1 gradient step,
target_update_interval 10,000, epsilon 1.0 -> .05 over .1 x the steps, net_arch [64, 64];
500,000 steps (SB3 has no default step budget; CleanRL's).
`--total-steps` overrides the step budget (it sets the length of the epsilon schedule).
SB3's DQN uses the Huber loss and clips the gradient norm at 10 (CleanRL: MSE, no clipping),
and its replay buffer bootstraps through truncations from the terminal observation (as
CleanRL does): library differences kept as they are. The run ends at the step budget,
`--max-secs`, or (solve) once the mean of the last 20 episodes reaches `--target` (475).
"""

from __future__ import annotations

import time

import common
from sb3_ppo import StopCallback
from stable_baselines3 import DQN
from stable_baselines3.common.vec_env import DummyVecEnv

MATCHED = dict(
    total=500_000,
    kwargs=dict(
        learning_rate=2.5e-4,
        buffer_size=10_000,
        learning_starts=10_000,
        batch_size=128,
        tau=1.0,
        gamma=0.99,
        train_freq=10,
        gradient_steps=1,
        target_update_interval=500,
        exploration_fraction=0.5,
        exploration_initial_eps=1.0,
        exploration_final_eps=0.05,
        policy_kwargs=dict(net_arch=[120, 84]),
    ),
)

# rl-baselines3-zoo hyperparams/dqn.yml, "CartPole-v1"
ZOO_CARTPOLE = dict(
    total=50_000,
    kwargs=dict(
        learning_rate=2.3e-3,
        batch_size=64,
        buffer_size=100_000,
        learning_starts=1000,
        gamma=0.99,
        target_update_interval=10,
        train_freq=256,
        gradient_steps=128,
        exploration_fraction=0.16,
        exploration_final_eps=0.04,
        policy_kwargs=dict(net_arch=[256, 256]),
    ),
)

SB3_DEFAULTS: dict = dict(total=500_000, kwargs={})


def main() -> None:
    parser = common.common_args(__doc__.split("\n\n")[0])
    # common's --env offers more envs: this DQN runs CartPole only
    next(a for a in parser._actions if a.dest == "env").choices = ["cartpole"]
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--zoo", action="store_true", help="rl-baselines3-zoo's settings")
    which.add_argument("--defaults", action="store_true", help="SB3's default settings")
    parser.add_argument("--total-steps", type=int, help="default: the settings' own budget")
    args = parser.parse_args()
    log = common.setup(args, args.target)
    spec = ZOO_CARTPOLE if (args.zoo or args.mode == "solve") else MATCHED
    if args.defaults:
        spec = SB3_DEFAULTS
    total = args.total_steps or spec["total"]
    env = DummyVecEnv([lambda: common.make_env(args.env)])
    model = DQN("MlpPolicy", env, seed=args.seed, device="cpu", verbose=0, **spec["kwargs"])
    stop = StopCallback(log, args.max_secs, on_solve=args.mode == "solve")
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
