"""CleanRL-style SAC in one file, written after CleanRL's `sac_continuous_action.py`, with
its default hyperparameters.

    benchmarks/.venvs/base/bin/python benchmarks/peers/cleanrl_sac.py \
        --env pendulum|halfcheetah --total-steps 20000 --max-secs 3600 --log /tmp/sac.jsonl

Envs: `pendulum` (Pendulum-v1), `halfcheetah` (HalfCheetah-v5), `hopper` (Hopper-v5); one
env in a gymnasium SyncVectorEnv (RecordEpisodeStatistics, action space seeded with the
seed). CleanRL's defaults: 1,000,000 steps in all (`--total-steps`; the benchmarks pass
20,000 for Pendulum and 300,000 for HalfCheetah); replay buffer 1e6 transitions (obs stored
as float32); gamma .99; tau .005; batch 256; uniform random actions for the first 5,000
steps, one update per env step after; Adam, policy lr 3e-4, Q lr 1e-3 (the entropy
coefficient's Adam uses the Q lr too); policy frequency 2, with CleanRL's compensation (every
2nd step the actor and alpha are updated twice, on the same batch); target networks updated
every step (frequency 1) by Polyak averaging; alpha autotuned from 1.0 (log alpha 0) with
target entropy -dim(A). Networks: two Q-networks (obs+action -> 256 -> 256 -> 1, ReLU) and
their targets, actor obs -> 256 -> 256 -> mean and log-std heads, log-std squashed by tanh
into [-5, 2], a tanh-squashed Gaussian scaled to the action bounds (action scale and bias),
log-prob corrected by log(scale * (1 - tanh^2) + 1e-6); PyTorch's default init. A truncated
transition stores the final observation as its next observation, and `done` is the
termination only, as CleanRL. Every setting is a flag with CleanRL's default (`--help`).

Differences from CleanRL, none in the settings: CleanRL's default env is Hopper-v4 (here
`--env` picks one); the replay buffer is cleanrl_dqn.py's numpy ring with the semantics of
the SB3-derived ReplayBuffer CleanRL uses (one env, `handle_timeout_termination=False`); the
acting forward runs under `torch.no_grad()`; gymnasium 1.x's vector env resets a finished env
in the same step (gymnasium 0.29's behaviour); no TensorBoard or console logging (the common
log has the raw episode returns). There is no solve target: `--mode` changes nothing, the
run ends at `--total-steps` or `--max-secs`.
"""

from __future__ import annotations

import argparse
import random
import time

import common
import gymnasium as gym
import numpy as np
import torch
import torch.nn.functional as F
from cleanrl_dqn import ReplayBuffer, final_obs_key, vector_env
from torch import nn

PENDULUM = "Pendulum-v1"
LOG_STD_MAX = 2
LOG_STD_MIN = -5


def make_env(name: str) -> gym.Env:
    if name == "pendulum":
        return common.LogSteps(gym.make(PENDULUM), episodes=True)
    return common.make_env(name)


class SoftQNetwork(nn.Module):
    def __init__(self, obs_dim: int, act_dim: int) -> None:
        super().__init__()
        self.fc1 = nn.Linear(obs_dim + act_dim, 256)
        self.fc2 = nn.Linear(256, 256)
        self.fc3 = nn.Linear(256, 1)

    def forward(self, x: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
        x = F.relu(self.fc1(torch.cat([x, a], 1)))
        x = F.relu(self.fc2(x))
        return self.fc3(x)


class Actor(nn.Module):
    def __init__(self, obs_dim: int, space: gym.spaces.Box) -> None:
        super().__init__()
        act_dim = int(np.prod(space.shape))
        self.fc1 = nn.Linear(obs_dim, 256)
        self.fc2 = nn.Linear(256, 256)
        self.fc_mean = nn.Linear(256, act_dim)
        self.fc_logstd = nn.Linear(256, act_dim)
        scale = (space.high - space.low) / 2.0
        bias = (space.high + space.low) / 2.0
        self.register_buffer("action_scale", torch.tensor(scale, dtype=torch.float32))
        self.register_buffer("action_bias", torch.tensor(bias, dtype=torch.float32))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x = F.relu(self.fc1(x))
        x = F.relu(self.fc2(x))
        mean = self.fc_mean(x)
        log_std = torch.tanh(self.fc_logstd(x))
        log_std = LOG_STD_MIN + 0.5 * (LOG_STD_MAX - LOG_STD_MIN) * (log_std + 1)
        return mean, log_std

    def get_action(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(sampled action, its log-prob [B, 1], the deterministic action), in env units."""
        mean, log_std = self(x)
        normal = torch.distributions.Normal(mean, log_std.exp())
        x_t = normal.rsample()
        y_t = torch.tanh(x_t)
        action = y_t * self.action_scale + self.action_bias
        log_prob = normal.log_prob(x_t)
        log_prob -= torch.log(self.action_scale * (1 - y_t.pow(2)) + 1e-6)
        log_prob = log_prob.sum(1, keepdim=True)
        mean = torch.tanh(mean) * self.action_scale + self.action_bias
        return action, log_prob, mean


def soft_update(net: nn.Module, target: nn.Module, tau: float) -> None:
    for param, target_param in zip(net.parameters(), target.parameters(), strict=True):
        target_param.data.copy_(tau * param.data + (1 - tau) * target_param.data)


def main() -> None:
    parser = common.common_args(__doc__.split("\n\n")[0])
    # common's --env has no Pendulum (and offers CartPole and Pong): this script's envs
    next(a for a in parser._actions if a.dest == "env").choices = ["pendulum", *common.MUJOCO]
    parser.add_argument("--total-steps", type=int, default=1_000_000)
    parser.add_argument("--buffer-size", type=int, default=1_000_000)
    parser.add_argument("--gamma", type=float, default=0.99)
    parser.add_argument("--tau", type=float, default=0.005)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--learning-starts", type=int, default=5_000)
    parser.add_argument("--policy-lr", type=float, default=3e-4)
    parser.add_argument("--q-lr", type=float, default=1e-3)
    parser.add_argument("--policy-frequency", type=int, default=2)
    parser.add_argument("--target-network-frequency", type=int, default=1)
    parser.add_argument("--alpha", type=float, default=0.2, help="used with --no-autotune")
    parser.add_argument("--autotune", action=argparse.BooleanOptionalAction, default=True)
    parser.set_defaults(env="pendulum", max_secs=3600.0)
    args = parser.parse_args()
    log = common.setup(args, None)

    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    torch.backends.cudnn.deterministic = True

    envs = vector_env(lambda: make_env(args.env), args.seed)
    space = envs.single_action_space
    assert isinstance(space, gym.spaces.Box), "only continuous action spaces are supported"
    obs_shape = envs.single_observation_space.shape
    obs_dim, act_dim = int(np.prod(obs_shape)), int(np.prod(space.shape))

    actor = Actor(obs_dim, space)
    qf1, qf2 = SoftQNetwork(obs_dim, act_dim), SoftQNetwork(obs_dim, act_dim)
    qf1_target, qf2_target = SoftQNetwork(obs_dim, act_dim), SoftQNetwork(obs_dim, act_dim)
    qf1_target.load_state_dict(qf1.state_dict())
    qf2_target.load_state_dict(qf2.state_dict())
    q_optimizer = torch.optim.Adam(list(qf1.parameters()) + list(qf2.parameters()), lr=args.q_lr)
    actor_optimizer = torch.optim.Adam(list(actor.parameters()), lr=args.policy_lr)

    if args.autotune:
        target_entropy = -float(act_dim)
        log_alpha = torch.zeros(1, requires_grad=True)
        alpha = log_alpha.exp().item()
        a_optimizer = torch.optim.Adam([log_alpha], lr=args.q_lr)
    else:
        alpha = args.alpha

    rb = ReplayBuffer(args.buffer_size, obs_shape, space.shape, np.float32)

    steps = 0
    reason = "total_steps"
    learn_s = 0.0
    start = time.time()
    obs, _ = envs.reset(seed=args.seed)
    try:
        for global_step in range(args.total_steps):
            if log.elapsed() >= args.max_secs:
                reason = "max_secs"
                break
            if global_step < args.learning_starts:
                actions = np.array([space.sample()])
            else:
                with torch.no_grad():
                    actions_t, _, _ = actor.get_action(torch.as_tensor(obs, dtype=torch.float32))
                actions = actions_t.numpy()

            next_obs, rewards, terminations, truncations, infos = envs.step(actions)
            steps += 1

            real_next_obs = next_obs.copy()
            if truncations[0]:
                real_next_obs[0] = infos[final_obs_key(infos)][0]
            rb.add(obs[0], real_next_obs[0], actions[0], rewards[0], terminations[0])
            obs = next_obs

            if global_step <= args.learning_starts:
                continue
            t_learn = time.time()
            b_obs, b_actions, b_next_obs, b_dones, b_rewards = rb.sample(args.batch_size)
            with torch.no_grad():
                next_actions, next_log_pi, _ = actor.get_action(b_next_obs)
                qf1_next = qf1_target(b_next_obs, next_actions)
                qf2_next = qf2_target(b_next_obs, next_actions)
                min_qf_next = torch.min(qf1_next, qf2_next) - alpha * next_log_pi
                next_q_value = b_rewards.flatten() + (1 - b_dones.flatten()) * args.gamma * (
                    min_qf_next.view(-1)
                )
            qf1_a_values = qf1(b_obs, b_actions).view(-1)
            qf2_a_values = qf2(b_obs, b_actions).view(-1)
            qf_loss = F.mse_loss(qf1_a_values, next_q_value) + F.mse_loss(
                qf2_a_values, next_q_value
            )
            q_optimizer.zero_grad()
            qf_loss.backward()
            q_optimizer.step()

            if global_step % args.policy_frequency == 0:  # TD3-style delayed update
                # compensate for the delay: policy_frequency updates instead of one
                for _ in range(args.policy_frequency):
                    pi, log_pi, _ = actor.get_action(b_obs)
                    min_qf_pi = torch.min(qf1(b_obs, pi), qf2(b_obs, pi))
                    actor_loss = ((alpha * log_pi) - min_qf_pi).mean()
                    actor_optimizer.zero_grad()
                    actor_loss.backward()
                    actor_optimizer.step()

                    if args.autotune:
                        with torch.no_grad():
                            _, log_pi, _ = actor.get_action(b_obs)
                        alpha_loss = (-log_alpha.exp() * (log_pi + target_entropy)).mean()
                        a_optimizer.zero_grad()
                        alpha_loss.backward()
                        a_optimizer.step()
                        alpha = log_alpha.exp().item()

            if global_step % args.target_network_frequency == 0:
                soft_update(qf1, qf1_target, args.tau)
                soft_update(qf2, qf2_target, args.tau)
            learn_s += time.time() - t_learn
    except KeyboardInterrupt:  # the harness's SIGINT at its timeout
        reason = "interrupted"

    wall = time.time() - start
    log.mark(
        end=True,
        reason=reason,
        own_steps=steps,
        own_sps=round(steps / max(wall, 1e-9), 1),
        learn_frac=round(learn_s / max(wall, 1e-9), 3),
    )
    envs.close()


if __name__ == "__main__":
    main()
