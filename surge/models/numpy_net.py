"""The actor-critic's training path in numpy, for MLP models: forward with the values the
backward needs, and a hand-written backward into one flat gradient vector.

Why a second implementation of the training maths: on the small batches of a CPU learner
(CartPole: 128 rows x 64 units) an update's cost is per-operator overhead, not arithmetic.
A torch op costs a few microseconds of dispatch against about one for numpy, and a
trainer that never imports torch starts about 1.3 s sooner (torch's import is most of a
small run's start-up, and far more when its 430 MB of libraries are not in the page cache).
`model.backend` chooses; the numpy learner (algos/numpy_ppo.py) is the default for the
models this covers (`numpy_layout` is not None). tests/unit/test_numpy_learner.py checks
outputs and every gradient against `ActorCritic` and autograd.

The parameters are one float32 vector laid out as `ActorCritic.parameters()` (the layout of
`numpy_policy.numpy_layout`), which is also what the parameter service publishes: the
trainer publishes it as it is, and `state_dict` gives the torch model's keys and shapes.
Every function here also computes in float64 when given float64 parameters: the tests
compare the two learners there, where rounding cannot tip a clip or an Adam step.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from surge.models.inputs import ACTION_MASK
from surge.models.numpy_policy import (
    LOG_SQRT_2PI,
    NumpyLayout,
    flat_features,
    layout_size,
    mask_logits,
    param_views,
)

Product = Callable[..., np.ndarray]
"""A matrix product `matmul(a, b, out=None)`: np.matmul, or models/gemm.py `matmul`."""

HIDDEN_GAIN = math.sqrt(2.0)
POLICY_GAIN = 0.01
VALUE_GAIN = 1.0


# --- pure functions: MLP forward and backward -------------------------------------------------


def mlp_forward(
    x: np.ndarray,
    layers: list[tuple[np.ndarray, np.ndarray]],
    activation: str,
    linear_last: bool,
    matmul: Product = np.matmul,
) -> list[np.ndarray]:
    """[x, h_1, ..., h_L] with h_{k+1} = act(h_k W_k^T + b_k); no activation after the last
    layer when `linear_last` (a head layer). Weights are [out, in], as in nn.Linear.
    `matmul(a, b, out=None)`: the products' library (models/gemm.py `matmul` picks one)."""
    hidden = [x]
    h = x
    for k, (weight, bias) in enumerate(layers):
        z = matmul(h, weight.T)
        z += bias
        if linear_last and k == len(layers) - 1:
            h = z
        elif activation == "relu":
            h = np.maximum(z, 0.0, out=z)
        else:
            h = np.tanh(z, out=z)
        hidden.append(h)
    return hidden


def mlp_backward(
    g: np.ndarray,
    hidden: list[np.ndarray],
    weights: list[np.ndarray],
    activation: str,
    linear_last: bool,
    grads: list[tuple[np.ndarray, np.ndarray]] | None = None,
    input_grad: bool = False,
    weight_grads: bool = True,
    matmul: Product = np.matmul,
) -> tuple[list[tuple[np.ndarray, np.ndarray]], np.ndarray | None]:
    """Backward of `mlp_forward` given g = dL/dh_L: ([(dW_k, db_k)], dL/dx or None).

    The chain rule: g_k = g'_{k+1} * act'(h_{k+1}), dW_k = g_k^T h_k, db_k = sum_rows g_k,
    g'_k = g_k W_k. With `grads` (arrays of the parameters' shapes) the results are written
    there instead of allocated. Without `weight_grads` (a network held constant, only
    dL/dx wanted) no (dW_k, db_k) is computed and the list comes back empty."""
    out: list[tuple[np.ndarray, np.ndarray]] = [None] * len(weights)  # type: ignore[list-item]
    for k in range(len(weights) - 1, -1, -1):
        h = hidden[k + 1]
        if linear_last and k == len(weights) - 1:
            pass
        elif activation == "relu":
            g = g * (h > 0)
        else:
            g = g * (1.0 - h * h)
        if not weight_grads:
            pass
        elif grads is None:
            out[k] = (matmul(g.T, hidden[k]), g.sum(0))
        else:
            dw, db = grads[k]
            matmul(g.T, hidden[k], out=dw)
            np.add.reduce(g, axis=0, out=db)
            out[k] = (dw, db)
        if k > 0 or input_grad:
            g = matmul(g, weights[k])
    return (out if weight_grads else []), (g if input_grad else None)


def orthogonal(rng: np.random.Generator, shape: tuple[int, int], gain: float) -> np.ndarray:
    """An orthogonal matrix scaled by `gain`, drawn as torch.nn.init.orthogonal_ draws it
    (QR of a Gaussian matrix, signs fixed by R's diagonal)."""
    rows, cols = shape
    a = rng.standard_normal((rows, cols) if rows >= cols else (cols, rows))
    q, r = np.linalg.qr(a)
    q *= np.sign(np.diag(r))
    q = q if rows >= cols else q.T
    return (gain * q).astype(np.float32)


def initial_parameters(
    layout: NumpyLayout, rng: np.random.Generator, log_std_init: float
) -> np.ndarray:
    """The flat parameter vector initialised like `ActorCritic` (layers.py: orthogonal
    weights with gain sqrt(2) in the torsos, 0.01 for the policy output, 1 for the value
    output; zero biases; log-std at `log_std_init`)."""
    flat = np.zeros(layout_size(layout), np.float32)
    for name, view in param_views(layout, flat).items():
        shape = view.shape
        if name.endswith("log_std"):
            view[:] = log_std_init
        elif name.endswith("weight"):
            gain = (
                POLICY_GAIN
                if name.startswith("action_head")
                else VALUE_GAIN
                if name.startswith("value_head")
                else HIDDEN_GAIN
            )
            view[:] = orthogonal(rng, shape, gain)  # type: ignore[arg-type]
    return flat


# --- pure functions: the action distributions and their gradients ------------------------------


def log_softmax(logits: np.ndarray) -> np.ndarray:
    shifted = logits - logits.max(-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))


def categorical_terms(
    logits: np.ndarray, idx: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(log p(idx) [B], entropy [B], p [B, n], log p [B, n]) for logits [B, n]."""
    logp_all = log_softmax(logits)
    probs = np.exp(logp_all)
    logp = np.take_along_axis(logp_all, idx[:, None], -1)[:, 0]
    entropy = -(probs * logp_all).sum(-1)
    return logp, entropy, probs, logp_all


def categorical_grad(
    g_logp: np.ndarray,
    g_entropy: np.ndarray | None,
    idx: np.ndarray,
    probs: np.ndarray,
    logp_all: np.ndarray,
    entropy: np.ndarray,
) -> np.ndarray:
    """dL/dlogits [B, n] from dL/dlogp [B] and dL/dentropy [B]:
    dlogp(a)/dz = onehot(a) - p and dH/dz_j = -p_j (log p_j + H)."""
    g = probs * -g_logp[:, None]
    g[np.arange(len(idx)), idx] += g_logp
    if g_entropy is not None:
        g -= probs * (logp_all + entropy[:, None]) * g_entropy[:, None]
    return g


# --- the network ------------------------------------------------------------------------------


@dataclass
class Forward:
    """What `NumpyActorCritic.evaluate` keeps for `backward`."""

    actor: list[np.ndarray]  # torso (and head, for separate torsos) activations
    critic: list[np.ndarray] | None  # None when the torso is shared
    head_terms: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]]
    gaussian_z: np.ndarray | None
    legal: np.ndarray | None = None  # [B, n] bool: logits the action mask left (None: all)


class NumpyActorCritic:
    """`ActorCritic`'s training maths over one flat parameter vector (`flat`: float32, or
    float64 for reference computations) with a gradient vector of the same layout (`grad`).
    Every weight is a view into `flat`, so writing new values into `flat` in place (Adam)
    updates the network."""

    def __init__(self, layout: NumpyLayout, flat: np.ndarray) -> None:
        if flat.dtype not in (np.float32, np.float64) or flat.shape != (layout_size(layout),):
            raise ValueError(
                f"flat parameters: want {layout_size(layout)} float32 or float64 values"
            )
        self.layout = layout
        self.flat = flat
        self.dtype: type[np.floating] = flat.dtype.type
        self.grad = np.zeros_like(flat)
        self.w = self.views(flat)
        self.g = self.views(self.grad)
        self.activation = layout.activation

    def views(self, buffer: np.ndarray) -> dict[str, np.ndarray]:
        """Per-parameter views (state-dict names and shapes) of a buffer laid out as `flat`."""
        return param_views(self.layout, buffer)

    def _layers(
        self, views: dict[str, np.ndarray], torso: str, head: str | None
    ) -> list[tuple[np.ndarray, np.ndarray]]:
        layers = [
            (views[f"{torso}.{2 * i}.weight"], views[f"{torso}.{2 * i}.bias"])
            for i in range(self.layout.layers)
        ]
        if head is not None:
            layers.append((views[f"{head}.weight"], views[f"{head}.bias"]))
        return layers

    def state_dict(self) -> dict[str, np.ndarray]:
        """Copies of the parameters under `ActorCritic`'s state-dict keys."""
        return {name: self.w[name].copy() for name, _ in self.layout.params}

    def load_state_dict(self, state: dict[str, np.ndarray]) -> None:
        for name, shape in self.layout.params:
            value = np.asarray(state[name], dtype=self.dtype)
            if value.shape != shape:
                raise ValueError(f"{name}: shape {value.shape}, the model has {shape}")
            self.w[name][...] = value

    # ------------------------------------------------------------------ forward

    def value(self, obs: dict[str, np.ndarray]) -> np.ndarray:
        """V(s) [B], no gradient."""
        x = flat_features(self.layout, obs, self.dtype, critic=True)
        torso = "actor_torso" if self.layout.shared else "critic_torso"
        return mlp_forward(x, self._layers(self.w, torso, "value_head"), self.activation, True)[-1][
            :, 0
        ]

    def evaluate(
        self, obs: dict[str, np.ndarray], action: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, Forward]:
        """(logp [B], entropy [B], value [B], what `backward` needs) for given actions."""
        lay, act = self.layout, self.activation
        x = flat_features(lay, obs, self.dtype)
        if lay.shared:
            actor = mlp_forward(x, self._layers(self.w, "actor_torso", None), act, False)
            feat = actor[-1]
            params = (
                feat @ self.w["action_head.linear.weight"].T + self.w["action_head.linear.bias"]
            )
            value = (feat @ self.w["value_head.weight"].T + self.w["value_head.bias"])[:, 0]
            critic = None
        else:
            actor = mlp_forward(
                x, self._layers(self.w, "actor_torso", "action_head.linear"), act, True
            )
            xc = flat_features(lay, obs, self.dtype, critic=True) if lay.central_critic else x
            critic = mlp_forward(xc, self._layers(self.w, "critic_torso", "value_head"), act, True)
            params, value = actor[-1], critic[-1][:, 0]
        legal = None
        if lay.masked:  # a masked logit is a constant: no gradient reaches it (backward)
            legal = obs[ACTION_MASK].reshape(params.shape) != 0
            params = mask_logits(params, obs[ACTION_MASK])
        if lay.head == "gaussian":
            log_std = self.w["action_head.log_std"]
            z = (action - params) * np.exp(-log_std)
            logp = (-0.5 * z * z - log_std - LOG_SQRT_2PI).sum(-1)
            entropy = np.full(len(params), (0.5 + LOG_SQRT_2PI + log_std).sum(), self.dtype)
            return logp, entropy, value, Forward(actor, critic, [], z)
        idx_all = np.asarray(action, dtype=np.int64).reshape(len(params), -1) - np.asarray(
            lay.start
        )
        logp = np.zeros(len(params), self.dtype)
        entropy = np.zeros(len(params), self.dtype)
        terms = []
        col = 0
        for i, n in enumerate(lay.nvec):
            idx = idx_all[:, i]
            lp, ent, probs, logp_all = categorical_terms(params[:, col : col + n], idx)
            col += n
            logp += lp
            entropy += ent
            terms.append((idx, probs, logp_all, ent, lp))
        return logp, entropy, value, Forward(actor, critic, terms, None, legal)

    # ------------------------------------------------------------------ backward

    def backward(
        self,
        fwd: Forward,
        g_logp: np.ndarray,
        g_entropy: np.ndarray | None,
        g_value: np.ndarray,
    ) -> np.ndarray:
        """Write dL/dparameters into `grad` (overwriting it) from dL/dlogp, dL/dentropy (None:
        the loss does not use the entropy) and dL/dvalue, all [B]; returns `grad`."""
        lay, act = self.layout, self.activation
        self.grad.fill(0.0)  # the log-std slot is only written for Gaussian heads
        if lay.head == "gaussian":
            assert fwd.gaussian_z is not None
            z, log_std = fwd.gaussian_z, self.w["action_head.log_std"]
            g_params = (g_logp[:, None] * z) * np.exp(-log_std)
            g_log_std = (g_logp[:, None] * (z * z - 1.0)).sum(0)
            if g_entropy is not None:
                g_log_std += g_entropy.sum()
            self.g["action_head.log_std"][...] = g_log_std
        else:
            parts = [
                categorical_grad(g_logp, g_entropy, idx, probs, logp_all, ent)
                for idx, probs, logp_all, ent, _ in fwd.head_terms
            ]
            g_params = parts[0] if len(parts) == 1 else np.concatenate(parts, axis=-1)
            if fwd.legal is not None:
                g_params = np.where(fwd.legal, g_params, 0.0)
        g_value = g_value[:, None].astype(self.dtype, copy=False)
        g_params = g_params.astype(self.dtype, copy=False)
        if lay.shared:
            feat = fwd.actor[-1]
            np.matmul(g_params.T, feat, out=self.g["action_head.linear.weight"])
            np.add.reduce(g_params, axis=0, out=self.g["action_head.linear.bias"])
            np.matmul(g_value.T, feat, out=self.g["value_head.weight"])
            np.add.reduce(g_value, axis=0, out=self.g["value_head.bias"])
            g_feat = (
                g_params @ self.w["action_head.linear.weight"]
                + g_value @ self.w["value_head.weight"]
            )
            layers = self._layers(self.w, "actor_torso", None)
            grads = self._layers(self.g, "actor_torso", None)
            mlp_backward(g_feat, fwd.actor, [w for w, _ in layers], act, False, grads)
            return self.grad
        assert fwd.critic is not None
        for torso, head, hidden, g in (
            ("actor_torso", "action_head.linear", fwd.actor, g_params),
            ("critic_torso", "value_head", fwd.critic, g_value),
        ):
            layers = self._layers(self.w, torso, head)
            grads = self._layers(self.g, torso, head)
            mlp_backward(g, hidden, [w for w, _ in layers], act, True, grads)
        return self.grad
