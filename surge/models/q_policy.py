"""The acting policy of the DQN family (models/acting.py): greedy on the published Q-values.

It returns argmax_a Q(s, a); exploration is the actors' (algos/exploration.py). With
prioritised replay it also returns every Q-value (`OUTPUTS`: `q`), from which the replay
computes each new transition's first priority (Ape-X). MLP Q-networks act in numpy, the
same maths as models/q_network.py's `QNetwork` (so an actor or policy worker never imports
torch); CNNs act through the torch network. With a recurrent core (R2D2) it takes the state
before the step and returns the state after it, last (models/recurrent_state.py).
"""

from __future__ import annotations

import math
from typing import Any

import gymnasium as gym
import numpy as np

from surge.config.schema import ExperimentConfig, ModelConfig
from surge.envs.spaces import EnvInfo, flatten_obs_space
from surge.models.images import choose_encoder
from surge.models.inputs import ACTION_MASK, GLOBAL_STATE
from surge.models.numpy_policy import core_params, encode_fields, flat_fields
from surge.models.numpy_recurrent import step as core_step
from surge.models.published_net import Observations, Outputs, Params, PublishedNet
from surge.models.recurrent_state import state_size


def q_inputs(obs_space: gym.Space[Any]) -> list[str]:
    """The observation fields a Q-network encodes: all but an action mask."""
    return sorted(k for k in flatten_obs_space(obs_space) if k != ACTION_MASK)


def q_params(obs_space: gym.Space[Any], n_actions: int, cfg: ModelConfig, dueling: bool) -> Params:
    """`QNetwork`'s parameters (state-dict names and shapes, in `parameters()` order) for
    flat observations, computed without torch; [] for a CNN encoder."""
    encoded = flat_fields(flatten_obs_space(obs_space), q_inputs(obs_space))
    if choose_encoder(obs_space, cfg) != "flat" or encoded is None:
        return []
    _, width = encoded
    params: Params = []
    if cfg.core != "none":
        params += core_params(cfg, width)
        width = cfg.core_size
    for i, h in enumerate(cfg.hidden_sizes):
        params += [(f"torso.{2 * i}.weight", (h, width)), (f"torso.{2 * i}.bias", (h,))]
        width = h
    heads = [("value", 1), ("advantage", n_actions)] if dueling else [("head", n_actions)]
    for name, out in heads:
        params += [(f"{name}.weight", (out, width)), (f"{name}.bias", (out,))]
    return params


def count_q_params(
    obs_space: gym.Space[Any], n_actions: int, cfg: ModelConfig, dueling: bool
) -> int:
    params = q_params(obs_space, n_actions, cfg, dueling)
    if params:
        return sum(math.prod(shape) for _, shape in params)
    from surge.models.q_network import QNetwork  # a CNN: built once to count

    net = QNetwork(obs_space, n_actions, cfg, dueling)
    return sum(p.numel() for p in net.parameters())


def q_policy(env: EnvInfo, cfg: ExperimentConfig, seed: int, device: str = "cpu") -> QPolicy:
    """The acting policy of `algo: dqn` (`RunContext.acting_policy`)."""
    return QPolicy(env.observation_space, env.action_space, cfg, seed, device)


def agent_q_policy(env: EnvInfo, cfg: ExperimentConfig, seed: int, device: str = "cpu") -> QPolicy:
    """The acting policy of `algo: qmix`: greedy on the agents' shared Q-network, which reads
    each row's own fields (`agent_view`: the global state is the mixer's, not the agents')."""
    return QPolicy(agent_view(env.observation_space), env.action_space, cfg, seed, device)


def agent_view(space: gym.Space[Any]) -> gym.Space[Any]:
    """A multi-agent row's observation space without its `global_state` field."""
    if isinstance(space, gym.spaces.Dict) and GLOBAL_STATE in space.spaces:
        return gym.spaces.Dict({k: v for k, v in space.spaces.items() if k != GLOBAL_STATE})
    return space


class QPolicy(PublishedNet):
    """Greedy on the loaded version's Q-values (see the module docstring)."""

    def __init__(
        self,
        obs_space: gym.Space[Any],
        action_space: gym.Space[Any],
        cfg: ExperimentConfig,
        seed: int,
        device: str = "cpu",
    ) -> None:
        assert isinstance(action_space, gym.spaces.Discrete), "DQN acts on Discrete actions"
        self.n = int(action_space.n)
        self.start = int(action_space.start)
        self.OUTPUTS: dict[str, tuple[str, tuple[int, ...]]] = (
            {"q": ("<f4", (self.n,))} if cfg.replay.prioritized else {}
        )
        self.dueling = dueling = cfg.dqn.dueling
        m = cfg.model
        super().__init__(
            obs_space, q_params(obs_space, self.n, m, dueling), q_inputs(obs_space),
            lambda: _q_network(obs_space, self.n, m, dueling), m.activation, device,
        )  # fmt: skip
        self.core_kind, self.core_size = m.core, m.core_size
        self.state_size = state_size(m)  # 0: feed-forward
        self.reload()

    def bind(self, views: list[np.ndarray]) -> None:
        if self.state_size:  # transposed once per version, for [B, F] @ [F, G*H]
            w_ih, w_hh, b_ih, b_hh = views[:4]
            self.core = (w_ih.T.copy(), b_ih, w_hh.T.copy(), b_hh)
            views = views[4:]
        pairs = self.linear_pairs(views)
        heads = 2 if self.dueling else 1
        self.torso, self.heads = pairs[:-heads], pairs[-heads:]

    def q_values(
        self, obs: Observations, core: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray | None]:
        """(Q-values [B, A] float32, the recurrent state after the step [B, S] or None)."""
        if self.net is not None:
            import torch

            with torch.inference_mode():
                x = self.torch_inputs(obs)
                if self.net.core is None:
                    return np.asarray(self.net(x).cpu().numpy()), None
                before = torch.from_numpy(core).to(self.device)
                state = self.net.core.step(self.net.encoder(x), before)
                q = self.net.heads(self.net.core.output(state))
            return np.asarray(q.cpu().numpy()), np.asarray(state.cpu().numpy())
        h = encode_fields(self.fields, obs)
        state = None
        if self.state_size:
            assert core is not None, "a recurrent policy acts from the state before the step"
            h, state = self._core_step(h, core)
        h = self.mlp(h, self.torso)
        if not self.dueling:
            w, b = self.heads[0]
            return h @ w + b, state
        (wv, bv), (wa, ba) = self.heads
        advantage = h @ wa + ba
        return (h @ wv + bv) + advantage - advantage.mean(axis=-1, keepdims=True), state

    def _core_step(self, x: np.ndarray, core: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(the core's output h [B, H], the state after the step [B, S])."""
        w_ih_t, b_ih, w_hh_t, b_hh = self.core
        xp = x @ w_ih_t + b_ih
        H = self.core_size
        state = np.empty((len(x), self.state_size), np.float32)
        gates, extra = np.empty_like(xp), np.empty((len(x), H), np.float32)
        core_step(
            self.core_kind, xp, np.asarray(core, np.float32), w_hh_t, b_hh, gates, extra, state
        )
        return state[:, :H], state

    def act(
        self, obs: Observations, deterministic: bool = False, core: np.ndarray | None = None
    ) -> Outputs:
        """(greedy action [B] int64, with prioritised replay the Q-values [B, A], and with
        a recurrent core the state after the step [B, S])."""
        q, state = self.q_values(obs, core)
        action = q.argmax(axis=-1).astype(np.int64)
        if self.start:
            action += self.start
        out: Outputs = (action, q) if self.OUTPUTS else (action,)
        return out if state is None else (*out, state)


def _q_network(obs_space: gym.Space[Any], n: int, cfg: ModelConfig, dueling: bool) -> Any:
    from surge.models.q_network import QNetwork

    return QNetwork(obs_space, n, cfg, dueling)
