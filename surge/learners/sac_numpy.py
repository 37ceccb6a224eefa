"""SAC's critic and policy steps with no autograd: the networks' passes, the heads, the
sampling and the losses in numpy with hand-written backward passes (models/numpy_net.py,
algos/numpy_sac.py), on the same parameters, gradient buffers, optimizers and random
numbers as the torch steps (learners/sac.py `SACUpdate`).

For MLP networks on flat observations on the CPU (`NumpySteps.fits`), where an update is
mostly per-operator overhead: on a 2-core Intel Xeon with AMX an update of
`halfcheetah-sac` went from 7.87 to 5.44 ms (benchmarks/sac_update_speed.py, bfloat16
products on one thread, with and without `--torch-steps`).
tests/unit/test_numpy_sac.py checks that an update here and in torch land on the same
parameters.
"""

from __future__ import annotations

import math
from typing import Protocol

import numpy as np
import torch
from torch import Tensor, nn

from surge.algos.adam import FusedAdam
from surge.algos.flat_params import FlatParameters
from surge.algos.numpy_sac import (
    minimum_backward,
    squashed_gaussian_backward,
    squashed_gaussian_forward,
)
from surge.models import gemm
from surge.models.layers import MLP
from surge.models.numpy_net import mlp_backward, mlp_forward
from surge.models.sac_network import SACActor, TwinQ
from surge.threads import run_each

Layers = list[tuple[np.ndarray, np.ndarray]]
ActorPass = tuple[list[np.ndarray], np.ndarray, np.ndarray]
"""The actor's forward pass: (the torso's hidden values, mean [B, A], raw log-std [B, A])."""


class Batch(Protocol):
    """learners/sac.py `SACBatch`."""

    @property
    def obs(self) -> dict[str, Tensor]: ...
    @property
    def action(self) -> Tensor: ...
    @property
    def next_obs(self) -> dict[str, Tensor]: ...
    @property
    def reward(self) -> Tensor: ...
    @property
    def discount(self) -> Tensor: ...


class Parts(Protocol):
    """What the steps use of learners/sac.py `SACUpdate`: its networks, buffers,
    optimizers and temperature."""

    device: torch.device
    actor: SACActor
    critic: TwinQ
    target: TwinQ
    actor_flat: FlatParameters
    actor_optimizer: FusedAdam
    critic_optimizer: FusedAdam
    alpha_optimizer: FusedAdam | None
    log_alpha: Tensor
    target_entropy: float
    scale: Tensor
    bias: Tensor

    @property
    def alpha(self) -> Tensor: ...


def _layers(modules: list[nn.Module]) -> tuple[Layers, Layers]:
    """The (weight, bias) numpy views of the Linear layers in `modules`, and of their
    gradients (views into the flat buffers: written in place, read by Adam)."""
    linears = [m for mod in modules for m in mod.modules() if isinstance(m, nn.Linear)]
    params = [(m.weight.detach().numpy(), m.bias.detach().numpy()) for m in linears]
    grads = []
    for m in linears:
        assert m.weight.grad is not None and m.bias.grad is not None  # FlatParameters' views
        grads.append((m.weight.grad.numpy(), m.bias.grad.numpy()))
    return params, grads


def _flat(obs: dict[str, Tensor], encoder: nn.Module) -> np.ndarray:
    with torch.no_grad():
        x: Tensor = encoder(obs)
    return x.numpy()


class NumpySteps:
    """The critic and policy steps of `SACUpdate` on its networks, in numpy."""

    @staticmethod
    def fits(sac: Parts) -> bool:
        """MLP networks with flat observations, float32, on the CPU."""
        torso = sac.actor.torso
        return (
            sac.device.type == "cpu"
            and sac.critic.shared_input
            and isinstance(torso, MLP)
            and len(torso) > 0
            and sac.actor_flat.data.dtype == torch.float32
        )

    def __init__(self, sac: Parts) -> None:
        self.sac = sac
        actor, critic, target = sac.actor, sac.critic, sac.target
        self.activation = actor.torso.activation
        self.actor_torso, self.actor_torso_grads = _layers([actor.torso])
        (self.mean_head, self.log_std_head), (self.mean_grads, self.log_std_grads) = _layers(
            [actor.mean, actor.log_std]
        )
        critics = [_layers([q.torso, q.head]) for q in (critic.q1, critic.q2)]
        self.critic_params = [params for params, _ in critics]
        self.critic_grads = [grads for _, grads in critics]
        self.critic_weights = [[w for w, _ in params] for params in self.critic_params]
        self.actor_torso_weights = [w for w, _ in self.actor_torso]
        self.targets = [_layers([q.torso, q.head])[0] for q in (target.q1, target.q2)]
        self.scale = sac.scale.numpy()
        self.bias = sac.bias.numpy()
        self.alpha_grad = (
            sac.alpha_optimizer.flat.grad.numpy() if sac.alpha_optimizer is not None else None
        )

    # --- the pieces ---------------------------------------------------------------------

    def _actor(self, x: np.ndarray) -> ActorPass:
        """(the torso's hidden values, mean [B, A], raw log-std [B, A])."""
        hidden = mlp_forward(x, self.actor_torso, self.activation, False, gemm.matmul)
        h = hidden[-1]
        (wm, bm), (wl, bl) = self.mean_head, self.log_std_head
        mean = gemm.matmul(h, wm.T)
        mean += bm
        raw = gemm.matmul(h, wl.T)
        raw += bl
        return hidden, mean, raw

    def _noise(self, like: np.ndarray) -> np.ndarray:
        """N(0, 1) from torch's generator, as the torch steps draw it (`torch.randn_like`)."""
        return torch.randn(like.shape, dtype=torch.float32).numpy()

    def _twin(self, nets: list[Layers], x: np.ndarray) -> list[list[np.ndarray]]:
        threads = self.sac.critic.threads
        return run_each(
            lambda net: mlp_forward(x, net, self.activation, True, gemm.matmul), nets, threads
        )

    # --- the steps ----------------------------------------------------------------------

    def critic_step(self, batch: Batch) -> dict[str, float]:
        sac = self.sac
        alpha = float(sac.alpha)
        x_next = _flat(batch.next_obs, sac.actor.encoder)
        _, mean, raw = self._actor(x_next)
        action, logp, _ = squashed_gaussian_forward(
            mean, raw, self.scale, self.bias, self._noise(mean)
        )
        q1n, q2n = (h[-1][:, 0] for h in self._twin(self.targets, np.hstack((x_next, action))))
        reward, discount = batch.reward.numpy(), batch.discount.numpy()
        target = reward + discount * (np.minimum(q1n, q2n) - alpha * logp)

        x = np.hstack((_flat(batch.obs, sac.critic.q1.encoder), batch.action.numpy()))
        hiddens = self._twin(self.critic_params, x)
        q = [h[-1][:, 0] for h in hiddens]
        rows = x.shape[0]
        errors = [qi - target for qi in q]
        loss = sum(float(np.dot(e, e)) for e in errors) / rows
        sac.critic_optimizer.zero_grad()

        def backward(i: int) -> None:
            g = (2.0 / rows) * errors[i][:, None]
            mlp_backward(
                g,
                hiddens[i],
                self.critic_weights[i],
                self.activation,
                True,
                grads=self.critic_grads[i],
                matmul=gemm.matmul,
            )

        run_each(backward, [0, 1], sac.critic.threads)
        sac.critic_optimizer.step()
        q_mean = 0.5 * (float(q[0].mean()) + float(q[1].mean()))
        return {"qf_loss": loss, "q_mean": q_mean}

    def policy_steps(self, obs: dict[str, Tensor], steps: int) -> dict[str, float]:
        """`steps` steps of the actor (and temperature) on one batch; the last one's stats.

        The temperature's sample after a step reads the updated actor on the same
        observations as the next step's sample, so the actor's forward pass serves both
        (the noise is drawn for each, in the torch steps' order)."""
        x = _flat(obs, self.sac.actor.encoder)
        forward = self._actor(x)
        stats: dict[str, float] = {}
        tuned = self.sac.alpha_optimizer is not None
        for step in range(steps):
            stats = self._actor_step(x, forward)
            if tuned or step + 1 < steps:
                forward = self._actor(x)  # the updated actor
            if tuned:
                stats.update(self._temperature_step(forward))
        return stats

    def _actor_step(self, x: np.ndarray, forward: ActorPass) -> dict[str, float]:
        """One step of the actor from its forward pass on `x`."""
        sac = self.sac
        alpha = float(sac.alpha)
        rows = x.shape[0]
        hidden, mean, raw = forward
        action, logp, sample = squashed_gaussian_forward(
            mean, raw, self.scale, self.bias, self._noise(mean)
        )
        # the critics held constant: gradients reach the action only
        hiddens = self._twin(self.critic_params, np.hstack((x, action)))
        q1, q2 = (h[-1][:, 0] for h in hiddens)
        loss = float(np.mean(alpha * logp - np.minimum(q1, q2)))
        g_q = minimum_backward(q1, q2, np.full(rows, -1.0 / rows, np.float32))

        def input_grad(i: int) -> np.ndarray:
            _, x_grad = mlp_backward(
                g_q[i][:, None],
                hiddens[i],
                self.critic_weights[i],
                self.activation,
                True,
                input_grad=True,
                weight_grads=False,
                matmul=gemm.matmul,
            )
            assert x_grad is not None
            return x_grad

        x_grads = run_each(input_grad, [0, 1], sac.critic.threads)
        g_action = (x_grads[0] + x_grads[1])[:, x.shape[1] :]
        g_logp = np.full(rows, alpha / rows, np.float32)
        g_mean, g_raw = squashed_gaussian_backward(sample, self.scale, g_action, g_logp)

        sac.actor_optimizer.zero_grad()
        h = hidden[-1]
        (wm, _), (wl, _) = self.mean_head, self.log_std_head
        for g, (dw, db) in ((g_mean, self.mean_grads), (g_raw, self.log_std_grads)):
            gemm.matmul(g.T, h, out=dw)
            np.add.reduce(g, axis=0, out=db)
        g_h = gemm.matmul(g_mean, wm)
        g_h += gemm.matmul(g_raw, wl)
        mlp_backward(
            g_h,
            hidden,
            self.actor_torso_weights,
            self.activation,
            False,
            grads=self.actor_torso_grads,
            matmul=gemm.matmul,
        )
        sac.actor_optimizer.step()
        return {"actor_loss": loss, "entropy": -float(logp.mean())}

    def _temperature_step(self, forward: ActorPass) -> dict[str, float]:
        """One step of the temperature on a fresh sample of the actor's forward pass (the
        updated actor's log-probabilities, as CleanRL takes them)."""
        sac = self.sac
        assert sac.alpha_optimizer is not None and self.alpha_grad is not None
        _, mean, raw = forward
        _, logp, _ = squashed_gaussian_forward(mean, raw, self.scale, self.bias, self._noise(mean))
        shifted = float(np.mean(logp + sac.target_entropy))
        alpha = math.exp(float(sac.log_alpha.detach()))
        sac.alpha_optimizer.zero_grad()
        self.alpha_grad[0] = -alpha * shifted  # d/dlog_alpha of mean(-alpha * (logp + H))
        sac.alpha_optimizer.step()
        return {"alpha_loss": -alpha * shifted}
