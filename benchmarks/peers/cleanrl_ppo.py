"""CleanRL-style PPO in one file, written after CleanRL's `ppo.py` (CartPole) and
`ppo_atari.py` (Pong), with their default hyperparameters.

    benchmarks/.venvs/base/bin/python benchmarks/peers/cleanrl_ppo.py \
        --env cartpole|pong --mode throughput|solve --max-secs 60 --log /tmp/cleanrl.jsonl

CartPole: 4 envs x 128 steps, 4 epochs x 4 minibatches, lr 2.5e-4 annealed to 0 over
500k steps, gamma .99, lambda .95, clip .2 (value clipped too), ent .01, vf .5, grad norm .5,
Adam eps 1e-5, separate 64x64 tanh actor and critic with orthogonal init, gymnasium
SyncVectorEnv. Pong: 8 envs x 128, clip .1, lr annealed over 10M steps, Nature CNN trunk
shared by the actor and critic heads. Truncations end the episode without bootstrapping,
as in CleanRL. CleanRL's recommended settings are its defaults, so --mode only decides
whether the run stops at a solve (mean of the last 20 episodes >= 475, CartPole).
"""

from __future__ import annotations

import random
import time

import common
import gymnasium as gym
import numpy as np
import torch
from cleanrl_nets import layer_init, tanh_mlp
from torch import nn
from torch.distributions.categorical import Categorical

SETTINGS = {
    "cartpole": dict(num_envs=4, num_steps=128, total_timesteps=500_000, clip_coef=0.2, lr=2.5e-4),
    "pong": dict(num_envs=8, num_steps=128, total_timesteps=10_000_000, clip_coef=0.1, lr=2.5e-4),
}
UPDATE_EPOCHS = 4
NUM_MINIBATCHES = 4
GAMMA = 0.99
GAE_LAMBDA = 0.95
ENT_COEF = 0.01
VF_COEF = 0.5
MAX_GRAD_NORM = 0.5


class MlpAgent(nn.Module):
    def __init__(self, obs_dim: int, n_actions: int) -> None:
        super().__init__()
        self.critic = tanh_mlp(obs_dim, 1, out_std=1.0)
        self.actor = tanh_mlp(obs_dim, n_actions, out_std=0.01)

    def get_value(self, x: torch.Tensor) -> torch.Tensor:
        return self.critic(x)

    def get_action_and_value(self, x: torch.Tensor, action: torch.Tensor | None = None):  # type: ignore[no-untyped-def]
        dist = Categorical(logits=self.actor(x))
        if action is None:
            action = dist.sample()
        return action, dist.log_prob(action), dist.entropy(), self.critic(x)


class CnnAgent(nn.Module):
    """Nature CNN trunk shared by the policy and value heads; input scaled by 1/255."""

    def __init__(self, n_actions: int) -> None:
        super().__init__()
        self.network = nn.Sequential(
            layer_init(nn.Conv2d(4, 32, 8, stride=4)),
            nn.ReLU(),
            layer_init(nn.Conv2d(32, 64, 4, stride=2)),
            nn.ReLU(),
            layer_init(nn.Conv2d(64, 64, 3, stride=1)),
            nn.ReLU(),
            nn.Flatten(),
            layer_init(nn.Linear(64 * 7 * 7, 512)),
            nn.ReLU(),
        )
        self.actor = layer_init(nn.Linear(512, n_actions), std=0.01)
        self.critic = layer_init(nn.Linear(512, 1), std=1)

    def get_value(self, x: torch.Tensor) -> torch.Tensor:
        return self.critic(self.network(x / 255.0))

    def get_action_and_value(self, x: torch.Tensor, action: torch.Tensor | None = None):  # type: ignore[no-untyped-def]
        hidden = self.network(x / 255.0)
        dist = Categorical(logits=self.actor(hidden))
        if action is None:
            action = dist.sample()
        return action, dist.log_prob(action), dist.entropy(), self.critic(hidden)


def make_vec_env(name: str, n: int) -> gym.vector.SyncVectorEnv:
    fns = [lambda: common.make_env(name) for _ in range(n)]
    # CleanRL was written for gymnasium 0.29, whose vector envs reset a finished env in the
    # same step (the returned obs is the next episode's first); gymnasium 1.x defaults to
    # resetting on the next step, so ask for the old behaviour.
    mode = getattr(getattr(gym.vector, "AutoresetMode", None), "SAME_STEP", None)
    if mode is not None:
        return gym.vector.SyncVectorEnv(fns, autoreset_mode=mode)
    return gym.vector.SyncVectorEnv(fns)


def main() -> None:
    parser = common.common_args(__doc__.split("\n\n")[0])
    args = parser.parse_args()
    target = args.target if args.env == "cartpole" else None
    log = common.setup(args, target)
    s = SETTINGS[args.env]
    num_envs, num_steps = s["num_envs"], s["num_steps"]
    batch_size = num_envs * num_steps
    minibatch_size = batch_size // NUM_MINIBATCHES
    num_iterations = s["total_timesteps"] // batch_size

    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    torch.backends.cudnn.deterministic = True
    device = torch.device("cpu")

    envs = make_vec_env(args.env, num_envs)
    n_actions = int(envs.single_action_space.n)
    if args.env == "cartpole":
        agent: nn.Module = MlpAgent(int(np.prod(envs.single_observation_space.shape)), n_actions)
    else:
        agent = CnnAgent(n_actions)
    agent = agent.to(device)
    optimizer = torch.optim.Adam(agent.parameters(), lr=s["lr"], eps=1e-5)

    obs_shape = envs.single_observation_space.shape
    obs = torch.zeros((num_steps, num_envs, *obs_shape), dtype=torch.float32)
    actions = torch.zeros((num_steps, num_envs), dtype=torch.long)
    logprobs = torch.zeros((num_steps, num_envs))
    rewards = torch.zeros((num_steps, num_envs))
    dones = torch.zeros((num_steps, num_envs))
    values = torch.zeros((num_steps, num_envs))

    global_step = 0
    start = time.time()
    next_obs_np, _ = envs.reset(seed=args.seed)
    next_obs = torch.as_tensor(next_obs_np, dtype=torch.float32)
    next_done = torch.zeros(num_envs)
    reason = "total_timesteps"
    rollout_s = learn_s = 0.0

    try:
        for iteration in range(1, num_iterations + 1):
            if log.elapsed() >= args.max_secs:
                reason = "max_secs"
                break
            if args.mode == "solve" and log.solved:
                reason = "solved"
                break
            frac = 1.0 - (iteration - 1.0) / num_iterations
            optimizer.param_groups[0]["lr"] = frac * s["lr"]

            t_roll = time.time()
            for step in range(num_steps):
                global_step += num_envs
                obs[step] = next_obs
                dones[step] = next_done
                with torch.no_grad():
                    action, logprob, _, value = agent.get_action_and_value(next_obs)
                    values[step] = value.flatten()
                actions[step] = action
                logprobs[step] = logprob
                next_obs_np, reward, terminations, truncations, _ = envs.step(action.numpy())
                rewards[step] = torch.as_tensor(reward, dtype=torch.float32)
                next_obs = torch.as_tensor(next_obs_np, dtype=torch.float32)
                next_done = torch.as_tensor(
                    np.logical_or(terminations, truncations), dtype=torch.float32
                )
            rollout_s += time.time() - t_roll

            t_learn = time.time()
            with torch.no_grad():
                next_value = agent.get_value(next_obs).reshape(1, -1)
                advantages = torch.zeros_like(rewards)
                lastgaelam = torch.zeros(num_envs)
                for t in reversed(range(num_steps)):
                    if t == num_steps - 1:
                        nextnonterminal = 1.0 - next_done
                        nextvalues = next_value
                    else:
                        nextnonterminal = 1.0 - dones[t + 1]
                        nextvalues = values[t + 1]
                    delta = rewards[t] + GAMMA * nextvalues * nextnonterminal - values[t]
                    lastgaelam = delta + GAMMA * GAE_LAMBDA * nextnonterminal * lastgaelam
                    advantages[t] = lastgaelam
                returns = advantages + values

            b_obs = obs.reshape((-1, *obs_shape))
            b_logprobs = logprobs.reshape(-1)
            b_actions = actions.reshape(-1)
            b_advantages = advantages.reshape(-1)
            b_returns = returns.reshape(-1)
            b_values = values.reshape(-1)

            b_inds = np.arange(batch_size)
            for _epoch in range(UPDATE_EPOCHS):
                np.random.shuffle(b_inds)
                for begin in range(0, batch_size, minibatch_size):
                    mb_inds = b_inds[begin : begin + minibatch_size]
                    _, newlogprob, entropy, newvalue = agent.get_action_and_value(
                        b_obs[mb_inds], b_actions[mb_inds]
                    )
                    logratio = newlogprob - b_logprobs[mb_inds]
                    ratio = logratio.exp()

                    mb_advantages = b_advantages[mb_inds]
                    mb_advantages = (mb_advantages - mb_advantages.mean()) / (
                        mb_advantages.std() + 1e-8
                    )
                    pg_loss1 = -mb_advantages * ratio
                    pg_loss2 = -mb_advantages * torch.clamp(
                        ratio, 1 - s["clip_coef"], 1 + s["clip_coef"]
                    )
                    pg_loss = torch.max(pg_loss1, pg_loss2).mean()

                    newvalue = newvalue.view(-1)
                    v_loss_unclipped = (newvalue - b_returns[mb_inds]) ** 2
                    v_clipped = b_values[mb_inds] + torch.clamp(
                        newvalue - b_values[mb_inds], -s["clip_coef"], s["clip_coef"]
                    )
                    v_loss_clipped = (v_clipped - b_returns[mb_inds]) ** 2
                    v_loss = 0.5 * torch.max(v_loss_unclipped, v_loss_clipped).mean()

                    loss = pg_loss - ENT_COEF * entropy.mean() + v_loss * VF_COEF
                    optimizer.zero_grad()
                    loss.backward()
                    nn.utils.clip_grad_norm_(agent.parameters(), MAX_GRAD_NORM)
                    optimizer.step()
            learn_s += time.time() - t_learn
    except KeyboardInterrupt:  # the harness's SIGINT at its timeout
        reason = "interrupted"

    wall = time.time() - start
    log.mark(
        end=True,
        reason=reason,
        own_steps=global_step,
        own_sps=round(global_step / max(wall, 1e-9), 1),
        rollout_frac=round(rollout_s / max(wall, 1e-9), 3),
        learn_frac=round(learn_s / max(wall, 1e-9), 3),
    )
    envs.close()


if __name__ == "__main__":
    main()
