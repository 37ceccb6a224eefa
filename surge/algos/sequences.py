"""The torch learner's pieces for recurrent models (`model.core`): truncated BPTT over segments.

A batch's column is one env's segment, already a sequence ([T, N] time-major). A recurrent
model is unrolled over it from the state stored at its start (`core0`), with the state zeroed
before each step whose previous step ended an episode (`resets_before`), so the learner sees
the states the actor's policy saw (exactly so when the parameters are the behaviour
version's: tests/integration/test_recurrent_runs.py). Minibatches are whole columns, never
shuffled time steps; `ppo.burn_in` steps at the start of each column only rebuild the state
(without gradient) and are left out of the loss.

- `policy_on_sequences`: log-probs, values and states of a batch under the current
  parameters, without gradient (APPO's V-trace inputs; the states bootstrap both algorithms).
- `sequence_next_values`: the value of every step's true next state for GAE / V-trace, where
  the last observation and the final observation of a truncated episode are valued from the
  state the policy would have had there.
- `sequence_minibatches`: an epoch's minibatches of shuffled columns, evaluated with gradient.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from functools import partial

import torch
from torch import Tensor

from surge.algos.batch import RolloutBatch
from surge.models.actor_critic import ActorCritic, rows_of
from surge.models.normalize import ValueNormalizer
from surge.models.recurrent_state import resets_before

__all__ = [
    "Minibatch",
    "policy_on_sequences",
    "resets_before",
    "sequence_minibatches",
    "sequence_next_values",
]


Minibatch = tuple[Callable[[], tuple[Tensor, Tensor, Tensor]], Tensor]
"""(a function returning the minibatch's (logp, entropy, value) with gradient, called when
the learner is ready for it; the minibatch's rows of the per-sample scalars)."""


def _columns(x: Tensor, idx: Tensor | slice) -> Tensor:
    """Columns `idx` of a [T, N, ...] tensor (a copy for an index tensor, a view for a slice)."""
    return x[:, idx] if isinstance(idx, slice) else x.index_select(1, idx)


def policy_on_sequences(
    model: ActorCritic, batch: RolloutBatch, resets: Tensor, chunk: int = 64
) -> tuple[Tensor, Tensor, Tensor]:
    """(log pi(a_t|s_t, h_t) [T, N], V(s_t, h_t) [T, N], the state after each step [T, N, S])
    of the batch under the model's current parameters, without gradient, unrolled from
    `core0` over `chunk` columns at a time."""
    assert batch.core0 is not None, "a recurrent model's batch carries core0"
    T, N = batch.rewards.shape
    device = batch.rewards.device
    logp = torch.empty(T, N, dtype=batch.rewards.dtype, device=device)
    values = torch.empty_like(logp)
    states = torch.empty(T, N, model.state_size, dtype=batch.core0.dtype, device=device)
    with torch.no_grad():
        for start in range(0, N, chunk):
            cols = slice(start, start + chunk)
            obs = {k: x[:, cols] for k, x in batch.obs.items()}
            x, states[:, cols] = model.unroll(obs, batch.core0[cols], resets[:, cols])
            actions = rows_of({"a": batch.actions[:, cols]})["a"]
            lp, _, v = model.heads(x, actions, rows_of(obs))
            logp[:, cols], values[:, cols] = lp.view(T, -1), v.view(T, -1)
    return logp, values, states


def sequence_next_values(
    model: ActorCritic,
    batch: RolloutBatch,
    values: Tensor,
    states: Tensor,
    value_norm: ValueNormalizer | None = None,
) -> Tensor:
    """[T, N] values of the true next state of every step, for `gae` / `vtrace`, as
    ppo.bootstrap_next_values computes them for a feed-forward model: `values` shifted by
    one step; V(last_obs) from the state after the last step, zeroed where an episode ended
    there (the state the next segment starts from); V(final obs) of a truncated step from
    the state after that step (the episode's own, not reset). With `value_norm` the
    critic's outputs are mapped back to reward units."""
    ended = batch.terminated[-1] | batch.truncated[-1]

    def critic(obs: dict[str, Tensor], state: Tensor) -> Tensor:
        v = model.value(obs, state).to(values.dtype)
        return v if value_norm is None else value_norm.denormalize(v)

    with torch.no_grad():
        last_state = states[-1] * (~ended).unsqueeze(-1).to(states.dtype)
        next_values = torch.cat([values[1:], critic(batch.last_obs, last_state)[None]], dim=0)
        if bool(batch.truncated.any()):
            where = batch.truncated.nonzero(as_tuple=True)
            final = {k: x[where] for k, x in batch.final_obs.items()}
            next_values[where] = critic(final, states[where])
    return next_values


def sequence_minibatches(
    model: ActorCritic,
    batch: RolloutBatch,
    resets: Tensor,
    scalars: Tensor,
    minibatches: int,
    burn_in: int,
    generator: torch.Generator,
    active: Tensor | None = None,
) -> Iterator[Minibatch]:
    """One epoch: the columns shuffled into `minibatches` groups of whole sequences; per
    group a `Minibatch` whose (logp, entropy, value) and rows of `scalars` are [(T -
    burn_in) * B] time-major (`scalars`: [T, N, k] -> [(T - burn_in) * B, k]). With
    `active` ([T, N] bool: a multi-agent row whose agent was in its episode) only the
    active steps are returned (the unroll still runs over all of them); a group with none
    is skipped."""
    assert batch.core0 is not None, "a recurrent model's batch carries core0"
    N = batch.rewards.shape[1]
    if N % minibatches:
        raise ValueError(f"{N} sequences do not divide into {minibatches} minibatches")
    size = N // minibatches
    perm = torch.randperm(N, generator=generator).to(scalars.device)  # the CPU's draw
    for start in range(0, N, size):
        idx = perm[start : start + size]
        obs = {k: _columns(x, idx) for k, x in batch.obs.items()}
        evaluate = partial(
            model.evaluate_sequence,
            obs,
            _columns(batch.actions, idx),
            batch.core0.index_select(0, idx),
            _columns(resets, idx),
            burn_in,
        )
        rows = _columns(scalars[burn_in:], idx).reshape(-1, scalars.shape[-1])
        if active is not None:
            keep = _columns(active[burn_in:], idx).reshape(-1).nonzero().squeeze(1)
            if len(keep) == 0:
                continue
            evaluate = partial(_select, evaluate, keep)
            rows = rows[keep]
        yield evaluate, rows


def _select(
    evaluate: Callable[[], tuple[Tensor, Tensor, Tensor]], keep: Tensor
) -> tuple[Tensor, Tensor, Tensor]:
    logp, entropy, value = evaluate()
    return logp[keep], entropy[keep], value[keep]
