"""PPO's loss terms: the reference definitions as pure torch functions, and `ppo_loss`, which
on CPU computes their sum as one autograd node (numpy forward, hand-written gradient).

`ppo_loss` is exactly `clipped_surrogate_loss - ent_coef * mean(entropy) + vf_coef *
value_loss` (below), after per-minibatch advantage normalisation (`normalize`) when asked.
Built from those functions, autograd records about 30 nodes per minibatch (exp, clamp, max,
pow, mean, ...); on [B] vectors of a few hundred elements each costs a torch dispatch of
several microseconds against about one for a numpy ufunc. Off the CPU the reference
functions run as they are. tests/unit/test_losses.py checks value, gradients and
statistics against them.

The gradients, per sample i of a minibatch of B (r = exp(new_logp - old_logp), c = clip_coef):

- policy: the surrogate takes min(A r, A clip(r, 1-c, 1+c)). Where the unclipped term is the
  smaller (or they tie, which is every r inside the range), d/d new_logp = -A r / B. Where
  the clipped term is strictly smaller, r is outside the range, the clip is constant in r,
  and the gradient is 0.
- value (clipped): the loss takes max((V-R)^2, (V_clip-R)^2). Where the unclipped error is
  the larger (or they tie: V inside old +- c, V_clip = V), d/dV = vf_coef (V - R) / B; else
  V_clip is constant in V and the gradient is 0. Unclipped: always vf_coef (V - R) / B.
- entropy: -ent_coef / B each; with ent_coef 0 no gradient flows into the entropy at all.

These match autograd of the reference functions everywhere except on measure-zero ties
outside the clip range, where torch splits a max's gradient in half.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

from surge.algos.advantages import normalize

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


# --- the fused loss ---------------------------------------------------------------------------


LOSS_STATS = ("policy_loss", "value_loss", "entropy", "approx_kl", "clipfrac")
"""The order of the statistics `ppo_loss` returns beside the loss."""


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


def _mean(x: np.ndarray) -> float:
    # np.add.reduce: ndarray.mean's Python wrapper costs about 4 us on a [256] vector
    return float(np.add.reduce(x)) / x.size


def _clip(x: np.ndarray, low: float, high: float) -> np.ndarray:
    return np.minimum(np.maximum(x, low), high)  # np.clip's wrapper is as slow as .mean's


def _normalized(x: np.ndarray, eps: float = 1e-8) -> np.ndarray:
    """`advantages.normalize` in numpy: the unbiased std, as in CleanRL."""
    centred = x - np.float32(_mean(x))
    if x.size < 2:
        return centred
    std = np.sqrt(float(np.dot(centred, centred)) / (x.size - 1))
    return centred / np.float32(std + eps)


class _PPOLoss(torch.autograd.Function):
    @staticmethod
    def forward(
        ctx: Any,
        new_logp: Tensor,
        entropy: Tensor,
        new_values: Tensor,
        old_logp: Tensor,
        advantages: Tensor,
        old_values: Tensor,
        returns: Tensor,
        clip_coef: float,
        clip_vloss: bool,
        ent_coef: float,
        vf_coef: float,
        norm_adv: bool,
    ) -> tuple[Tensor, Tensor]:
        inputs = (new_logp, entropy, new_values, old_logp, advantages, old_values, returns)
        logp, ent, values, old_logp_, adv, old_values_, returns_ = (
            x.detach().numpy() for x in inputs
        )
        if norm_adv:
            adv = _normalized(adv)
        log_ratio = logp - old_logp_
        ratio = np.exp(log_ratio)
        surrogate = adv * ratio
        clipped = adv * _clip(ratio, 1.0 - clip_coef, 1.0 + clip_coef)
        policy_loss = -_mean(np.minimum(surrogate, clipped))

        error = values - returns_
        if clip_vloss:
            delta = _clip(values - old_values_, -clip_coef, clip_coef)
            clipped_error = old_values_ + delta - returns_
            squared, clipped_squared = error * error, clipped_error * clipped_error
            value_loss = 0.5 * _mean(np.maximum(squared, clipped_squared))
            value_grad = error * (squared >= clipped_squared)
        else:
            value_loss = 0.5 * _mean(error * error)
            value_grad = error
        mean_entropy = _mean(ent)
        loss = policy_loss - ent_coef * mean_entropy + vf_coef * value_loss

        approx_kl = _mean((ratio - 1.0) - log_ratio)
        clipfrac = np.count_nonzero(np.abs(ratio - 1.0) > clip_coef) / ratio.size
        stats = np.array(
            [policy_loss, value_loss, mean_entropy, approx_kl, clipfrac], dtype=np.float32
        )
        ctx.surrogate_taken = surrogate * (surrogate <= clipped)
        ctx.value_grad = value_grad
        ctx.ent_coef, ctx.vf_coef = ent_coef, vf_coef
        out = torch.tensor(loss, dtype=torch.float32)
        stats_out = torch.from_numpy(stats)
        ctx.mark_non_differentiable(stats_out)
        return out, stats_out

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, grad: Tensor, _stats_grad: Tensor) -> tuple[Tensor | None, ...]:
        surrogate_taken, value_grad = ctx.surrogate_taken, ctx.value_grad
        scale = np.float32(float(grad) / surrogate_taken.shape[0])
        grad_logp = torch.from_numpy(surrogate_taken * -scale)
        grad_entropy = None
        if ctx.ent_coef != 0.0 and ctx.needs_input_grad[1]:
            grad_entropy = torch.full(surrogate_taken.shape, -ctx.ent_coef * float(scale))
        grad_values = torch.from_numpy(value_grad * np.float32(ctx.vf_coef * scale))
        return (grad_logp, grad_entropy, grad_values, *([None] * 9))
