"""R2D2's learner (Kapturowski et al. 2019): DQN with a recurrent Q-network on sequences
from the sequence replay (algos/sequence_replay.py), inside the trainer chassis.

Each sequence is unrolled from the state its actor stored at its start (`core0`, computed by
an older version), the first `dqn.burn_in` steps without loss, only to rebuild a state
closer to the current network's; the online and target networks unroll alike. Step t's
target bootstraps from Q at step t + m of the same unroll (m its n-step horizon, algos/nstep.py
over the sequence), double-DQN style, through R2D2's value rescaling h:

    y_t = h(R_t + discount_t * h^-1(Q_target(s_{t+m}, argmax_a Q(s_{t+m}, a))))

The TD loss is averaged over the steps that train (`mask`: past the burn-in, with their
whole n-step window inside the sequence and no truncated end) and weighted per sequence by
its importance weight; the sequence's new priority is eta * max |delta| + (1 - eta) *
mean |delta| over those steps (algos/dqn.py `sequence_priority`).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from surge.algos.dqn import rescale, sequence_priority, unrescale
from surge.learners.dqn import DQNLearner
from surge.learners.q_backends import TorchQ
from surge.workers.base import Binding, RunContext
from surge.workers.trainer import TrainerWorker, Update


def build(ctx: RunContext, b: Binding) -> TrainerWorker:
    return TrainerWorker(ctx, b, R2D2Learner(ctx, b))


def sequence_targets(
    q_next_online: torch.Tensor,
    q_next_target: torch.Tensor,
    returns: torch.Tensor,
    discount: torch.Tensor,
    horizon: torch.Tensor,
    double: bool,
    value_rescale: bool,
) -> torch.Tensor:
    """The n-step targets [T, B] of every step of an unroll: step t bootstraps from step
    t + horizon[t] of the same unroll (clamped to its last step; steps whose window runs past
    it are masked by the caller). `q_next_online`, `q_next_target` [T, B, A] (the online
    network's choice of action with `double`), `returns`, `discount` [T, B] float,
    `horizon` [T, B] int. With `value_rescale` the network's values live in h-space."""
    T = returns.shape[0]
    at = (torch.arange(T, device=horizon.device).unsqueeze(1) + horizon).clamp(max=T - 1)
    index = at.unsqueeze(-1).expand(-1, -1, q_next_target.shape[-1])
    target_q = q_next_target.gather(0, index)  # [T, B, A]: Q at each step's bootstrap
    if double:
        best = q_next_online.gather(0, index).argmax(dim=-1, keepdim=True)
        bootstrap = target_q.gather(-1, best).squeeze(-1)
    else:
        bootstrap = target_q.max(dim=-1).values
    if value_rescale:
        return rescale(returns + discount * unrescale(bootstrap))
    return returns + discount * bootstrap


class R2D2Learner(DQNLearner):
    """`DQNLearner` (networks, optimiser, metrics, checkpoints, evaluation) with the update
    on sequences, on the torch backend (a recurrent core)."""

    def __init__(self, ctx: RunContext, b: Binding) -> None:
        super().__init__(ctx, b)
        assert isinstance(self.backend, TorchQ), "a recurrent Q-network trains in torch"
        self.torch = self.backend

    def update(self, version: int) -> Update:
        d, net = self.cfg.dqn, self.torch
        row, f = self.batches.take(version)
        burn = d.burn_in

        put = net.staging  # each array on the learner's device once
        put.begin()

        def steps(name: str) -> torch.Tensor:  # [B, T, ...] -> time-major [T, B, ...]
            return put(f[name]).transpose(0, 1)

        obs = {k[4:]: steps(k) for k in f if k.startswith("obs/")}
        resets, core0 = steps("resets"), put(f["core0"])
        action = steps("action")[burn:].long() - self.start_action
        returns, discount = steps("reward")[burn:], steps("discount")[burn:]
        horizon, mask = steps("horizon")[burn:], steps("mask")[burn:]
        q = net.q.unroll(obs, core0, resets, burn)  # [T - burn, B, A]
        with torch.no_grad():
            q_target = net.target.unroll(obs, core0, resets, burn)
            target = sequence_targets(
                q.detach(), q_target, returns, discount, horizon, d.double, d.value_rescale
            )
        q_taken = q.gather(-1, action.unsqueeze(-1)).squeeze(-1)
        if d.loss == "huber":
            per_step = F.smooth_l1_loss(q_taken, target, reduction="none", beta=1.0)
        else:
            per_step = F.mse_loss(q_taken, target, reduction="none")
        weight = mask.to(per_step.dtype)
        if self.cfg.replay.prioritized:
            weight = weight * put(f["weight"]).unsqueeze(0)
        loss = (per_step * weight).sum() / mask.sum().clamp(min=1)
        net.optimizer.zero_grad()
        loss.backward()
        if d.max_grad_norm is not None:
            net.flat.clip_grad_norm_(d.max_grad_norm)
        net.optimizer.step()
        td = (target - q_taken).detach()
        f["priority"][:] = sequence_priority(td, mask, d.priority_eta).cpu().numpy()
        counted = mask.sum().clamp(min=1)
        self._after_update(
            {
                "loss": loss.item(),
                "q_mean": float((q_taken.detach() * mask).sum() / counted),
                "td_abs": float((td.abs() * mask).sum() / counted),
                "trained_share": float(mask.float().mean()),
            }
        )
        update = self.batches.give_back(version, row)
        self.env_steps += update.env_steps
        return update
