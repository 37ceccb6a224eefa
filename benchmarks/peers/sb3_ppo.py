"""Stable-Baselines3 PPO on the benchmark envs, DummyVecEnv.

    benchmarks/.venvs/base/bin/python benchmarks/peers/sb3_ppo.py \
        --env cartpole|pong --mode throughput|solve --max-secs 60 --log /tmp/sb3.jsonl

throughput: the matched settings (CleanRL's): CartPole 4 envs x 128 steps, batch 512 in
4 minibatches of 128, 4 epochs, lr 2.5e-4 linearly annealed, gamma .99, lambda .95,
clip .2, ent .01, vf .5, grad norm .5, separate 64x64 tanh actor and critic (SB3's default
orthogonal init). Pong: CnnPolicy (Nature CNN shared by both heads), 8 envs x 128, batch
256, clip .1 (as rl-baselines3-zoo's Atari settings, which are CleanRL's).
solve: rl-baselines3-zoo's tuned CartPole-v1 settings: 8 envs x 32 steps, batch 256,
20 epochs, gamma .98, lambda .8, ent 0, lr 1e-3 and clip .2 both annealed linearly over 1e5
steps. SB3 does not clip the value loss (CleanRL does): a library difference kept as is.
--defaults: SB3's own defaults instead, as `PPO("MlpPolicy", env)` gives a new user: one env,
2048 steps, batch 64, 10 epochs, lr 3e-4, gamma .99, lambda .95, ent 0.
"""

from __future__ import annotations

import time

import common
import torch
from stable_baselines3 import PPO
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.vec_env import DummyVecEnv


def linear(start: float):  # type: ignore[no-untyped-def]
    """SB3 schedules take progress_remaining, 1 -> 0."""
    return lambda progress_remaining: progress_remaining * start


MATCHED = {
    "cartpole": dict(
        n_envs=4,
        total=500_000,
        policy="MlpPolicy",
        kwargs=dict(
            n_steps=128,
            batch_size=128,
            n_epochs=4,
            learning_rate=linear(2.5e-4),
            gamma=0.99,
            gae_lambda=0.95,
            clip_range=0.2,
            ent_coef=0.01,
            vf_coef=0.5,
            max_grad_norm=0.5,
            policy_kwargs=dict(
                net_arch=dict(pi=[64, 64], vf=[64, 64]), activation_fn=torch.nn.Tanh
            ),
        ),
    ),
    "pong": dict(
        n_envs=8,
        total=10_000_000,
        policy="CnnPolicy",
        kwargs=dict(
            n_steps=128,
            batch_size=256,
            n_epochs=4,
            learning_rate=linear(2.5e-4),
            gamma=0.99,
            gae_lambda=0.95,
            clip_range=0.1,
            ent_coef=0.01,
            vf_coef=0.5,
            max_grad_norm=0.5,
        ),
    ),
}

# rl-baselines3-zoo hyperparams/ppo.yml, "CartPole-v1" (tuned)
ZOO_CARTPOLE = dict(
    n_envs=8,
    total=100_000,
    policy="MlpPolicy",
    kwargs=dict(
        n_steps=32,
        batch_size=256,
        gae_lambda=0.8,
        gamma=0.98,
        n_epochs=20,
        ent_coef=0.0,
        learning_rate=linear(1e-3),
        clip_range=linear(0.2),
    ),
)


SB3_DEFAULTS = dict(n_envs=1, total=1_000_000, policy="MlpPolicy", kwargs={})


class StopCallback(BaseCallback):
    """Stops learn() at max_secs, or at a solve in solve mode."""

    def __init__(self, log: common.EpisodeLog, max_secs: float, on_solve: bool) -> None:
        super().__init__()
        self.log, self.max_secs, self.on_solve = log, max_secs, on_solve
        self.reason = "total_timesteps"

    def _on_step(self) -> bool:
        if self.log.elapsed() >= self.max_secs:
            self.reason = "max_secs"
            return False
        if self.on_solve and self.log.solved:
            self.reason = "solved"
            return False
        return True


def main() -> None:
    parser = common.common_args(__doc__.split("\n\n")[0])
    parser.add_argument("--defaults", action="store_true", help="SB3's default settings")
    args = parser.parse_args()
    target = args.target if args.env == "cartpole" else None
    log = common.setup(args, target)
    spec = ZOO_CARTPOLE if (args.mode == "solve" and args.env == "cartpole") else MATCHED[args.env]
    if args.defaults:
        spec = SB3_DEFAULTS
    env = DummyVecEnv([lambda: common.make_env(args.env) for _ in range(spec["n_envs"])])
    model = PPO(spec["policy"], env, seed=args.seed, device="cpu", verbose=0, **spec["kwargs"])
    stop = StopCallback(log, args.max_secs, on_solve=args.mode == "solve")
    start = time.time()
    reason = None
    try:
        model.learn(total_timesteps=spec["total"], callback=stop)
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
