"""The config section of value decomposition for cooperative multi-agent envs (`algo: qmix`):
QMIX, VDN and independent Q-learning on an episode replay (docs/multiagent.md).

Its defaults are EPyMARL's qmix and vdn configs (Papoudakis et al. 2021; uoe-agents/epymarl
src/config/algs/qmix.yaml and default.yaml): Adam at 5e-4, batches of 32 episodes from a
replay of 5000, the target networks copied every 200 updates, double Q-learning, rewards
standardised, gradients clipped at 10, epsilon from 1 to 0.05 over 50,000 env steps, a
mixing network of width 32 whose hypernetworks have a hidden layer of 64. The agents'
network is the model section's (the presets: a GRU of 64, then a ReLU layer of 64, as
EPyMARL's RNN agent).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from surge.config.rules import AT_LEAST_ONE, NON_NEGATIVE, POSITIVE, UNIT, between, ruled

Mixer = Literal["qmix", "vdn", "none"]


@dataclass
class QMIXConfig:
    """`algo: qmix`: one Q-network shared by the agents (with their ids), its chosen Q-values
    mixed into the team's by `mixer` and trained on the team reward (docs/multiagent.md).
    Defaults: EPyMARL's qmix config."""

    mixer: Mixer = "qmix"
    """`qmix`: a monotonic mixing network whose weights hypernetworks compute from the global
    state (Rashid et al. 2018); `vdn`: the sum of the agents' Q-values (Sunehag et al. 2018);
    `none`: each agent learns the team reward alone (independent Q-learning)."""

    lr: float = ruled(5e-4, POSITIVE)
    """Adam learning rate (agents' network and mixer)."""

    gamma: float = ruled(0.99, between(0, 1, "(]"))
    """Discount factor."""

    batch_episodes: int = ruled(32, AT_LEAST_ONE)
    """Episodes per update's batch."""

    buffer_episodes: int = ruled(5000, AT_LEAST_ONE)
    """Episodes the replay keeps (all shards together); the oldest go first."""

    target_update_interval: int = ruled(200, AT_LEAST_ONE)
    """Updates between two copies of the agents' network and the mixer into their targets."""

    double_q: bool = True
    """The online network picks each next action, the target network values it."""

    standardise_rewards: bool = True
    """Train on rewards standardised by their running mean and standard deviation."""

    grad_norm_clip: float = ruled(10.0, POSITIVE)
    """Global gradient-norm clip."""

    epsilon_start: float = ruled(1.0, UNIT)
    """epsilon-greedy exploration in the actors: epsilon at the start."""

    epsilon_finish: float = ruled(0.05, UNIT)
    """epsilon after `epsilon_anneal_steps` env steps."""

    epsilon_anneal_steps: int = ruled(50_000, AT_LEAST_ONE)
    """Env steps over which epsilon falls linearly."""

    mixing_embed_dim: int = ruled(32, AT_LEAST_ONE)
    """QMIX: width of the mixing network's hidden layer."""

    hypernet_embed: int = ruled(64, AT_LEAST_ONE)
    """QMIX: width of the hidden layer of the hypernetworks (`hypernet_layers: 2`)."""

    hypernet_layers: int = ruled(2, between(1, 2))
    """QMIX: layers of the hypernetworks that compute the mixing weights: 1 (linear in the
    state) or 2 (with a ReLU layer of `hypernet_embed`)."""

    episode_limit: int = ruled(0, NON_NEGATIVE)
    """The longest episode the replay holds, in steps (its episodes are padded to it). 0: the
    env's time limit (`env.max_episode_steps`, or the env's own)."""

    threads: int = ruled(1, AT_LEAST_ONE)
    """torch threads of the learner."""
