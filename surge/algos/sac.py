"""The maths of soft actor-critic for Box actions, as pure torch functions.

Haarnoja et al. 2018 ("Soft Actor-Critic Algorithms and Applications"): twin Q critics with
a clipped double-Q soft target (section 5 / eq. 6), the reparameterised tanh-squashed
Gaussian policy (appendix C, eq. 21) and the learned temperature (section 5, eq. 18) with
target entropy -dim(A). Conventions, constants and the 1e-6 in the tanh correction follow
CleanRL's sac_continuous_action.py: the log-std is squashed into [-5, 2] with a tanh, and
actions are y * scale + bias with scale = (high - low) / 2, bias = (high + low) / 2.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor

from surge.models.sac_policy import LOG_STD_MAX, LOG_STD_MIN

_HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)


def bounded_log_std(raw: Tensor) -> Tensor:
    """Map the actor's raw output (any shape, float) smoothly into [LOG_STD_MIN, LOG_STD_MAX].

    A tanh rather than a clamp keeps a gradient at the bounds (CleanRL).
    """
    return LOG_STD_MIN + 0.5 * (LOG_STD_MAX - LOG_STD_MIN) * (torch.tanh(raw) + 1.0)


def squashed_gaussian(
    mean: Tensor, log_std: Tensor, scale: Tensor, bias: Tensor, noise: Tensor | None
) -> tuple[Tensor, Tensor]:
    """An action of the tanh-squashed Gaussian policy and its log-probability.

    `mean`, `log_std` and `noise` [B, A] float; `scale`, `bias` [A] or [B, A] float. With
    noise = None the action is deterministic (u = mean, for evaluation). Otherwise

        u = mean + exp(log_std) * noise,  y = tanh(u),  action = y * scale + bias
        logp = sum_a [log N(u; mean, std) - log(scale * (1 - y^2) + 1e-6)]

    Returns (action [B, A], logp [B]). The caller draws noise ~ N(0, 1) so that this stays
    pure and gradients flow through u (the reparameterisation trick).
    """
    z = torch.zeros_like(mean) if noise is None else noise
    u = mean + torch.exp(log_std) * z
    y = torch.tanh(u)
    action = y * scale + bias
    # (u - mean) / std is z by construction: using z itself is exact and has the same
    # gradients as torch.distributions.Normal(mean, std).log_prob(u).
    log_normal = -0.5 * z * z - log_std - _HALF_LOG_2PI
    # Change of variables through tanh and the affine map; 1e-6 keeps the log finite when
    # tanh saturates to +-1 in float32.
    log_jacobian = torch.log(scale * (1.0 - y * y) + 1e-6)
    return action, (log_normal - log_jacobian).sum(dim=-1)


def critic_target(
    rewards: Tensor,
    discount: Tensor,
    q1_next: Tensor,
    q2_next: Tensor,
    next_logp: Tensor,
    alpha: Tensor | float,
) -> Tensor:
    """The soft clipped double-Q target, detached.

        rewards + discount * (min(q1_next, q2_next) - alpha * next_logp)

    All tensors [B] float (discount 0 after a termination); `alpha` a float or a 0-d
    tensor. Returns [B] float.
    """
    soft_value = torch.minimum(q1_next, q2_next) - alpha * next_logp
    return (rewards + discount * soft_value).detach()


def critic_loss(q1: Tensor, q2: Tensor, target: Tensor) -> Tensor:
    """mse(q1, target) + mse(q2, target) with a constant target: [B] float each -> scalar."""
    target = target.detach()
    return F.mse_loss(q1, target) + F.mse_loss(q2, target)


def actor_loss(logp: Tensor, q1_pi: Tensor, q2_pi: Tensor, alpha: Tensor | float) -> Tensor:
    """mean(alpha * logp - min(q1_pi, q2_pi)): [B] float each -> scalar.

    A tensor `alpha` is detached: the temperature has its own loss (`temperature_loss`).
    """
    if isinstance(alpha, Tensor):
        alpha = alpha.detach()
    return (alpha * logp - torch.minimum(q1_pi, q2_pi)).mean()


def temperature_loss(log_alpha: Tensor, logp: Tensor, target_entropy: float) -> Tensor:
    """mean(-exp(log_alpha) * (logp + target_entropy)), with logp treated as a constant.

    `log_alpha` 0-d float (the learned parameter); `logp` [B] float. Minimising it raises
    alpha while the policy's entropy (-logp) is below the target and lowers it above.
    """
    return (-torch.exp(log_alpha) * (logp + target_entropy).detach()).mean()


def default_target_entropy(action_dims: int) -> float:
    """-dim(A), the target entropy of Haarnoja et al. 2018 for `action_dims` action dims."""
    if action_dims < 1:
        raise ValueError(f"action_dims must be at least 1, got {action_dims}")
    return -float(action_dims)
