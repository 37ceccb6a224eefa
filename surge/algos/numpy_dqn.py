"""The DQN update written out in numpy for MLP Q-networks (`model.backend: numpy`, the
default for the Q-networks it covers): the forward and backward of models/q_network.py's
`QNetwork` on the flat encoder, the TD loss of algos/dqn.py with its gradient, and Adam.

Why: CartPole's Q-network update (a batch of 128 through 4 -> 120 -> 84 -> 2) costs about
0.75 ms in torch, nearly all per-operator dispatch; the same arithmetic in numpy costs a
third of that, and the update is what bounds a DQN run whose actors and replay keep up.
The maths is the torch learner's, term for term (tests/unit/test_numpy_dqn.py checks losses,
gradients and updated weights against it): Q = MLP(x) with a linear head, or dueling heads
Q = V + A - mean_a A; the target r + discount * max_a Q_target(s', a), or with double
Q-learning Q_target(s', argmax_a Q(s', a)); the loss mean_i w_i l(target_i - Q(s_i, a_i)),
l the Huber loss with delta 1 (torch's smooth_l1_loss) or the square (mse_loss, no 1/2).

The parameters are one flat float32 vector in `QNetwork.parameters()` order (the published
layout, models/q_policy.py `q_params`), the target network's another.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from surge.algos.numpy_ppo import NumpyAdam, clip_by_global_norm
from surge.models.numpy_net import mlp_backward, mlp_forward

Layer = tuple[np.ndarray, np.ndarray]
"""(weight [out, in], bias [out]): views into a flat vector."""


@dataclass
class QLayout:
    """Where each layer of a flat Q-network vector lies."""

    shapes: list[tuple[str, tuple[int, ...]]]
    """(state-dict name, shape) in `parameters()` order."""
    dueling: bool
    relu: bool

    @property
    def size(self) -> int:
        return sum(math.prod(shape) for _, shape in self.shapes)

    def views(self, flat: np.ndarray) -> list[np.ndarray]:
        out, offset = [], 0
        for _, shape in self.shapes:
            n = math.prod(shape)
            out.append(flat[offset : offset + n].reshape(shape))
            offset += n
        return out

    def layers(self, flat: np.ndarray) -> tuple[list[Layer], list[Layer]]:
        """(torso layers, head layers: [head] or [value, advantage])."""
        v = self.views(flat)
        pairs = [(v[i], v[i + 1]) for i in range(0, len(v), 2)]
        heads = 2 if self.dueling else 1
        return pairs[:-heads], pairs[-heads:]


def q_forward(
    layout: QLayout, flat: np.ndarray, x: np.ndarray
) -> tuple[np.ndarray, list[np.ndarray]]:
    """(Q-values [B, A], the torso's activations for `q_backward`) of encoded inputs x [B, F]."""
    torso, heads = layout.layers(flat)
    act = "relu" if layout.relu else "tanh"
    if not layout.dueling:  # the head is the last linear layer of one MLP
        hidden = mlp_forward(x, torso + heads, act, True)
        return hidden[-1], hidden
    hidden = mlp_forward(x, torso, act, False)
    h = hidden[-1]
    (wv, bv), (wa, ba) = heads
    advantage = h @ wa.T + ba
    q = (h @ wv.T + bv) + advantage - advantage.mean(axis=1, keepdims=True)
    return q, hidden


def q_backward(
    layout: QLayout, flat: np.ndarray, hidden: list[np.ndarray], dq: np.ndarray, grad: np.ndarray
) -> None:
    """The gradient of a loss with dL/dQ = `dq` [B, A] with respect to the flat parameters,
    written into `grad` (laid out like `flat`)."""
    torso, heads = layout.layers(flat)
    torso_grads, head_grads = layout.layers(grad)
    act = "relu" if layout.relu else "tanh"
    if not layout.dueling:
        mlp_backward(dq, hidden, [w for w, _ in torso + heads], act, True, torso_grads + head_grads)
        return
    h = hidden[-1]
    (wv, _), (wa, _) = heads
    (gwv, gbv), (gwa, gba) = head_grads
    dv = dq.sum(axis=1, keepdims=True)  # Q = V + A - mean(A)
    da = dq - dv / dq.shape[1]
    np.matmul(dv.T, h, out=gwv)
    gbv[...] = dv.sum(axis=0)
    np.matmul(da.T, h, out=gwa)
    gba[...] = da.sum(axis=0)
    dh = dv @ wv + da @ wa
    if torso:
        mlp_backward(dh, hidden, [w for w, _ in torso], act, False, torso_grads)


def td_targets(
    q_next_target: np.ndarray,
    q_next_online: np.ndarray | None,
    returns: np.ndarray,
    discount: np.ndarray,
) -> np.ndarray:
    """returns + discount * Q_target(s', a*), a* = argmax of the online Q-values when given
    (double DQN), else of the target's own. [B] float32."""
    chooser = q_next_online if q_next_online is not None else q_next_target
    best = chooser.argmax(axis=1)
    return returns + discount * q_next_target[np.arange(len(best)), best]


def td_loss_grad(
    q_taken: np.ndarray, target: np.ndarray, weights: np.ndarray | None, kind: str
) -> tuple[float, np.ndarray]:
    """(loss, dL/dq_taken [B]): algos/dqn.py `td_loss`, mean over the batch of w * l(q - y)."""
    diff = q_taken - target
    n = len(diff)
    if kind == "huber":  # smooth L1 with beta 1
        small = np.abs(diff) < 1.0
        per = np.where(small, 0.5 * diff * diff, np.abs(diff) - 0.5)
        d = np.clip(diff, -1.0, 1.0)
    elif kind == "mse":
        per = diff * diff
        d = 2.0 * diff
    else:
        raise ValueError(f"td_loss kind must be 'huber' or 'mse', got {kind!r}")
    if weights is not None:
        per, d = per * weights, d * weights
    return float(per.mean()), (d / n).astype(np.float32)


class NumpyQLearner:
    """One DQN update per batch on flat numpy parameters (see the module docstring)."""

    def __init__(
        self,
        layout: QLayout,
        flat: np.ndarray,
        lr: float,
        adam_eps: float,
        double: bool,
        loss: str,
        max_grad_norm: float | None,
    ) -> None:
        self.layout = layout
        self.flat = np.ascontiguousarray(flat, np.float32)
        self.target = self.flat.copy()
        self.grad = np.zeros_like(self.flat)
        self.optimizer = NumpyAdam(self.flat, lr=lr, eps=adam_eps)
        self.double, self.loss, self.max_grad_norm = double, loss, max_grad_norm

    def update(
        self,
        x: np.ndarray,
        x_next: np.ndarray,
        action: np.ndarray,
        returns: np.ndarray,
        discount: np.ndarray,
        weights: np.ndarray | None,
    ) -> tuple[float, np.ndarray, np.ndarray]:
        """One step on a batch (encoded inputs [B, F], actions [B] from 0): (loss, Q of the
        actions taken [B], TD errors target - Q [B])."""
        layout = self.layout
        q_next_target, _ = q_forward(layout, self.target, x_next)
        q_next_online = q_forward(layout, self.flat, x_next)[0] if self.double else None
        target = td_targets(q_next_target, q_next_online, returns, discount)
        q, hidden = q_forward(layout, self.flat, x)
        rows = np.arange(len(action))
        q_taken = q[rows, action]
        loss, d_taken = td_loss_grad(q_taken, target, weights, self.loss)
        dq = np.zeros_like(q)
        dq[rows, action] = d_taken
        q_backward(layout, self.flat, hidden, dq, self.grad)
        if self.max_grad_norm is not None:
            clip_by_global_norm(self.grad, self.max_grad_norm)
        self.optimizer.step(self.grad)
        return loss, q_taken, target - q_taken

    def sync_target(self, tau: float) -> None:
        """target <- tau * online + (1 - tau) * target (tau 1: a copy)."""
        if tau >= 1.0:
            np.copyto(self.target, self.flat)
        else:
            self.target += np.float32(tau) * (self.flat - self.target)
