"""PPO (Schulman et al. 2017): the loss terms as pure functions, and the learner that runs
the epochs of minibatch updates on one rollout batch.

Behaviour follows CleanRL's ppo.py / ppo_continuous_action.py (clipped surrogate, optionally
clipped value loss, per-minibatch advantage normalisation, global grad-norm clip, KL early
stop after an epoch), with one difference: episodes truncated by a time limit bootstrap from
the value of their final observation instead of being treated as terminal.

A recurrent model (`model.core`) trains on whole sequences: the pieces are in
algos/sequences.py (truncated BPTT from the stored state, minibatches of columns, burn-in).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from functools import partial
from typing import Any

import torch
from torch import Tensor

from surge.algos.adam import FusedAdam
from surge.algos.advantages import gae, vtrace, vtrace_stats
from surge.algos.batch import RolloutBatch
from surge.algos.cuda_graph import GraphedStep
from surge.algos.flat_params import FlatParameters
from surge.algos.losses import explained_variance, ppo_loss
from surge.algos.ppo_common import (
    APPROX_KL,
    STATS,
    check_minibatches,
    minibatch_bounds,
    trained_rows,
)
from surge.algos.sequences import (
    Minibatch,
    policy_on_sequences,
    resets_before,
    sequence_minibatches,
    sequence_next_values,
)
from surge.config.schema import APPOConfig, PPOConfig
from surge.models.actor_critic import ActorCritic
from surge.models.normalize import ValueNormalizer

# --- the batch and the learner --------------------------------------------------------------


__all__ = ["PPOUpdater", "RolloutBatch", "bootstrap_next_values", "current_policy_on"]


def _flat(x: Tensor) -> Tensor:
    """[T, N, ...] -> [T*N, ...]."""
    return x.reshape(x.shape[0] * x.shape[1], *x.shape[2:])


def _rows(obs: dict[str, Tensor], idx: Tensor | slice | tuple[Tensor, ...]) -> dict[str, Tensor]:
    return {key: x[idx] for key, x in obs.items()}


def gather_rows(x: Tensor, idx: Tensor) -> Tensor:
    """`x[idx]` for a 1-D index `idx` into dim 0, in x's memory layout (contiguous or
    channels-last), as one `index_select` of whole rows: for a [1024, 4, 84, 84] uint8
    batch about 3 ms, where advanced indexing (`x[idx]`, which TensorIterator runs element
    by element) takes about 26 ms on one thread."""
    channels_last = x.dim() == 4 and x.is_contiguous(memory_format=torch.channels_last)
    if channels_last and not x.is_contiguous():
        nhwc = x.permute(0, 2, 3, 1)  # a contiguous view
        rows = torch.index_select(nhwc.reshape(x.shape[0], -1), 0, idx)
        return rows.view(-1, *nhwc.shape[1:]).permute(0, 3, 1, 2)
    if x.dim() > 1 and x.is_contiguous():
        return torch.index_select(x.reshape(x.shape[0], -1), 0, idx).view(-1, *x.shape[1:])
    return x[idx]


def bootstrap_next_values(
    model: ActorCritic,
    batch: RolloutBatch,
    values: Tensor | None = None,
    value_norm: ValueNormalizer | None = None,
) -> Tensor:
    """[T, N] values of the true next state of every step, for `gae` / `vtrace`.

    `values` (default: the behaviour values) shifted by one step, V(last_obs) at the end, and
    V(final obs) where the episode was truncated (only those rare entries are evaluated).
    Entries at terminated steps are whatever the shift gives; `gae` ignores them. With
    `value_norm` the critic's outputs are mapped back to reward units.
    """
    values = batch.values if values is None else values

    def critic(obs: dict[str, Tensor]) -> Tensor:
        v = model.value(obs).to(values.dtype)
        return v if value_norm is None else value_norm.denormalize(v)

    with torch.no_grad():
        next_values = torch.cat([values[1:], critic(batch.last_obs).unsqueeze(0)], dim=0)
        if bool(batch.truncated.any()):
            where = batch.truncated.nonzero(as_tuple=True)
            next_values[where] = critic(_rows(batch.final_obs, where))
    return next_values


def current_policy_on(model: ActorCritic, batch: RolloutBatch, chunk: int = 256) -> Tensor:
    """[T, N, 2]: log pi(a_t|s_t) and V(s_t) of the batch under the model's current parameters,
    without grad, in chunks: bounded memory for image observations, and activations that
    stay in cache (the Nature CNN on 1,024 Pong frames: 0.54 s of CPU in one piece, 0.35 s
    in chunks of 256)."""
    T, N = batch.rewards.shape
    obs = {key: _flat(x) for key, x in batch.obs.items()}
    actions = _flat(batch.actions)
    out = torch.empty(T * N, 2, dtype=batch.rewards.dtype, device=batch.rewards.device)
    with torch.no_grad():
        for start in range(0, T * N, chunk):
            rows = slice(start, start + chunk)
            logp, _, value = model.evaluate(_rows(obs, rows), actions[rows])
            out[rows, 0], out[rows, 1] = logp, value
    return out.reshape(T, N, 2)


class PPOUpdater:
    """Runs PPO updates on rollout batches; owns the Adam optimizer.

    With `vtrace` set this is APPO (IMPALA's V-trace inside PPO, as in Sample Factory): the
    value targets and advantages are V-trace's, computed with the current value function and
    corrected by pi/mu for the policy lag of the batch; the clipped ratio is taken against the
    behaviour policy mu. Without it, GAE from the behaviour values (plain PPO).

    `generator` drives the minibatch shuffling, so two learners built from the same initial
    parameters and generator seed produce identical parameters after identical batches.
    """

    def __init__(
        self,
        model: ActorCritic,
        cfg: PPOConfig,
        generator: torch.Generator,
        vtrace: APPOConfig | None = None,
        value_norm: ValueNormalizer | None = None,
    ) -> None:
        self.model = model
        self.cfg = cfg
        self.vtrace = vtrace
        self.generator = generator
        self.value_norm = value_norm
        """`model.value_norm`: the critic's outputs are in these statistics' units."""
        # Parameters and gradients live in two flat buffers: zeroing, the grad-norm clip and
        # Adam are a few kernels per minibatch instead of a few per parameter tensor, and
        # there is no torch.optim import cost at start-up (see algos/adam.py).
        self.flat = FlatParameters(model)
        self.optimizer = FusedAdam(self.flat, lr=cfg.lr, eps=cfg.adam_eps)
        self.threads: Callable[[], int] | None = None
        """If set, the torch thread count for what comes next, asked at the start of the
        update and before every minibatch (the trainer's `workers.trainer_threads_alone`)."""
        # Summed as one detached tensor and read out once at the end of an update: one sync
        # per update, not one per minibatch, when the model lives on a GPU.
        self.totals = torch.zeros(len(STATS), device=self.flat.data.device)
        self.graphs: dict[tuple[Any, ...], GraphedStep] = {}
        """Captured minibatch steps (algos/cuda_graph.py), by their inputs' shapes."""
        self.graph_error: str | None = None
        """Why a capture failed; the minibatch steps then run eagerly."""

    def _set_threads(self) -> int:
        if self.threads is None:
            return 0
        n = self.threads()
        if n != torch.get_num_threads():
            torch.set_num_threads(n)
        return n

    def targets(self, batch: RolloutBatch) -> tuple[Tensor, Tensor, Tensor, dict[str, float]]:
        """(advantages, value targets, values the value loss clips around, stats): [T, N]."""
        cfg = self.cfg
        dones = batch.terminated | batch.truncated
        norm = self.value_norm
        if self.model.core is not None:  # recurrent: unrolled from core0 (algos/sequences.py)
            logp, values, states = policy_on_sequences(
                self.model, batch, resets_before(batch.terminated, batch.truncated)
            )
            if norm is not None:
                values = norm.denormalize(values)
            behaviour = batch.values if self.vtrace is None else values
            next_values = sequence_next_values(self.model, batch, behaviour, states, norm)
        elif self.vtrace is None:
            next_values = bootstrap_next_values(self.model, batch, value_norm=norm)
        else:
            current = current_policy_on(self.model, batch)
            logp, values = current[..., 0], current[..., 1]
            if norm is not None:
                values = norm.denormalize(values)
            next_values = bootstrap_next_values(self.model, batch, values, norm)
        if self.vtrace is None:
            adv, ret = gae(
                batch.rewards,
                batch.values,
                next_values,
                batch.terminated,
                dones,
                cfg.gamma,
                cfg.gae_lambda,
            )
            return adv, ret, batch.values, {}
        log_rhos = logp - batch.logp
        adv, ret = vtrace(
            batch.rewards,
            values,
            next_values,
            batch.terminated,
            dones,
            log_rhos,
            cfg.gamma,
            cfg.gae_lambda,
            self.vtrace.rho_bar,
            self.vtrace.c_bar,
        )
        return adv, ret, values, vtrace_stats(log_rhos, self.vtrace.rho_bar)

    def update(self, batch: RolloutBatch, lr: float) -> dict[str, float]:
        """Train on one batch; return the stats of the update.

        Losses, entropy, approx_kl, clipfrac and grad_norm are means over every minibatch
        step taken (CleanRL logs the last minibatch's values; the mean is less noisy).
        explained_variance compares the values the value loss clips around with the targets.
        """
        cfg = self.cfg
        T, N = batch.rewards.shape
        check_minibatches(cfg, T, N)
        rows_np = trained_rows(batch.active)  # None: every sample trains
        device = batch.rewards.device
        train = None if rows_np is None else torch.from_numpy(rows_np).to(device)
        samples = T * N if train is None else len(train)
        if samples == 0:
            return {"lr": float(lr)}  # no agent was in an episode: nothing to learn from

        self._set_threads()
        advantages, returns, anchor_values, target_stats = self.targets(batch)
        old_values, returns = _flat(anchor_values), _flat(returns)
        if self.value_norm is not None:  # the value loss works in normalised units
            self.value_norm.update((returns if train is None else returns[train]).cpu().numpy())
            old_values, returns = (self.value_norm.normalize(x) for x in (old_values, returns))
        # The per-sample scalars in one [T * N, 4] table, shuffled with the samples.
        scalars = torch.stack(
            [_flat(batch.logp), old_values, _flat(advantages), returns], dim=1
        ).to(batch.rewards.dtype)
        epoch: Callable[[], Iterator[Any]]
        run: Callable[[Any], Tensor]
        if self.model.core is None:
            epoch = self._row_minibatches(batch, scalars, train, samples)
            run = self._graphed_row_step if self._graphs_apply(train) else self._row_step
        else:  # whole sequences (algos/sequences.py)
            active = None if train is None else torch.from_numpy(batch.active).to(device)  # type: ignore[arg-type]
            epoch = partial(
                sequence_minibatches,
                self.model, batch, resets_before(batch.terminated, batch.truncated),
                scalars.view(T, N, -1), cfg.minibatches, cfg.burn_in, self.generator, active,
            )  # fmt: skip
            run = self._sequence_step

        self.optimizer.lr = lr
        self.totals.zero_()
        steps = threads = 0
        minibatch: Any  # the inputs `run` takes: a row step's dict or a sequence Minibatch
        for _epoch in range(cfg.epochs):
            for minibatch in epoch():
                threads += self._set_threads()
                loss_stats = run(minibatch)
                steps += 1
            if cfg.target_kl is not None and float(loss_stats[APPROX_KL]) > cfg.target_kl:
                break

        if steps == 0:  # every minibatch of sequences was inactive past the burn-in
            return {"lr": float(lr), **target_stats}
        totals = self.totals.tolist()  # the update's one read from the device
        stats = {key: total / steps for key, total in zip(STATS, totals, strict=True)}
        if train is not None:
            old_values, returns = old_values[train], returns[train]
        stats["explained_variance"] = float(explained_variance(old_values, returns))
        stats["lr"] = float(lr)
        stats.update(target_stats)
        if self.threads is not None:
            stats["learner_threads"] = threads / steps  # mean over the minibatches
        return stats

    def _step(
        self, evaluate: Callable[[], tuple[Tensor, Tensor, Tensor]], scalars: Tensor
    ) -> Tensor:
        """One minibatch's optimiser step: `evaluate()` gives its (logp, entropy, value) with
        gradient, `scalars` its [B, 4] rows (behaviour logp, old values, advantages,
        returns). Adds its stats to `totals` and returns its loss stats (on the device)."""
        cfg = self.cfg
        new_logp, entropy, new_values = evaluate()
        mb_logp, mb_values, mb_adv, mb_returns = scalars.unbind(1)
        # On CPU one autograd node for the whole loss (algos/losses.py): the value and
        # gradients of the reference functions, at a fraction of the op cost.
        loss, loss_stats = ppo_loss(
            new_logp, entropy, new_values, mb_logp, mb_adv, mb_values, mb_returns,
            clip_coef=cfg.clip_coef, clip_vloss=cfg.clip_vloss,
            ent_coef=cfg.ent_coef, vf_coef=cfg.vf_coef, norm_adv=cfg.norm_adv,
        )  # fmt: skip
        self.optimizer.zero_grad()
        torch.autograd.backward(loss)
        grad_norm = self.flat.clip_grad_norm_(cfg.max_grad_norm)
        self.optimizer.step()
        self.totals[:-1] += loss_stats
        self.totals[-1] += grad_norm
        return loss_stats

    def _sequence_step(self, minibatch: Minibatch) -> Tensor:
        evaluate, scalars = minibatch
        return self._step(evaluate, scalars)

    def _row_step(self, inputs: dict[str, Tensor]) -> Tensor:
        """The step of a feed-forward minibatch: `inputs` holds its observation fields (keys
        `obs/<field>`), `actions` and `scalars`."""
        obs = {key[4:]: x for key, x in inputs.items() if key.startswith("obs/")}
        return self._step(partial(self.model.evaluate, obs, inputs["actions"]), inputs["scalars"])

    def _graphs_apply(self, train: Tensor | None) -> bool:
        """Whether this update's row steps replay CUDA graphs: `ppo.cuda_graphs` on a CUDA
        learner, with every row training (inactive rows make minibatches of varying size)."""
        return self.cfg.cuda_graphs and train is None and self.totals.device.type == "cuda"

    def _graphed_row_step(self, inputs: dict[str, Tensor]) -> Tensor:
        """`_row_step` replayed from a CUDA graph captured on the first minibatch of its shape
        (`ppo.cuda_graphs`); eager if a capture failed (`graph_error` says why)."""
        if self.graph_error is not None:
            return self._row_step(inputs)
        key = tuple((name, tuple(x.shape)) for name, x in inputs.items())
        graph = self.graphs.get(key)
        if graph is None:
            optimizer = self.optimizer
            state = [self.flat.data, self.flat.grad, optimizer.exp_avg, optimizer.exp_avg_sq]
            state += [optimizer.step_count, self.totals]
            try:
                graph = self.graphs[key] = GraphedStep(self._row_step, inputs, state)
            except RuntimeError as e:  # the eager step is the same maths
                self.graph_error = f"{type(e).__name__}: {e}"
                print(
                    f"ppo.cuda_graphs: capturing the minibatch step failed ({self.graph_error}); "
                    "the steps run eagerly",
                    file=sys.stderr,
                )
                return self._row_step(inputs)
        return graph(inputs)

    def _row_minibatches(
        self, batch: RolloutBatch, scalars: Tensor, train: Tensor | None, samples: int
    ) -> Callable[[], Iterator[dict[str, Tensor]]]:
        """A feed-forward model's epochs: each shuffles the samples that train (`train`: their
        flat indices, None: all [T * N]) and yields, per minibatch, the inputs of `_row_step`:
        its observation fields, actions and rows of `scalars`."""
        # The encoder's own layout (channels-last frames for the CNN), made once per batch
        # rather than once per minibatch of every epoch.
        obs = self.model.encoder.prepare({key: _flat(x) for key, x in batch.obs.items()})
        actions = _flat(batch.actions)

        def epoch() -> Iterator[dict[str, Tensor]]:
            # Each epoch shuffles the [size, 4] table with one gather, and every minibatch
            # is a slice of the shuffled copy (a view).
            # drawn on the CPU by the learner's generator (the same order on any device)
            perm = torch.randperm(samples, generator=self.generator).to(scalars.device)
            if train is not None:
                perm = train[perm]
            epoch_obs = {key: gather_rows(x, perm) for key, x in obs.items()}
            epoch_actions, epoch_scalars = gather_rows(actions, perm), gather_rows(scalars, perm)
            for start, end in minibatch_bounds(samples, self.cfg.minibatches):
                rows = slice(start, end)
                inputs = {f"obs/{key}": x[rows] for key, x in epoch_obs.items()}
                yield {**inputs, "actions": epoch_actions[rows], "scalars": epoch_scalars[rows]}

        return epoch

    def state_dict(self) -> dict[str, Any]:
        """Optimizer and shuffling-generator state: tensors and plain Python only, so it
        loads with `torch.load(weights_only=True)`. The model's parameters are the caller's."""
        state = {"optimizer": self.optimizer.state_dict(), "generator": self.generator.get_state()}
        if self.value_norm is not None:
            state["value_norm"] = self.value_norm.state_dict()
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.optimizer.load_state_dict(state["optimizer"])
        self.generator.set_state(state["generator"])
        if self.value_norm is not None:
            self.value_norm.load_state_dict(state["value_norm"])
