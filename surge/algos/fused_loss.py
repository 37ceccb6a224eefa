"""PPO's minibatch loss as one autograd node, with its gradient written out by hand.

The loss is exactly `clipped_surrogate_loss - ent_coef * mean(entropy) + vf_coef *
value_loss` (algos/ppo.py, the reference definitions). Built from those functions, autograd
records about 25 nodes per minibatch (exp, clamp, max, pow, mean, ...), and on a small CPU
learner each costs more to run than its arithmetic: this single node takes a CartPole
minibatch step from about 1.0 ms to 0.85 ms. tests/unit/test_fused_loss.py checks the value,
the gradients and the statistics against the reference functions.

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

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

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
) -> tuple[Tensor, Tensor]:
    """(loss, stats): the PPO loss of a minibatch (all inputs [B]; gradients flow into the
    first three) and a detached [5] tensor of `LOSS_STATS`. approx_kl and clipfrac are as
    in `clipped_surrogate_loss`."""
    loss, stats = _PPOLoss.apply(
        new_logp, entropy, new_values, old_logp, advantages, old_values, returns,
        clip_coef, clip_vloss, ent_coef, vf_coef,
    )  # fmt: skip
    return loss, stats


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
    ) -> tuple[Tensor, Tensor]:
        log_ratio = new_logp - old_logp
        ratio = log_ratio.exp()
        surrogate = advantages * ratio
        clipped = advantages * ratio.clamp(1.0 - clip_coef, 1.0 + clip_coef)
        unclipped_taken = surrogate <= clipped
        policy_loss = -torch.minimum(surrogate, clipped).mean()

        error = new_values - returns
        if clip_vloss:
            delta = (new_values - old_values).clamp(-clip_coef, clip_coef)
            clipped_error = old_values + delta - returns
            squared, clipped_squared = error * error, clipped_error * clipped_error
            value_loss = 0.5 * torch.maximum(squared, clipped_squared).mean()
            value_grad = error * (squared >= clipped_squared)
        else:
            value_loss = 0.5 * (error * error).mean()
            value_grad = error
        mean_entropy = entropy.mean()
        loss = policy_loss - ent_coef * mean_entropy + vf_coef * value_loss

        approx_kl = ((ratio - 1.0) - log_ratio).mean()
        clipfrac = ((ratio - 1.0).abs() > clip_coef).float().mean()
        stats = torch.stack([policy_loss, value_loss, mean_entropy, approx_kl, clipfrac])
        ctx.mark_non_differentiable(stats)
        ctx.save_for_backward(surrogate * unclipped_taken, value_grad)
        ctx.ent_coef, ctx.vf_coef = ent_coef, vf_coef
        return loss, stats

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, grad: Tensor, _stats_grad: Tensor) -> tuple[Tensor | None, ...]:
        surrogate_taken, value_grad = ctx.saved_tensors
        scale = grad / surrogate_taken.shape[0]
        grad_logp = surrogate_taken * -scale
        grad_entropy = None
        if ctx.ent_coef != 0.0 and ctx.needs_input_grad[1]:
            grad_entropy = (-ctx.ent_coef * scale).expand(surrogate_taken.shape)
        grad_values = value_grad * (ctx.vf_coef * scale)
        return (grad_logp, grad_entropy, grad_values, *([None] * 8))
