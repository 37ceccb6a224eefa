"""CleanRL-style continuous-action PPO in one file, written after CleanRL's
`ppo_continuous_action.py`, with its default hyperparameters.

    benchmarks/.venvs/base/bin/python benchmarks/peers/cleanrl_ppo_continuous.py \
        --env halfcheetah|hopper --total-steps 1000000 --max-secs 3600 --log /tmp/cr.jsonl

1 env x 2048 steps, 10 epochs x 32 minibatches (64 steps each), lr 3e-4 annealed to 0,
gamma .99, lambda .95, clip .2 (value clipped too), ent 0, vf .5, grad norm .5, Adam eps
1e-5, separate 64x64 tanh actor and critic with orthogonal init, a state-independent
log-std initialised to 0, a Gaussian without tanh squashing. The env wrappers are CleanRL's:
ClipAction, NormalizeObservation, observations clipped to [-10, 10], NormalizeReward (gamma
.99), rewards clipped to [-10, 10]; the common log records the raw episode returns (it sits
under the wrappers). Gymnasium 1.x's NormalizeReward resets its discounted return only on
termination (never on truncation), unlike gym 0.23's that CleanRL was written against; on
HalfCheetah (never terminates) the return runs on across episodes, discounted by 0.99 per
step, which changes its scale little. Truncations end the episode without bootstrapping,
as in CleanRL.
"""

from __future__ import annotations

import random
import time

import common
import gymnasium as gym
import numpy as np
import torch
from cleanrl_nets import tanh_mlp
from torch import nn
from torch.distributions.normal import Normal

NUM_ENVS = 1
NUM_STEPS = 2048
LR = 3e-4
UPDATE_EPOCHS = 10
NUM_MINIBATCHES = 32
GAMMA = 0.99
GAE_LAMBDA = 0.95
CLIP_COEF = 0.2
ENT_COEF = 0.0
VF_COEF = 0.5
MAX_GRAD_NORM = 0.5


class Agent(nn.Module):
    def __init__(self, obs_dim: int, act_dim: int) -> None:
        super().__init__()
        self.critic = tanh_mlp(obs_dim, 1, out_std=1.0)
        self.actor_mean = tanh_mlp(obs_dim, act_dim, out_std=0.01)
        self.actor_logstd = nn.Parameter(torch.zeros(1, act_dim))

    def get_value(self, x: torch.Tensor) -> torch.Tensor:
        return self.critic(x)

    def get_action_and_value(self, x: torch.Tensor, action: torch.Tensor | None = None):  # type: ignore[no-untyped-def]
        action_mean = self.actor_mean(x)
        action_std = torch.exp(self.actor_logstd.expand_as(action_mean))
        probs = Normal(action_mean, action_std)
        if action is None:
            action = probs.sample()
        return action, probs.log_prob(action).sum(1), probs.entropy().sum(1), self.critic(x)


def make_env(name: str) -> gym.Env:
    env = common.make_env(name)  # logs the raw returns
    env = gym.wrappers.ClipAction(env)
    env = gym.wrappers.NormalizeObservation(env)
    env = gym.wrappers.TransformObservation(
        env, lambda obs: np.clip(obs, -10, 10), env.observation_space
    )
    env = gym.wrappers.NormalizeReward(env, gamma=GAMMA)
    env = gym.wrappers.TransformReward(env, lambda reward: np.clip(reward, -10, 10))
    return env


def main() -> None:
    parser = common.common_args(__doc__.split("\n\n")[0])
    parser.add_argument("--total-steps", type=int, default=1_000_000)
    parser.set_defaults(env="halfcheetah", max_secs=3600.0)
    args = parser.parse_args()
    if args.env not in common.MUJOCO:
        parser.error(f"--env must be one of {', '.join(common.MUJOCO)}")
    log = common.setup(args, None)
    batch_size = NUM_ENVS * NUM_STEPS
    minibatch_size = batch_size // NUM_MINIBATCHES
    num_iterations = args.total_steps // batch_size

    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    torch.backends.cudnn.deterministic = True

    # CleanRL was written for gymnasium 0.29, whose vector envs reset a finished env in the
    # same step; gymnasium 1.x defaults to resetting on the next step: ask for the old one.
    fns = [lambda: make_env(args.env) for _ in range(NUM_ENVS)]
    mode = getattr(getattr(gym.vector, "AutoresetMode", None), "SAME_STEP", None)
    envs = (
        gym.vector.SyncVectorEnv(fns, autoreset_mode=mode)
        if mode is not None
        else gym.vector.SyncVectorEnv(fns)
    )
    obs_shape = envs.single_observation_space.shape
    act_shape = envs.single_action_space.shape
    agent = Agent(int(np.prod(obs_shape)), int(np.prod(act_shape)))
    optimizer = torch.optim.Adam(agent.parameters(), lr=LR, eps=1e-5)

    obs = torch.zeros((NUM_STEPS, NUM_ENVS, *obs_shape))
    actions = torch.zeros((NUM_STEPS, NUM_ENVS, *act_shape))
    logprobs = torch.zeros((NUM_STEPS, NUM_ENVS))
    rewards = torch.zeros((NUM_STEPS, NUM_ENVS))
    dones = torch.zeros((NUM_STEPS, NUM_ENVS))
    values = torch.zeros((NUM_STEPS, NUM_ENVS))

    global_step = 0
    start = time.time()
    next_obs_np, _ = envs.reset(seed=args.seed)
    next_obs = torch.as_tensor(next_obs_np, dtype=torch.float32)
    next_done = torch.zeros(NUM_ENVS)
    reason = "total_timesteps"
    rollout_s = learn_s = 0.0

    try:
        for iteration in range(1, num_iterations + 1):
            if log.elapsed() >= args.max_secs:
                reason = "max_secs"
                break
            frac = 1.0 - (iteration - 1.0) / num_iterations
            optimizer.param_groups[0]["lr"] = frac * LR

            t_roll = time.time()
            for step in range(NUM_STEPS):
                global_step += NUM_ENVS
                obs[step] = next_obs
                dones[step] = next_done
                with torch.no_grad():
                    action, logprob, _, value = agent.get_action_and_value(next_obs)
                    values[step] = value.flatten()
                actions[step] = action
                logprobs[step] = logprob
                next_obs_np, reward, terminations, truncations, _ = envs.step(action.numpy())
                rewards[step] = torch.as_tensor(reward, dtype=torch.float32).view(-1)
                next_obs = torch.as_tensor(next_obs_np, dtype=torch.float32)
                next_done = torch.as_tensor(
                    np.logical_or(terminations, truncations), dtype=torch.float32
                )
            rollout_s += time.time() - t_roll

            t_learn = time.time()
            with torch.no_grad():
                next_value = agent.get_value(next_obs).reshape(1, -1)
                advantages = torch.zeros_like(rewards)
                lastgaelam = torch.zeros(NUM_ENVS)
                for t in reversed(range(NUM_STEPS)):
                    if t == NUM_STEPS - 1:
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
            b_actions = actions.reshape((-1, *act_shape))
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
                    pg_loss2 = -mb_advantages * torch.clamp(ratio, 1 - CLIP_COEF, 1 + CLIP_COEF)
                    pg_loss = torch.max(pg_loss1, pg_loss2).mean()

                    newvalue = newvalue.view(-1)
                    v_loss_unclipped = (newvalue - b_returns[mb_inds]) ** 2
                    v_clipped = b_values[mb_inds] + torch.clamp(
                        newvalue - b_values[mb_inds], -CLIP_COEF, CLIP_COEF
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
