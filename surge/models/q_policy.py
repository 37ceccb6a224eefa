"""The acting policy of the DQN family (models/acting.py): greedy on the published Q-values.

It returns argmax_a Q(s, a); exploration is the actors' (algos/exploration.py). With
prioritised replay it also returns every Q-value (`OUTPUTS`: `q`), from which the replay
computes each new transition's first priority (Ape-X). MLP Q-networks act in numpy, the
same maths as models/q_network.py's `QNetwork` (so an actor or policy worker never imports
torch); CNNs act through the torch network.
"""

from __future__ import annotations

import math
from typing import Any

import gymnasium as gym
import numpy as np

from surge.config.schema import ExperimentConfig, ModelConfig
from surge.envs.spaces import EnvInfo, flatten_obs_space
from surge.models.images import choose_encoder
from surge.models.inputs import ACTION_MASK
from surge.models.numpy_policy import encode_fields, flat_fields

Params = list[tuple[str, tuple[int, ...]]]


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


def q_policy(env: EnvInfo, cfg: ExperimentConfig, seed: int) -> QPolicy:
    """The acting policy of `algo: dqn` (`RunContext.acting_policy`)."""
    return QPolicy(env.observation_space, env.action_space, cfg, seed)


class QPolicy:
    """Greedy on the loaded version's Q-values (see the module docstring)."""

    state_size = 0  # feed-forward

    def __init__(
        self,
        obs_space: gym.Space[Any],
        action_space: gym.Space[Any],
        cfg: ExperimentConfig,
        seed: int,
    ) -> None:
        assert isinstance(action_space, gym.spaces.Discrete), "DQN acts on Discrete actions"
        self.n = int(action_space.n)
        self.start = int(action_space.start)
        self.OUTPUTS: dict[str, tuple[str, tuple[int, ...]]] = (
            {"q": ("<f4", (self.n,))} if cfg.replay.prioritized else {}
        )
        dueling = cfg.dqn.dueling
        self.params = q_params(obs_space, self.n, cfg.model, dueling)
        self.net: Any = None  # the torch network of a CNN
        if self.params:
            encoded = flat_fields(flatten_obs_space(obs_space), q_inputs(obs_space))
            assert encoded is not None
            self.fields = encoded[0]
            size = sum(math.prod(shape) for _, shape in self.params)
        else:  # a CNN: the torch network acts
            from surge.models.q_network import QNetwork

            self.net = QNetwork(obs_space, self.n, cfg.model, dueling).eval()
            size = sum(p.numel() for p in self.net.parameters())
        self.relu = cfg.model.activation == "relu"
        self.dueling = dueling
        self.flat = np.zeros(size, np.float32)
        self.reload()

    def reload(self) -> None:
        """Use the parameters now in `flat`."""
        if self.net is not None:
            from surge.models.weights import flat_to_model

            flat_to_model(self.flat, self.net)
            return
        views, offset = [], 0
        for _, shape in self.params:
            n = math.prod(shape)
            views.append(self.flat[offset : offset + n].reshape(shape))
            offset += n
        pairs = [(views[i].T, views[i + 1]) for i in range(0, len(views), 2)]
        heads = 2 if self.dueling else 1
        self.torso, self.heads = pairs[:-heads], pairs[-heads:]

    def load(self, flat: np.ndarray) -> None:
        np.copyto(self.flat, flat)
        self.reload()

    def q_values(self, obs: dict[str, np.ndarray]) -> np.ndarray:
        """Q-values [B, A] float32."""
        if self.net is not None:
            import torch

            with torch.inference_mode():
                q = self.net({k: torch.from_numpy(v) for k, v in obs.items()})
            return np.asarray(q.numpy())
        h = encode_fields(self.fields, obs)
        for w, b in self.torso:
            h = h @ w + b
            h = np.maximum(h, 0.0) if self.relu else np.tanh(h)
        if not self.dueling:
            w, b = self.heads[0]
            return h @ w + b
        (wv, bv), (wa, ba) = self.heads
        advantage = h @ wa + ba
        return (h @ wv + bv) + advantage - advantage.mean(axis=-1, keepdims=True)

    def act(
        self,
        obs: dict[str, np.ndarray],
        deterministic: bool = False,
        core: np.ndarray | None = None,
    ) -> tuple[np.ndarray, ...]:
        """(greedy action [B] int64, and with prioritised replay the Q-values [B, A])."""
        q = self.q_values(obs)
        action = q.argmax(axis=-1).astype(np.int64)
        if self.start:
            action += self.start
        return (action, q) if self.OUTPUTS else (action,)

    def initial_state(self, rows: int) -> np.ndarray | None:
        return None
