"""Mixing networks of value decomposition (torch): how the agents' chosen Q-values become the
team's Q_tot, which is what trains on the team reward (algos/value_mixing.py).

- `VDNMixer`: Q_tot = sum_a Q_a (value decomposition networks, Sunehag et al. 2018).
- `QMixer`: Q_tot is a monotonic function of the Q_a whose weights hypernetworks compute from
  the global state (QMIX, Rashid et al. 2018, section 4). The weights pass through abs(), so
  dQ_tot / dQ_a >= 0: each agent's greedy action on its own Q_a is then the team's greedy joint
  action (the paper's IGM condition, eq. 4), which is what lets decentralised agents act
  greedily on what a centralised Q_tot learned. Layout and initialisation are EPyMARL's
  (uoe-agents/epymarl src/modules/mixers/qmix.py): ELU hidden layer, a state-dependent bias
  b1, and a final bias V(s) from a two-layer network (the biases may be negative: they do
  not affect monotonicity).

Shapes: `agent_qs` [B, T, A] (A agents), `states` [B, T, S] -> Q_tot [B, T].
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn


class VDNMixer(nn.Module):
    """Q_tot = sum of the agents' Q-values (Sunehag et al. 2018); ignores the state."""

    def forward(self, agent_qs: Tensor, states: Tensor) -> Tensor:
        """`agent_qs` [B, T, A], `states` [B, T, S] (unused) -> Q_tot [B, T]."""
        return agent_qs.sum(dim=-1)


def _hypernet(state_dim: int, out_dim: int, hypernet_embed: int, layers: int) -> nn.Module:
    """A hypernetwork from the state to `out_dim` weights: linear (`layers` 1) or with one
    ReLU layer of `hypernet_embed` (`layers` 2), as EPyMARL's `hypernet_layers`."""
    if layers == 1:
        return nn.Linear(state_dim, out_dim)
    if layers == 2:
        return nn.Sequential(
            nn.Linear(state_dim, hypernet_embed), nn.ReLU(), nn.Linear(hypernet_embed, out_dim)
        )
    raise ValueError(f"hypernet_layers must be 1 or 2, not {layers}")


class QMixer(nn.Module):
    """QMIX's monotonic mixing network (Rashid et al. 2018; see the module docstring):

        hidden = elu(Q [1, A] @ |W1(s)| [A, E] + b1(s) [1, E])
        Q_tot  = hidden @ |w_final(s)| [E, 1] + V(s)

    with W1, w_final hypernetworks of the state (`hypernet_layers`), b1 = Linear(S, E) and
    V = Linear(S, E)-ReLU-Linear(E, 1); E is `embed_dim`."""

    def __init__(
        self,
        n_agents: int,
        state_dim: int,
        embed_dim: int,
        hypernet_embed: int,
        hypernet_layers: int,
    ) -> None:
        super().__init__()
        self.n_agents, self.state_dim, self.embed_dim = n_agents, state_dim, embed_dim
        self.hyper_w_1 = _hypernet(state_dim, embed_dim * n_agents, hypernet_embed, hypernet_layers)
        self.hyper_w_final = _hypernet(state_dim, embed_dim, hypernet_embed, hypernet_layers)
        self.hyper_b_1 = nn.Linear(state_dim, embed_dim)
        self.V = nn.Sequential(nn.Linear(state_dim, embed_dim), nn.ReLU(), nn.Linear(embed_dim, 1))

    def forward(self, agent_qs: Tensor, states: Tensor) -> Tensor:
        """`agent_qs` [B, T, A], `states` [B, T, S] -> Q_tot [B, T]."""
        B, T, A = agent_qs.shape
        s = states.reshape(B * T, self.state_dim)
        qs = agent_qs.reshape(B * T, 1, A)
        # abs() keeps every weight non-negative: the monotonicity that QMIX rests on
        w1 = torch.abs(self.hyper_w_1(s)).view(B * T, A, self.embed_dim)
        b1 = self.hyper_b_1(s).view(B * T, 1, self.embed_dim)
        hidden = F.elu(torch.bmm(qs, w1) + b1)  # [B*T, 1, E]
        w_final = torch.abs(self.hyper_w_final(s)).view(B * T, self.embed_dim, 1)
        q_tot = torch.bmm(hidden, w_final).view(B * T) + self.V(s).view(B * T)
        return q_tot.view(B, T)


def make_mixer(
    kind: str,
    n_agents: int,
    state_dim: int,
    embed_dim: int,
    hypernet_embed: int,
    hypernet_layers: int,
) -> nn.Module | None:
    """The mixer `qmix.mixer` names: `qmix` (QMixer), `vdn` (VDNMixer), or None for `none`
    (independent Q-learning: each agent's own Q-value trains on the team reward)."""
    if kind == "qmix":
        return QMixer(n_agents, state_dim, embed_dim, hypernet_embed, hypernet_layers)
    if kind == "vdn":
        return VDNMixer()
    if kind == "none":
        return None
    raise ValueError(f"unknown mixer {kind!r}: qmix, vdn or none")
