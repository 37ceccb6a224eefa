"""CleanRL-style DQN in one file, written after CleanRL's `dqn.py` (CartPole), with its
default hyperparameters.

    benchmarks/.venvs/base/bin/python benchmarks/peers/cleanrl_dqn.py \
        --env cartpole --mode throughput|solve --max-secs 60 --log /tmp/cleanrl_dqn.jsonl

CartPole-v1, one env in a gymnasium SyncVectorEnv (RecordEpisodeStatistics, action space
seeded with the seed), 500,000 steps in all; Adam lr 2.5e-4; replay buffer of 10,000
transitions; gamma .99; target network copied with tau 1.0 (a hard copy) every 500 steps;
batch 128; epsilon linear from 1.0 to .05 over .5 x the total steps, then .05; learning
starts after 10,000 steps, then one gradient step every 10 env steps; Q-network MLP
obs -> 120 -> 84 -> actions with ReLU and PyTorch's default init; MSE loss on the one-step
TD target with the max over the target network. As CleanRL, a truncated transition stores
the episode's final observation as its next observation, and `done` is the termination only
(a truncation bootstraps). Every setting is a flag with CleanRL's default (`--help`).

Differences from CleanRL, none in the settings: the replay buffer is a numpy ring with the
semantics of the SB3-derived `ReplayBuffer` CleanRL uses for one env with
`handle_timeout_termination=False` (uniform sampling with replacement from the filled part,
`np.random` indices, float32 rewards and dones); the acting forward runs under
`torch.no_grad()` (same actions, no autograd graph); gymnasium 1.x's vector env is asked for
same-step autoreset (gymnasium 0.29's behaviour, which CleanRL was written against: the
final observation is in `infos["final_obs"]`); no TensorBoard or console logging: episodes
are logged in the common format by `common.make_env`. The run ends at `--total-steps` or
`--max-secs`; `--mode solve` also ends it once the mean of the last 20 episodes reaches
`--target` (475). torch threads: `--threads` (`common.setup` calls
`torch.set_num_threads`).
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable

import common
import gymnasium as gym
import numpy as np
import torch
import torch.nn.functional as F
from torch import nn


class ReplayBuffer:
    """A ring of `size` transitions of one env, as SB3's ReplayBuffer (n_envs=1,
    handle_timeout_termination=False, optimize_memory_usage=False) stores and samples them:
    a new transition overwrites the oldest once full; `sample` draws indices uniformly with
    replacement from the filled part with `np.random.randint`. cleanrl_sac.py uses it too."""

    def __init__(
        self,
        size: int,
        obs_shape: tuple[int, ...],
        act_shape: tuple[int, ...],
        act_dtype: np.dtype | type,
        obs_dtype: np.dtype | type = np.float32,
    ) -> None:
        self.size = size
        self.obs = np.zeros((size, *obs_shape), dtype=obs_dtype)
        self.next_obs = np.zeros((size, *obs_shape), dtype=obs_dtype)
        self.actions = np.zeros((size, *act_shape), dtype=act_dtype)
        self.rewards = np.zeros((size, 1), dtype=np.float32)
        self.dones = np.zeros((size, 1), dtype=np.float32)
        self.pos = 0
        self.full = False

    def add(
        self, obs: np.ndarray, next_obs: np.ndarray, action: np.ndarray, reward: float, done: bool
    ) -> None:
        i = self.pos
        self.obs[i] = obs
        self.next_obs[i] = next_obs
        self.actions[i] = action
        self.rewards[i] = reward
        self.dones[i] = done
        self.pos = (i + 1) % self.size
        self.full = self.full or self.pos == 0

    def sample(self, batch_size: int) -> tuple[torch.Tensor, ...]:
        """(obs, actions, next_obs, dones [B, 1], rewards [B, 1]) as torch tensors."""
        idx = np.random.randint(0, self.size if self.full else self.pos, size=batch_size)
        return tuple(
            torch.from_numpy(a[idx])
            for a in (self.obs, self.actions, self.next_obs, self.dones, self.rewards)
        )


def vector_env(make: Callable[[], gym.Env], seed: int) -> gym.vector.SyncVectorEnv:
    """CleanRL's env setup for one env: RecordEpisodeStatistics, action space seeded, in a
    SyncVectorEnv that resets a finished env in the same step (gymnasium 0.29's way)."""

    def thunk() -> gym.Env:
        env = gym.wrappers.RecordEpisodeStatistics(make())
        env.action_space.seed(seed)
        return env

    mode = getattr(getattr(gym.vector, "AutoresetMode", None), "SAME_STEP", None)
    if mode is not None:
        return gym.vector.SyncVectorEnv([thunk], autoreset_mode=mode)
    return gym.vector.SyncVectorEnv([thunk])


def final_obs_key(infos: dict) -> str:
    """gymnasium 1.x calls the final observation `final_obs`, 0.29 `final_observation`."""
    return "final_obs" if "final_obs" in infos else "final_observation"


class QNetwork(nn.Module):
    def __init__(self, obs_dim: int, n_actions: int) -> None:
        super().__init__()
        self.network = nn.Sequential(
            nn.Linear(obs_dim, 120),
            nn.ReLU(),
            nn.Linear(120, 84),
            nn.ReLU(),
            nn.Linear(84, n_actions),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.network(x)


def linear_schedule(start_e: float, end_e: float, duration: float, t: int) -> float:
    slope = (end_e - start_e) / duration
    return max(slope * t + start_e, end_e)


def main() -> None:
    parser = common.common_args(__doc__.split("\n\n")[0])
    # common's --env offers more envs: this DQN runs CartPole only
    next(a for a in parser._actions if a.dest == "env").choices = ["cartpole"]
    parser.add_argument("--total-steps", type=int, default=500_000)
    parser.add_argument("--learning-rate", type=float, default=2.5e-4)
    parser.add_argument("--buffer-size", type=int, default=10_000)
    parser.add_argument("--gamma", type=float, default=0.99)
    parser.add_argument("--tau", type=float, default=1.0)
    parser.add_argument("--target-network-frequency", type=int, default=500)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--start-e", type=float, default=1.0)
    parser.add_argument("--end-e", type=float, default=0.05)
    parser.add_argument("--exploration-fraction", type=float, default=0.5)
    parser.add_argument("--learning-starts", type=int, default=10_000)
    parser.add_argument("--train-frequency", type=int, default=10)
    args = parser.parse_args()
    log = common.setup(args, args.target)

    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    torch.backends.cudnn.deterministic = True

    envs = vector_env(lambda: common.make_env(args.env), args.seed)
    obs_shape = envs.single_observation_space.shape
    n_actions = int(envs.single_action_space.n)
    q_network = QNetwork(int(np.prod(obs_shape)), n_actions)
    optimizer = torch.optim.Adam(q_network.parameters(), lr=args.learning_rate)
    target_network = QNetwork(int(np.prod(obs_shape)), n_actions)
    target_network.load_state_dict(q_network.state_dict())
    rb = ReplayBuffer(args.buffer_size, obs_shape, (1,), np.int64)

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
            if args.mode == "solve" and log.solved:
                reason = "solved"
                break
            epsilon = linear_schedule(
                args.start_e, args.end_e, args.exploration_fraction * args.total_steps, global_step
            )
            if random.random() < epsilon:
                actions = np.array([envs.single_action_space.sample()])
            else:
                with torch.no_grad():
                    q_values = q_network(torch.as_tensor(obs, dtype=torch.float32))
                actions = torch.argmax(q_values, dim=1).numpy()

            next_obs, rewards, terminations, truncations, infos = envs.step(actions)
            steps += 1

            real_next_obs = next_obs.copy()
            if truncations[0]:
                real_next_obs[0] = infos[final_obs_key(infos)][0]
            rb.add(obs[0], real_next_obs[0], actions[0], rewards[0], terminations[0])
            obs = next_obs

            if global_step > args.learning_starts:
                t_learn = time.time()
                if global_step % args.train_frequency == 0:
                    b_obs, b_actions, b_next_obs, b_dones, b_rewards = rb.sample(args.batch_size)
                    with torch.no_grad():
                        target_max, _ = target_network(b_next_obs).max(dim=1)
                        td_target = b_rewards.flatten() + args.gamma * target_max * (
                            1 - b_dones.flatten()
                        )
                    old_val = q_network(b_obs).gather(1, b_actions).squeeze()
                    loss = F.mse_loss(td_target, old_val)
                    optimizer.zero_grad()
                    loss.backward()
                    optimizer.step()

                if global_step % args.target_network_frequency == 0:
                    for target_param, param in zip(
                        target_network.parameters(), q_network.parameters(), strict=True
                    ):
                        target_param.data.copy_(
                            args.tau * param.data + (1.0 - args.tau) * target_param.data
                        )
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
