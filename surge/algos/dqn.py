"""The maths of the DQN family (DQN, double DQN, dueling, Ape-X, R2D2) as pure torch functions.

Where each piece comes from:

- `q_learning_target` and `td_loss`: Mnih et al. 2015 ("Human-level control through deep
  reinforcement learning"), with n-step returns (see nstep.py); the Huber loss, the plain
  MSE and the linear epsilon schedule follow CleanRL's dqn.py / dqn_atari.py.
- `double_q_target`: van Hasselt et al. 2016 ("Deep Reinforcement Learning with Double
  Q-learning"): the online network picks the next action, the target network values it.
- `td_loss` weights and the TD errors it returns feed prioritised replay (Schaul et al.
  2016; see priorities.py).
- `rescale` / `unrescale` and `sequence_priority`: Kapturowski et al. 2019 (R2D2), sections
  2.3 and 3, after Pohlen et al. 2018 ("Observe and Look Further", the value rescaling h).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor


def q_learning_target(q_next_target: Tensor, returns: Tensor, discount: Tensor) -> Tensor:
    """returns + discount * max_a Q_target(s', a).

    `q_next_target` [B, A] float; `returns` and `discount` [B] float (discount is 0 after a
    termination, gamma^m otherwise). Returns [B] float. Not detached: `td_loss` does that.
    """
    return returns + discount * q_next_target.max(dim=1).values


def double_q_target(
    q_next_online: Tensor, q_next_target: Tensor, returns: Tensor, discount: Tensor
) -> Tensor:
    """returns + discount * Q_target(s', argmax_a Q_online(s', a)) (double DQN).

    `q_next_online` and `q_next_target` [B, A] float; `returns`, `discount` [B] float.
    Returns [B] float. Ties in the argmax go to the lowest action index.
    """
    # The choice of action is not differentiable; detach so no graph is kept for it.
    best = q_next_online.detach().argmax(dim=1, keepdim=True)
    return returns + discount * q_next_target.gather(1, best).squeeze(1)


def td_loss(
    q_taken: Tensor, target: Tensor, weights: Tensor | None, kind: str
) -> tuple[Tensor, Tensor]:
    """The TD loss of Q(s, a) against a constant target, and the TD errors.

    `q_taken` [B] float: Q_online(s, a) of the actions taken; `target` [B] float (detached
    here: gradients must not flow into the bootstrap); `weights` [B] float importance
    weights or None; `kind` "huber" (smooth L1 with delta 1, torch's smooth_l1_loss) or
    "mse" (squared error, no 1/2). Returns (loss: scalar, mean over the batch of
    weight * per-sample loss; td: [B] detached target - q_taken, for new priorities).
    """
    target = target.detach()
    if kind == "huber":
        per_sample = F.smooth_l1_loss(q_taken, target, reduction="none", beta=1.0)
    elif kind == "mse":
        per_sample = F.mse_loss(q_taken, target, reduction="none")
    else:
        raise ValueError(f"td_loss kind must be 'huber' or 'mse', got {kind!r}")
    if weights is not None:
        per_sample = per_sample * weights.detach()
    return per_sample.mean(), (target - q_taken).detach()


def rescale(x: Tensor, eps: float = 1e-3) -> Tensor:
    """h(x) = sign(x) (sqrt(|x| + 1) - 1) + eps x, elementwise (any shape, float).

    Squashes large returns so one network fits values of very different scales (R2D2);
    the eps x term keeps h invertible with a Lipschitz inverse.
    """
    return torch.sign(x) * (torch.sqrt(x.abs() + 1.0) - 1.0) + eps * x


def unrescale(x: Tensor, eps: float = 1e-3) -> Tensor:
    """h^-1(x) = sign(x) (((sqrt(1 + 4 eps (|x| + 1 + eps)) - 1) / (2 eps))^2 - 1), the exact
    inverse of `rescale` (elementwise, any shape, float)."""
    root = (torch.sqrt(1.0 + 4.0 * eps * (x.abs() + 1.0 + eps)) - 1.0) / (2.0 * eps)
    return torch.sign(x) * (root * root - 1.0)


def sequence_priority(abs_td: Tensor, mask: Tensor | None = None, eta: float = 0.9) -> Tensor:
    """R2D2's sequence priority eta * max_t |delta_t| + (1 - eta) * mean_t |delta_t|.

    `abs_td` [T, B] float (the absolute value is taken again, so raw TD errors work too);
    `mask` [T, B] bool, the steps that count (padding after an episode end does not), or
    None for all. Returns [B] float; a column with no step counted gets 0.
    """
    td = abs_td.abs()
    if mask is None:
        return eta * td.max(dim=0).values + (1.0 - eta) * td.mean(dim=0)
    m = mask.to(td.dtype)
    # |delta| >= 0, so zeroing the masked-out steps leaves the max over the counted ones.
    td = td * m
    count = m.sum(dim=0).clamp(min=1.0)
    return eta * td.max(dim=0).values + (1.0 - eta) * td.sum(dim=0) / count
