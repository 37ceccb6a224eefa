"""PPO / APPO in numpy for MLP models: the loss with its gradient, Adam, and the learner.

The numpy learner runs the same algorithm as `ppo.PPOUpdater` (the same targets, minibatch
loop, loss, clip and Adam) on `models.numpy_net.NumpyActorCritic`, without importing torch:
see numpy_net.py for why. tests/unit/test_numpy_learner.py checks whole updates against the
torch learner's from the same parameters and batch, both in float64.

The PPO loss's gradient, per sample i of a minibatch of B (r = exp(new_logp - old_logp),
c = clip_coef):

- policy: the surrogate takes min(A r, A clip(r, 1-c, 1+c)). Where the unclipped term is the
  smaller (or they tie, which is every r inside the range), d/d new_logp = -A r / B. Where
  the clipped term is strictly smaller, r is outside the range, the clip is constant in r,
  and the gradient is 0.
- value (clipped): the loss takes max((V-R)^2, (V_clip-R)^2). Inside old +- c, V_clip is V
  (computed as old + (V - old), which rounding may leave a hair off V, so either error may
  come out the larger) and both terms give d/dV = vf_coef (V - R) / B. Outside, V_clip is
  constant in V: the gradient is that where the unclipped error is the larger, else 0.
  Unclipped: always vf_coef (V - R) / B.
- entropy: -ent_coef / B each; with ent_coef 0 no gradient flows into the entropy at all.

These match autograd of the reference functions (losses.py) everywhere except on
measure-zero ties outside the clip range, where torch splits a max's gradient in half.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from surge.algos.advantages import gae, normalize, vtrace, vtrace_stats
from surge.algos.batch import RolloutBatch
from surge.algos.ppo_common import (
    APPROX_KL,
    STATS,
    check_minibatches,
    minibatch_bounds,
    trained_rows,
)
from surge.config.schema import APPOConfig, PPOConfig
from surge.models.normalize import ValueNormalizer
from surge.models.numpy_net import NumpyActorCritic


def _mean(x: np.ndarray) -> float:
    # np.add.reduce: ndarray.mean's Python wrapper costs about 4 us on a [256] vector
    return float(np.add.reduce(x)) / x.size


def _clip(x: np.ndarray, low: float, high: float) -> np.ndarray:
    return np.minimum(np.maximum(x, low), high)  # np.clip's wrapper is as slow as .mean's


@dataclass
class LossAndGrads:
    loss: float
    stats: np.ndarray
    """[5] float32, in `LOSS_STATS` order."""
    grad_logp: np.ndarray
    grad_entropy: float | None
    """The same for every sample; None when ent_coef is 0 (no gradient into the entropy)."""
    grad_values: np.ndarray


def ppo_loss_numpy(
    new_logp: np.ndarray,
    entropy: np.ndarray,
    new_values: np.ndarray,
    old_logp: np.ndarray,
    advantages: np.ndarray,
    old_values: np.ndarray,
    returns: np.ndarray,
    *,
    clip_coef: float,
    clip_vloss: bool,
    ent_coef: float,
    vf_coef: float,
    norm_adv: bool,
) -> LossAndGrads:
    """`clipped_surrogate_loss - ent_coef * mean(entropy) + vf_coef * value_loss` (losses.py)
    of a minibatch (all [B] float32), after advantage normalisation when `norm_adv`, with its
    gradients with respect to the first three inputs."""
    adv = normalize(advantages) if norm_adv else advantages
    log_ratio = new_logp - old_logp
    ratio = np.exp(log_ratio)
    surrogate = adv * ratio
    clipped = adv * _clip(ratio, 1.0 - clip_coef, 1.0 + clip_coef)
    policy_loss = -_mean(np.minimum(surrogate, clipped))

    error = new_values - returns
    if clip_vloss:
        moved = new_values - old_values
        delta = _clip(moved, -clip_coef, clip_coef)
        clipped_error = old_values + delta - returns
        squared, clipped_squared = error * error, clipped_error * clipped_error
        value_loss = 0.5 * _mean(np.maximum(squared, clipped_squared))
        # Zero only where the clip binds (V outside old +- c) and the clipped error is larger;
        # inside, comparing the two squares would let rounding drop the gradient.
        value_grad = error * ((np.abs(moved) <= clip_coef) | (squared >= clipped_squared))
    else:
        value_loss = 0.5 * _mean(error * error)
        value_grad = error
    mean_entropy = _mean(entropy)
    loss = policy_loss - ent_coef * mean_entropy + vf_coef * value_loss

    approx_kl = _mean((ratio - 1.0) - log_ratio)
    clipfrac = np.count_nonzero(np.abs(ratio - 1.0) > clip_coef) / ratio.size
    stats = np.array([policy_loss, value_loss, mean_entropy, approx_kl, clipfrac], np.float32)
    typed = new_logp.dtype.type  # float32 constants keep float32 arrays float32
    scale = 1.0 / ratio.size
    return LossAndGrads(
        loss=loss,
        stats=stats,
        grad_logp=(surrogate * (surrogate <= clipped)) * typed(-scale),
        grad_entropy=None if ent_coef == 0.0 else -ent_coef * float(typed(scale)),
        grad_values=value_grad * typed(vf_coef * scale),
    )


def explained_variance(pred: np.ndarray, target: np.ndarray) -> float:
    """1 - Var(target - pred) / Var(target); NaN when the target has no variance."""
    var_target = float(np.var(target))
    if var_target == 0:
        return float("nan")
    return 1.0 - float(np.var(target - pred)) / var_target


def clip_by_global_norm(grad: np.ndarray, max_norm: float) -> float:
    """Scale `grad` in place so that its L2 norm is at most `max_norm` (torch's rule: factor
    max_norm / (norm + 1e-6), never above 1); return the norm before clipping."""
    norm = float(np.sqrt(np.dot(grad, grad)))
    factor = max_norm / (norm + 1e-6)
    if factor < 1.0:
        grad *= grad.dtype.type(factor)
    return norm


class NumpyAdam:
    """Adam over one flat float32 (or float64) vector, with torch.optim.Adam's update (bias
    corrections applied to the step size and the denominator, eps outside the square root)."""

    def __init__(
        self,
        params: np.ndarray,
        lr: float,
        eps: float = 1e-8,
        betas: tuple[float, float] = (0.9, 0.999),
    ) -> None:
        self.params = params
        self.lr = lr
        self.eps = eps
        self.betas = betas
        self.exp_avg = np.zeros_like(params)
        self.exp_avg_sq = np.zeros_like(params)
        self.steps = 0
        self._scratch = np.empty_like(params)

    def step(self, grad: np.ndarray) -> None:
        b1, b2 = self.betas
        self.steps += 1
        m, v, tmp = self.exp_avg, self.exp_avg_sq, self._scratch
        typed = self.params.dtype.type
        m *= typed(b1)
        np.multiply(grad, typed(1.0 - b1), out=tmp)
        m += tmp
        v *= typed(b2)
        np.multiply(grad, grad, out=tmp)
        tmp *= typed(1.0 - b2)
        v += tmp
        bias1 = 1.0 - b1**self.steps
        bias2_sqrt = (1.0 - b2**self.steps) ** 0.5
        np.sqrt(v, out=tmp)
        tmp *= typed(1.0 / bias2_sqrt)
        tmp += typed(self.eps)
        np.divide(m, tmp, out=tmp)
        tmp *= typed(self.lr / bias1)
        self.params -= tmp

    def state_dict(self, split: Callable[[np.ndarray], list[np.ndarray]]) -> dict[str, Any]:
        """In FusedAdam's layout (algos/adam.py): per-parameter lists, via `split`."""
        n = len(split(self.exp_avg))
        return {
            "lr": self.lr,
            "steps": [np.float32(self.steps)] * n,
            "exp_avg": [m.copy() for m in split(self.exp_avg)],
            "exp_avg_sq": [v.copy() for v in split(self.exp_avg_sq)],
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        steps = {float(s) for s in state["steps"]}
        if len(steps) != 1:
            raise ValueError(f"optimizer state has different step counts per parameter: {steps}")
        self.lr = float(state["lr"])
        self.steps = int(steps.pop())
        for mine, saved in (("exp_avg", state["exp_avg"]), ("exp_avg_sq", state["exp_avg_sq"])):
            parts = [np.asarray(x, self.params.dtype).reshape(-1) for x in saved]
            flat = np.concatenate(parts) if parts else np.zeros(0, self.params.dtype)
            if flat.shape != self.params.shape:
                raise ValueError("optimizer state does not match the model's parameters")
            getattr(self, mine)[...] = flat


class NumpyPPOUpdater:
    """`ppo.PPOUpdater` on a `NumpyActorCritic`: PPO with GAE, or APPO with V-trace when
    `vtrace` is set. `rng` drives the minibatch shuffling."""

    def __init__(
        self,
        net: NumpyActorCritic,
        cfg: PPOConfig,
        rng: np.random.Generator,
        vtrace: APPOConfig | None = None,
        value_norm: ValueNormalizer | None = None,
    ) -> None:
        self.net = net
        self.cfg = cfg
        self.vtrace = vtrace
        self.rng = rng
        self.optimizer = NumpyAdam(net.flat, lr=cfg.lr, eps=cfg.adam_eps)
        self.value_norm = value_norm
        """`model.value_norm`: the critic's outputs are in these statistics' units."""

    def _value(self, obs: dict[str, np.ndarray]) -> np.ndarray:
        """V(s) in reward units."""
        v = self.net.value(obs)
        return v if self.value_norm is None else self.value_norm.denormalize(v)

    def _next_values(self, batch: RolloutBatch, values: np.ndarray) -> np.ndarray:
        """`ppo.bootstrap_next_values`: values shifted by one step, V(last obs) at the end,
        V(final obs) where an episode was truncated."""
        next_values = np.concatenate([values[1:], self._value(batch.last_obs)[None]], axis=0)
        if batch.truncated.any():
            where = np.nonzero(batch.truncated)
            final = {key: x[where] for key, x in batch.final_obs.items()}
            next_values[where] = self._value(final)
        return next_values

    def targets(
        self, batch: RolloutBatch
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, dict[str, float]]:
        """(advantages, value targets, values the value loss clips around, stats): [T, N]."""
        cfg = self.cfg
        dones = batch.terminated | batch.truncated
        if self.vtrace is None:
            next_values = self._next_values(batch, batch.values)
            adv, ret = gae(
                batch.rewards, batch.values, next_values, batch.terminated, dones,
                cfg.gamma, cfg.gae_lambda,
            )  # fmt: skip
            return adv, ret, batch.values, {}
        T, N = batch.rewards.shape
        obs = {key: _flat(x) for key, x in batch.obs.items()}
        logp, _, values, _ = self.net.evaluate(obs, _flat(batch.actions))
        logp, values = logp.reshape(T, N), values.reshape(T, N)
        if self.value_norm is not None:
            values = self.value_norm.denormalize(values)
        log_rhos = logp - batch.logp
        adv, ret = vtrace(
            batch.rewards, values, self._next_values(batch, values), batch.terminated, dones,
            log_rhos, cfg.gamma, cfg.gae_lambda, self.vtrace.rho_bar, self.vtrace.c_bar,
        )  # fmt: skip
        return adv, ret, values, vtrace_stats(log_rhos, self.vtrace.rho_bar)

    def update(self, batch: RolloutBatch, lr: float) -> dict[str, float]:
        """Train on one batch; return the stats of the update (as `PPOUpdater.update`)."""
        cfg, net = self.cfg, self.net
        T, N = batch.rewards.shape
        check_minibatches(cfg, T, N)
        train = trained_rows(batch.active)  # None: every sample trains
        samples = T * N if train is None else len(train)
        if samples == 0:
            return {"lr": float(lr)}  # no agent was in an episode: nothing to learn from

        advantages, returns, anchor_values, target_stats = self.targets(batch)
        obs = {key: _flat(x) for key, x in batch.obs.items()}
        actions = _flat(batch.actions)
        old_values, returns = _flat(anchor_values), _flat(returns)
        if self.value_norm is not None:  # the value loss works in normalised units
            self.value_norm.update(returns if train is None else returns[train])
            old_values, returns = (self.value_norm.normalize(x) for x in (old_values, returns))
        scalars = np.stack(
            [_flat(batch.logp), old_values, _flat(advantages), returns], axis=1
        ).astype(net.dtype)

        self.optimizer.lr = lr
        totals = np.zeros(len(STATS))
        steps = 0
        for _epoch in range(cfg.epochs):
            perm = self.rng.permutation(samples)
            if train is not None:
                perm = train[perm]
            epoch_obs = {key: x[perm] for key, x in obs.items()}
            epoch_actions, epoch_scalars = actions[perm], scalars[perm]
            for start, end in minibatch_bounds(samples, cfg.minibatches):
                rows = slice(start, end)
                mb = epoch_scalars[rows]
                mb_logp, mb_values, mb_adv, mb_returns = (
                    np.ascontiguousarray(mb[:, i]) for i in range(4)
                )
                new_logp, entropy, new_values, fwd = net.evaluate(
                    {key: x[rows] for key, x in epoch_obs.items()}, epoch_actions[rows]
                )
                out = ppo_loss_numpy(
                    new_logp, entropy, new_values, mb_logp, mb_adv, mb_values, mb_returns,
                    clip_coef=cfg.clip_coef, clip_vloss=cfg.clip_vloss,
                    ent_coef=cfg.ent_coef, vf_coef=cfg.vf_coef, norm_adv=cfg.norm_adv,
                )  # fmt: skip
                g_entropy = (
                    None
                    if out.grad_entropy is None
                    else np.full(len(new_logp), out.grad_entropy, net.dtype)
                )
                grad = net.backward(fwd, out.grad_logp, g_entropy, out.grad_values)
                grad_norm = clip_by_global_norm(grad, cfg.max_grad_norm)
                self.optimizer.step(grad)
                steps += 1
                totals[:-1] += out.stats
                totals[-1] += grad_norm
            if cfg.target_kl is not None and float(out.stats[APPROX_KL]) > cfg.target_kl:
                break

        stats = {key: float(total) / steps for key, total in zip(STATS, totals, strict=True)}
        if train is not None:
            old_values, returns = old_values[train], returns[train]
        stats["explained_variance"] = explained_variance(old_values, returns)
        stats["lr"] = float(lr)
        stats.update(target_stats)
        return stats

    def state_dict(self) -> dict[str, Any]:
        """Optimizer and shuffling-generator state (numpy arrays and plain Python)."""
        state = {
            "optimizer": self.optimizer.state_dict(self.split),
            "generator": self.rng.bit_generator.state,
        }
        if self.value_norm is not None:
            state["value_norm"] = self.value_norm.state_dict()
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.optimizer.load_state_dict(state["optimizer"])
        self.rng.bit_generator.state = state["generator"]
        if self.value_norm is not None:
            self.value_norm.load_state_dict(state["value_norm"])

    def split(self, flat: np.ndarray) -> list[np.ndarray]:
        """Views of a buffer laid out like the parameters, one per parameter tensor."""
        views = self.net.views(flat)
        return [views[name] for name, _ in self.net.layout.params]


def _flat(x: np.ndarray) -> np.ndarray:
    """[T, N, ...] -> [T*N, ...]."""
    return x.reshape(x.shape[0] * x.shape[1], *x.shape[2:])
