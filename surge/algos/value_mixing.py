"""The learning part of `algo: qmix`: value decomposition for cooperative multi-agent envs on
batches of whole episodes. QMIX (Rashid et al. 2018), VDN (Sunehag et al. 2018) and
independent Q-learning (Tan 1993), after EPyMARL's learner (Papoudakis et al. 2021;
uoe-agents/epymarl src/learners/q_learner.py).

One Q-network (models/q_network.py) is shared by the agents, who are folded into its batch
dimension and told apart by an agent-id field of their observations. Each agent's Q-value of
the action it took is mixed into the team's Q_tot by the mixer (models/mixers.py) on the
global state; with no mixer each agent's own Q-value stands alone. The TD target of step t is

    y_t = r_t + gamma (1 - terminated_t) mix_target(Q_target(o_{t+1}, a*), s_{t+1})

with a* each agent's argmax of the online network over its available actions (double Q), or
of the target network; r_t is the team reward (broadcast to every agent without a mixer),
standardised by its running moments if asked. The loss is the mean squared TD error over the
steps that exist (`filled`) and do not follow a termination. The pure functions below are
that maths; `ValueMixing` holds the networks, the optimiser and the statistics around them.
"""

from __future__ import annotations

import copy
import math
from dataclasses import asdict, dataclass
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from torch import Tensor, nn

from surge.algos.adam import FusedAdam
from surge.algos.flat_params import FlatParameters
from surge.config.qmix_schema import QMIXConfig
from surge.config.schema import ModelConfig
from surge.models.mixers import make_mixer
from surge.models.normalize import EPS, INITIAL_COUNT, update_moments
from surge.models.q_network import QNetwork
from surge.models.weights import model_to_flat


@dataclass
class EpisodeBatch:
    """B episodes padded to T steps (A agents, N actions, S state floats)."""

    obs: dict[str, Tensor]
    """The agents' observation fields [B, T+1, A, *field]: each step's, then the one after
    the last step (what a time-limit end bootstraps from)."""
    state: Tensor
    """The global state [B, T+1, S], float."""
    actions: Tensor
    """[B, T, A] int64, 0-based."""
    reward: Tensor
    """The team reward [B, T], float."""
    terminated: Tensor
    """[B, T] bool: a true terminal at step t (no bootstrap). A time-limit end is not one."""
    filled: Tensor
    """[B, T] bool: step t exists (the rest is padding)."""
    avail: Tensor | None = None
    """[B, T+1, A, N] bool: the available actions; None: all of them, always."""


# ---------------------------------------------------------------- pure functions


def agent_q_values(net: QNetwork, obs: dict[str, Tensor]) -> Tensor:
    """Every agent's Q-values at every step, [B, T+1, A, N], from `obs` fields [B, T+1, A,
    ...]. A recurrent network unrolls each (episode, agent) from a zero state at step 0."""
    first = next(iter(obs.values()))
    B, steps, A = first.shape[:3]
    if net.core is None:  # feed-forward: every step of every agent in one batch
        flat = {k: v.reshape(B * steps * A, *v.shape[3:]) for k, v in obs.items()}
        return net(flat).reshape(B, steps, A, -1)
    time_major = {k: v.transpose(0, 1).reshape(steps, B * A, *v.shape[3:]) for k, v in obs.items()}
    start = torch.zeros(B * A, net.core.state_size, device=first.device)
    no_resets = torch.zeros(steps, B * A, dtype=torch.bool, device=first.device)
    q = net.unroll(time_major, start, no_resets)  # [T+1, B*A, N]
    return q.reshape(steps, B, A, -1).transpose(0, 1)


def train_mask(filled: Tensor, terminated: Tensor) -> Tensor:
    """[B, T] bool: the steps that train, those that exist and follow no termination (an
    episode's padding may hold garbage past its end). The flags: bool or 0/1 numbers."""
    ended = terminated.long()
    ended_before = (ended.cumsum(dim=1) - ended) > 0
    return filled.bool() & ~ended_before


def chosen_action_q(q: Tensor, actions: Tensor) -> Tensor:
    """Q-values [B, T, A] of the actions taken, `actions` [B, T, A] int64, from `q`
    [B, T, A, N]."""
    return q.gather(-1, actions.unsqueeze(-1)).squeeze(-1)


def next_agent_values(
    q_online_next: Tensor, q_target_next: Tensor, avail_next: Tensor | None, double_q: bool
) -> Tensor:
    """Each agent's bootstrap value [B, T, A] at the next step from the online and target
    networks' Q-values there, [B, T, A, N]: the target's value of the online argmax
    (`double_q`, van Hasselt et al. 2016) or the target's max, over the available actions
    `avail_next` [B, T, A, N] bool (None: all)."""
    if avail_next is not None:
        # a row with no available action (after an episode's end) counts them all, so that
        # its bootstrap stays finite; the mask or (1 - terminated) zeroes it
        avail_next = avail_next.bool()
        avail_next = avail_next | ~avail_next.any(dim=-1, keepdim=True)
        q_online_next = q_online_next.masked_fill(~avail_next, -torch.inf)
        q_target_next = q_target_next.masked_fill(~avail_next, -torch.inf)
    if double_q:
        best = q_online_next.argmax(dim=-1, keepdim=True)
        return q_target_next.gather(-1, best).squeeze(-1)
    return q_target_next.max(dim=-1).values


def td_targets(reward: Tensor, terminated: Tensor, next_q: Tensor, gamma: float) -> Tensor:
    """1-step targets r + gamma (1 - terminated) next_q: `reward`, `terminated` [B, T];
    `next_q` [B, T] (mixed) or [B, T, A] (no mixer: the team reward goes to every agent);
    `terminated` bool or 0/1 numbers."""
    if next_q.dim() == reward.dim() + 1:
        reward, terminated = reward.unsqueeze(-1), terminated.unsqueeze(-1)
    return reward + gamma * (1.0 - terminated.to(next_q.dtype)) * next_q


def masked_td_loss(chosen: Tensor, targets: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
    """(sum of the masked squared TD errors / their count, the mean |TD error| over them):
    `chosen` Q-values with gradient and `targets`, [B, T] or [B, T, A]; `mask` [B, T] bool,
    broadcast over the agents (each agent's error then counts once, as EPyMARL's)."""
    td = chosen - targets.detach()
    weight = _mask_like(mask, td)
    count = weight.sum().clamp(min=1.0)
    loss = (td.square() * weight).sum() / count
    return loss, (td.detach().abs() * weight).sum() / count


def masked_mean(x: Tensor, mask: Tensor) -> float:
    """The mean of `x` [B, T] or [B, T, A] over the steps of `mask` [B, T] bool."""
    weight = _mask_like(mask, x)
    return float((x.detach() * weight).sum() / weight.sum().clamp(min=1.0))


def _mask_like(mask: Tensor, x: Tensor) -> Tensor:
    """`mask` [B, T] as 0/1 weights of `x`'s shape, [B, T] or [B, T, A]."""
    weight = mask.to(x.dtype)
    return weight.unsqueeze(-1).expand_as(x) if x.dim() == mask.dim() + 1 else weight


def unit_scaling(low: np.ndarray, high: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(offset, scale), float32, such that (x - offset) * scale maps [low, high] onto [0, 1]
    element by element where both bounds are finite and apart, and leaves x as it is
    elsewhere (offset 0, scale 1).

    Why the mixer's state is scaled: QMIX's hypernetworks compute the mixing weights from the
    state, and Q_tot is a product of two of them, so a state of scale k starts Q_tot near k^2
    whatever the rewards (LBF's raw positions, up to 7: Q_tot about 45 on all-zero rewards),
    and hard target copies every 200 updates take thousands of updates to bring it down."""
    low = np.asarray(low, np.float64).reshape(-1)
    high = np.asarray(high, np.float64).reshape(-1)
    bounded = np.isfinite(low) & np.isfinite(high) & (high > low)
    offset = np.where(bounded, low, 0.0)
    scale = np.where(bounded, 1.0 / np.where(bounded, high - low, 1.0), 1.0)
    return offset.astype(np.float32), scale.astype(np.float32)


@dataclass
class RewardStandardiser:
    """Running mean and variance of the team rewards of the steps trained on, as EPyMARL's
    RunningMeanStd (prior mean 0, variance 1, pseudo-count 1e-4); `standardise` divides by
    sqrt(var + EPS). Its fields are its checkpoint."""

    mean: float = 0.0
    var: float = 1.0
    count: float = INITIAL_COUNT

    def update(self, rewards: np.ndarray) -> None:
        """Take in `rewards` [n] (real steps only: padding would pull the mean to 0)."""
        moments = np.asarray(self.mean), np.asarray(self.var)
        mean, var, self.count = update_moments(*moments, self.count, rewards)
        self.mean, self.var = float(mean), float(var)

    def standardise(self, reward: Tensor) -> Tensor:
        return (reward - self.mean) / math.sqrt(self.var + EPS)


# ---------------------------------------------------------------- the learner's maths


class ValueMixing:
    """The agents' Q-network and the mixer (`online`), their copies (`target`) and Adam over
    both; `update` takes one gradient step on an `EpisodeBatch`. The parameters and their
    gradients live in flat buffers (algos/flat_params.py): zeroing, clipping, Adam
    (algos/adam.py; torch.optim would import torch._dynamo, seconds of start-up) and the
    target copy are one kernel each, where a small network's update is per-tensor overhead."""

    def __init__(
        self,
        obs_space: gym.Space[Any],
        n_actions: int,
        n_agents: int,
        state_dim: int,
        model_cfg: ModelConfig,
        qmix_cfg: QMIXConfig,
        seed: int,
        device: str | torch.device = "cpu",
    ) -> None:
        self.cfg = cfg = qmix_cfg
        with torch.random.fork_rng(devices=[]):  # the same networks whatever the global seed
            torch.manual_seed(seed)
            agent = QNetwork(obs_space, n_actions, model_cfg, dueling=False)
            mixer = make_mixer(
                cfg.mixer, n_agents, state_dim, cfg.mixing_embed_dim, cfg.hypernet_embed,
                cfg.hypernet_layers,
            )  # fmt: skip
        self.agent: QNetwork = agent.to(device)  # what the actors act with (`agent_flat`)
        self.mixer: nn.Module | None = mixer.to(device) if mixer is not None else None
        self.target_agent, self.target_mixer = copy.deepcopy((self.agent, self.mixer))
        # containers for the flat buffers: the agent's parameters first, then the mixer's
        self.online = _modules(self.agent, self.mixer)
        self.target = _modules(self.target_agent, self.target_mixer)
        self.flat = FlatParameters(self.online)
        self.target_flat = FlatParameters(self.target)
        self.target.requires_grad_(False)
        self.optimizer = FusedAdam(self.flat, lr=cfg.lr)
        self.rewards = RewardStandardiser()
        self.updates = 0

    def update(self, batch: EpisodeBatch) -> dict[str, float]:
        """One gradient step; the targets are copied every `target_update_interval` steps.
        Returns loss, td_error_abs, q_taken_mean (of the Q-values trained: Q_tot with a
        mixer), target_mean and grad_norm (before clipping)."""
        cfg = self.cfg
        mask = train_mask(batch.filled, batch.terminated)
        reward = batch.reward.float()
        if cfg.standardise_rewards:
            self.rewards.update(reward[mask].cpu().numpy())
            reward = self.rewards.standardise(reward)
        q = agent_q_values(self.agent, batch.obs)  # [B, T+1, A, N]
        chosen = _mix(self.mixer, chosen_action_q(q[:, :-1], batch.actions), batch.state[:, :-1])
        with torch.no_grad():
            q_target_next = agent_q_values(self.target_agent, batch.obs)[:, 1:]
            avail_next = batch.avail[:, 1:] if batch.avail is not None else None
            next_values = next_agent_values(
                q[:, 1:].detach(), q_target_next, avail_next, cfg.double_q
            )
            next_q = _mix(self.target_mixer, next_values, batch.state[:, 1:])
            targets = td_targets(reward, batch.terminated, next_q, cfg.gamma)
        loss, td_abs = masked_td_loss(chosen, targets, mask)
        self.optimizer.zero_grad()
        loss.backward()
        grad_norm = self.flat.clip_grad_norm_(cfg.grad_norm_clip)
        self.optimizer.step()
        self.updates += 1
        if self.updates % cfg.target_update_interval == 0:
            self.sync_targets()
        return {
            "loss": loss.item(),
            "td_error_abs": td_abs.item(),
            "q_taken_mean": masked_mean(chosen, mask),
            "target_mean": masked_mean(targets, mask),
            "grad_norm": float(grad_norm),
        }

    def sync_targets(self) -> None:
        """Hard copy of the online agent network and mixer into their targets."""
        with torch.no_grad():
            self.target_flat.data.copy_(self.flat.data)

    def agent_flat(self) -> np.ndarray:
        """The online agent network's parameters as the float32 vector `QPolicy` loads."""
        return model_to_flat(self.agent)

    def state_dict(self) -> dict[str, Any]:
        """Everything `update` depends on, as numpy arrays, numbers, lists and string-keyed
        dicts (what a surge checkpoint holds)."""
        return {
            "online": _arrays(self.online.state_dict()),
            "target": _arrays(self.target.state_dict()),
            "optimizer": _arrays(self.optimizer.state_dict()),
            "rewards": asdict(self.rewards),
            "updates": self.updates,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what `state_dict` returned (its arrays may come back as tensors). The
        modules copy into the flat buffers in place (`load_state_dict`), never replace them."""
        self.online.load_state_dict(_tensors(state["online"]))
        self.target.load_state_dict(_tensors(state["target"]))
        self.optimizer.load_state_dict(_tensors(state["optimizer"]))
        self.rewards = RewardStandardiser(**{k: float(v) for k, v in state["rewards"].items()})
        self.updates = int(state["updates"])


def _mix(mixer: nn.Module | None, agent_qs: Tensor, states: Tensor) -> Tensor:
    """Q_tot [B, T] by `mixer`, or the agents' own [B, T, A] without one."""
    return agent_qs if mixer is None else mixer(agent_qs, states)


def _modules(agent: QNetwork, mixer: nn.Module | None) -> nn.ModuleDict:
    return nn.ModuleDict({"agent": agent} if mixer is None else {"agent": agent, "mixer": mixer})


def _arrays(obj: Any) -> Any:
    """`obj` with every tensor a numpy array (copied off the device), recursively."""
    if isinstance(obj, Tensor):
        return obj.detach().cpu().numpy().copy()
    if isinstance(obj, dict):
        return {k: _arrays(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_arrays(v) for v in obj)
    return obj


def _tensors(obj: Any) -> Any:
    """`obj` with every numpy array (or tensor) a tensor, recursively."""
    if isinstance(obj, (np.ndarray, Tensor)):
        return torch.as_tensor(np.array(obj))
    if isinstance(obj, dict):
        return {k: _tensors(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_tensors(v) for v in obj)
    return obj
