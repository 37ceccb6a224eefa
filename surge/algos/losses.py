"""PPO's loss terms: the reference definitions as pure torch functions, and `ppo_loss`, which
on CPU computes their sum as one autograd node (numpy forward, hand-written gradient).

`ppo_loss` is exactly `clipped_surrogate_loss - ent_coef * mean(entropy) + vf_coef *
value_loss` (below), after per-minibatch advantage normalisation (`normalize`) when asked.
Built from those functions, autograd records about 30 nodes per minibatch (exp, clamp, max,
pow, mean, ...); on [B] vectors of a few hundred elements each costs a torch dispatch of
several microseconds against about one for a numpy ufunc. Off the CPU the reference
functions run as they are. tests/unit/test_losses.py checks value, gradients and
statistics against them.

The gradient is written out in numpy_ppo.py (`ppo_loss_numpy`), which the numpy learner
uses directly.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

from surge.algos.numpy_ppo import ppo_loss_numpy

# --- the reference definitions --------------------------------------------------------------


def clipped_surrogate_loss(
    new_logp: Tensor, old_logp: Tensor, advantages: Tensor, clip_coef: float
) -> tuple[Tensor, Tensor, Tensor]:
    """The clipped policy loss: mean(max(-A * r, -A * clip(r, 1 - c, 1 + c))), r = p_new / p_old.

    Returns (loss, clipfrac, approx_kl). clipfrac is the fraction of samples with
    |r - 1| > c; approx_kl is mean((r - 1) - log r), the low-variance, always non-negative
    k3 estimator of KL(old || new) that CleanRL logs. Both diagnostics are detached.
    """
    log_ratio = new_logp - old_logp
    ratio = log_ratio.exp()
    unclipped = -advantages * ratio
    clipped = -advantages * ratio.clamp(1.0 - clip_coef, 1.0 + clip_coef)
    loss = torch.max(unclipped, clipped).mean()
    with torch.no_grad():
        clipfrac = ((ratio - 1.0).abs() > clip_coef).float().mean()
        approx_kl = ((ratio - 1.0) - log_ratio).mean()
    return loss, clipfrac, approx_kl


def value_loss(
    new_values: Tensor, old_values: Tensor, returns: Tensor, clip_coef: float, clip: bool
) -> Tensor:
    """0.5 * mean squared error to the returns. With `clip`, as in CleanRL: the new value is
    also clipped to old +- clip_coef and the larger (pessimistic) of the two errors is taken
    per sample, which keeps the critic from moving far from the behaviour values in one
    update."""
    unclipped = (new_values - returns) ** 2
    if not clip:
        return 0.5 * unclipped.mean()
    clipped_values = old_values + (new_values - old_values).clamp(-clip_coef, clip_coef)
    clipped = (clipped_values - returns) ** 2
    return 0.5 * torch.max(unclipped, clipped).mean()


def explained_variance(pred: Tensor, target: Tensor) -> Tensor:
    """1 - Var(target - pred) / Var(target): 1 is a perfect critic, 0 no better than the mean,
    negative worse. NaN when the target has no variance (then the ratio is undefined)."""
    var_target = target.var(unbiased=False)
    if var_target == 0:
        return torch.tensor(float("nan"))
    return 1.0 - (target - pred).var(unbiased=False) / var_target


def normalize(x: Tensor, eps: float = 1e-8) -> Tensor:
    """(x - mean) / (std + eps), with the unbiased std as in CleanRL (`advantages.normalize`
    for tensors on any device). A single element is only centred."""
    centred = x - x.mean()
    if x.numel() < 2:
        return centred
    return centred / (x.std() + eps)


# --- the fused loss ---------------------------------------------------------------------------


def ppo_loss(
    new_logp: Tensor,
    entropy: Tensor,
    new_values: Tensor,
    old_logp: Tensor,
    advantages: Tensor,
    old_values: Tensor,
    returns: Tensor,
    *,
    clip_coef: float,
    clip_vloss: bool,
    ent_coef: float,
    vf_coef: float,
    norm_adv: bool = False,
) -> tuple[Tensor, Tensor]:
    """(loss, stats): the PPO loss of a minibatch (all inputs [B]; gradients flow into the
    first three) and a detached [5] tensor of `LOSS_STATS`. approx_kl and clipfrac are as
    in `clipped_surrogate_loss`; `norm_adv` normalises the advantages first."""
    inputs = (new_logp, entropy, new_values, old_logp, advantages, old_values, returns)
    if all(x.device.type == "cpu" and x.dtype == torch.float32 for x in inputs):
        loss, stats = _PPOLoss.apply(*inputs, clip_coef, clip_vloss, ent_coef, vf_coef, norm_adv)
        return loss, stats
    if norm_adv:
        advantages = normalize(advantages)
    policy, clipfrac, approx_kl = clipped_surrogate_loss(new_logp, old_logp, advantages, clip_coef)
    value = value_loss(new_values, old_values, returns, clip_coef, clip_vloss)
    mean_entropy = entropy.mean()
    loss = policy - ent_coef * mean_entropy + vf_coef * value
    stats = torch.stack([policy, value, mean_entropy, approx_kl, clipfrac]).detach()
    return loss, stats


class _PPOLoss(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, *args: Any) -> tuple[Tensor, Tensor]:
        # `ppo_loss`'s seven tensors, then its four settings and norm_adv, in its order
        tensors, (clip_coef, clip_vloss, ent_coef, vf_coef, norm_adv) = args[:7], args[7:]
        out = ppo_loss_numpy(
            *(x.detach().numpy() for x in tensors),
            clip_coef=clip_coef, clip_vloss=clip_vloss,
            ent_coef=ent_coef, vf_coef=vf_coef, norm_adv=norm_adv,
        )  # fmt: skip
        ctx.grads = out
        stats = torch.from_numpy(out.stats)
        ctx.mark_non_differentiable(stats)
        return torch.tensor(out.loss, dtype=torch.float32), stats

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, grad: Tensor, _stats_grad: Tensor) -> tuple[Tensor | None, ...]:
        out, scale = ctx.grads, np.float32(float(grad))
        grad_entropy = None
        if out.grad_entropy is not None and ctx.needs_input_grad[1]:
            grad_entropy = torch.full(out.grad_logp.shape, out.grad_entropy * float(scale))
        return (
            torch.from_numpy(out.grad_logp * scale),
            grad_entropy,
            torch.from_numpy(out.grad_values * scale),
            *([None] * 9),
        )
